"""How many processes play a drill's traffic agents, and which hosts each
plays (pure): the drill starts them so (testbed/drill/agents.py) and the
capacity plan prices each one against a core (budget.py).

One process per core by default, each playing its share of the hosts.
Fewer processes cost far less CPU per frame than one per host: a pass of
a process's loop takes in the frames of all its hosts with one sleep and
one select(), and fewer processes take turns on the cores. On a 2-core
machine (docs/numbers.md) two processes took 16-20 us per frame where one
per host took 24-28, and a 32-host ring's whole cost fell by a third. A
process short of CPU falls behind in reading; the trust gate's
agent_reading check measures that, so it cannot pass unseen."""

PROCESSES_ENV = "HPNLAB_AGENT_PROCESSES"


def process_count(hosts, cores, asked=None):
    """How many agent processes play `hosts` hosts on a machine of `cores`
    cores: one per core unless `asked` (the environment's
    HPNLAB_AGENT_PROCESSES) says how many; never more than one per host."""
    if not asked:
        return max(1, min(cores, hosts))
    try:
        n = int(asked)
    except ValueError:
        raise ValueError(f"{PROCESSES_ENV}: expected a whole number of processes, got {asked!r}") from None
    if n < 1:
        raise ValueError(f"{PROCESSES_ENV}: expected at least 1 process, got {n}")
    return max(1, min(n, hosts))


def host_groups(hosts, n):
    """`hosts` dealt out over n processes, round-robin in the order given:
    the ranks of a job, consecutive hosts, spread over the processes."""
    return [list(hosts[i::n]) for i in range(n)]
