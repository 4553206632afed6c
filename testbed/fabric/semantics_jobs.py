"""Semantic checks on a scenario's training jobs (see semantics.py): names
unique, hosts that exist, sizes and times in range, groups and NIC ports
that fit the hosts, and options that need something else in the file."""

from .model import Fabric
from .problems import Problem, seconds
from .records import CruxRunning, Job
from .semantics import MAX_DURATION_S, after_the_end, host_problem
from .units import format_time

MAX_JOB_BYTES = 1_000_000_000  # one job's bytes per iteration after scaling


def job_problems(
    file: str, raws: list, jobs: list[Job], duration: float, fabric: Fabric, has_queues: bool = False
) -> list[Problem]:
    """Every problem of every job, each job's together in the order of the
    file; groups and ports are checked only on jobs whose hosts all exist."""
    problems, seen = [], set()
    for i, (_raw, j) in enumerate(zip(raws, jobs)):
        here = f"jobs[{i}]"
        if j.name in seen:
            problems.append(Problem(file, f"{here}.name", f"job name {j.name!r} is used twice"))
        seen.add(j.name)
        bad_hosts = _host_problems(file, here, j, fabric)
        problems += bad_hosts
        problems += _size_problems(file, here, j, duration, fabric)
        if not bad_hosts:
            problems += _layout_problems(file, here, j, fabric)
            problems += _via_problems(file, here, j, fabric)
        problems += _option_problems(file, here, j, has_queues)
    return problems


def _host_problems(file: str, here: str, job: Job, fabric: Fabric) -> list[Problem]:
    problems = []
    for k, h in enumerate(job.hosts):
        why = host_problem(fabric, h)
        if why:
            problems.append(Problem(file, f"{here}.hosts[{k}]", why))
    return problems


def _size_problems(file: str, here: str, job: Job, duration: float, fabric: Fabric) -> list[Problem]:
    """Bytes, compute time and start in range; a rank count the collective takes."""
    problems = []
    n = len(job.hosts)
    if job.bytes > MAX_JOB_BYTES:
        problems.append(
            Problem(
                file,
                f"{here}.bytes",
                f"expected at most {MAX_JOB_BYTES} bytes "
                f"per iteration after scaling by {fabric.scale:g}, got {job.bytes}",
            )
        )
    if job.compute_s > MAX_DURATION_S:
        problems.append(
            Problem(
                file,
                f"{here}.compute",
                f"expected at most {seconds(MAX_DURATION_S)}, got {seconds(job.compute_s)}",
            )
        )
    problems += after_the_end(file, f"{here}.start", "a start", job.start, duration)
    if job.collective == "halving-doubling" and n & (n - 1):
        problems.append(
            Problem(file, f"{here}.hosts", f"halving-doubling needs a power-of-two number of ranks, got {n}")
        )
    if job.bytes < n:
        problems.append(
            Problem(
                file,
                f"{here}.bytes",
                f"expected at least one byte per rank after "
                f"scaling by {fabric.scale:g}, got {job.bytes} bytes for {n} ranks",
            )
        )
    return problems


def _layout_problems(file: str, here: str, job: Job, fabric: Fabric) -> list[Problem]:
    """Groups that split the job's hosts, and a NIC port every host has."""
    problems = []
    if job.groups is not None:
        flat = [h for g in job.groups for h in g]
        if sorted(flat) != sorted(job.hosts) or len(flat) != len(set(flat)):
            problems.append(
                Problem(
                    file,
                    f"{here}.groups",
                    "expected groups that split the job's hosts, each host in exactly one group",
                )
            )
    if job.port is not None:
        ports = min(len(fabric.nics_of(h)[0].ports) for h in job.hosts)
        if job.port >= ports:
            problems.append(
                Problem(
                    file,
                    f"{here}.port",
                    f"expected a NIC port below {ports} "
                    f"(the job's hosts have {ports} port(s) per NIC), got {job.port}",
                )
            )
    return problems


def _via_problems(file: str, here: str, job: Job, fabric: Fabric) -> list[Problem]:
    """A hand-written path policy: rules with paths: via (and only then),
    each naming a connection of the job's hosts and switches of the fabric."""
    if job.paths != "via":
        if job.via:
            return [Problem(file, f"{here}.via", f"via rules apply to paths: via only, not {job.paths}")]
        return []
    if not job.via:
        return [
            Problem(file, f"{here}.via", "expected via rules with paths: via (e.g. via: {s0h0>s1h0: a0n0})")
        ]
    problems, hosts = [], set(job.hosts)
    for key, switches in job.via:
        where = f"{here}.via.{key}"
        ends = key.split(">")
        strangers = [h for h in ends if h not in hosts]
        if strangers:
            problems.append(Problem(file, where, f"expected hosts of this job, got {strangers[0]!r}"))
        elif len(ends) == 2 and ends[0] == ends[1]:
            problems.append(
                Problem(file, where, "expected a connection between two hosts, got a host to itself")
            )
        for s in switches:
            node = fabric.nodes.get(s)
            if node is None or not node.is_switch:
                problems.append(Problem(file, where, f"expected switches of the fabric, got {s!r}"))
    return problems


def _option_problems(file: str, here: str, job: Job, has_queues: bool) -> list[Problem]:
    """Options that need the rest of the file: crux priorities need queue
    classes, groups the hierarchical collective."""
    problems = []
    if job.priority == "crux" and not has_queues:
        problems.append(
            Problem(
                file,
                f"{here}.priority",
                "crux priorities are compressed into "
                "the scenario's queue classes: add queues, or drop priority",
            )
        )
    if job.groups is not None and job.collective != "hierarchical":
        problems.append(
            Problem(
                file,
                f"{here}.groups",
                f"groups apply to the hierarchical collective only, not {job.collective}",
            )
        )
    return problems


# The controller reads the rules' byte counters, which Open vSwitch
# refreshes at most every 100 ms (the run sets other_config:max-revalidator
# so): reading faster sees the same count twice and a false silence. A
# window must hold enough polls to see a period.
MIN_CRUX_POLL_S = 0.1
MIN_POLLS_PER_WINDOW = 20


def crux_running_problems(
    file: str, crux: CruxRunning | None, jobs: list[Job], duration: float, has_queues: bool
) -> list[Problem]:
    """Crux as it runs needs crux jobs and queue classes to put them in,
    polls that the controller can keep up with and windows that hold
    enough of them, and time in the run to profile every job once."""
    if crux is None:
        return []
    problems = []
    mine = [j for j in jobs if j.priority == "crux"]
    if not mine:
        problems.append(Problem(file, "crux", "expected at least one job with priority: crux to schedule"))
    if not has_queues:
        problems.append(Problem(file, "crux", "expected queue classes (queues:) for Crux to put the jobs in"))
    if crux.poll_s < MIN_CRUX_POLL_S:
        problems.append(
            Problem(
                file,
                "crux.poll",
                f"expected at least {format_time(MIN_CRUX_POLL_S)}, got {format_time(crux.poll_s)}",
            )
        )
    elif crux.window_s < MIN_POLLS_PER_WINDOW * crux.poll_s:
        least = format_time(MIN_POLLS_PER_WINDOW * crux.poll_s)
        problems.append(
            Problem(
                file,
                "crux.window",
                f"expected at least {MIN_POLLS_PER_WINDOW} polls ({least}), got {format_time(crux.window_s)}",
            )
        )
    if crux.idle_s <= 0:
        problems.append(Problem(file, "crux.idle", f"expected more than 0s, got {format_time(crux.idle_s)}"))
    profiling = crux.window_s * len(mine)
    if mine and profiling >= duration:
        problems.append(
            Problem(
                file,
                "crux.window",
                f"expected the {len(mine)} crux jobs' windows ({format_time(profiling)} in all) to end "
                f"before the run does ({format_time(duration)})",
            )
        )
    return problems
