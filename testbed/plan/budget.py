"""The time dilation a scenario needs on this machine (pure): the CPU its
packets ask (testbed/plan/demand.py) priced at this machine's measured
costs (testbed/plan/calibration.py), against a budget of the cores.

At dilation N every rate is N times lower, so the packets per second, and
the CPU they ask, are N times fewer. At every moment a sender starts, two
limits must hold:
  * the whole machine: the agents' packets and the switches' packet-hops
    together within CPU_SHARE of the cores (a margin set from measured
    runs, below);
  * each process: an agent process plays its share of the hosts
    (processes.py) and runs on one core at a time, so its hosts' packets
    together within PROCESS_SHARE of one core; an iperf3 sender is a
    process of its own.
The recommendation is the smallest step of LADDER that keeps both.
"""

from dataclasses import dataclass

from testbed.fabric.dilation import AUTO

from .demand import Load, agent_hosts, loads
from .processes import host_groups, process_count

# The whole machine's share. The calibration's costs are measured in a real
# drill, so they already carry the sampler's, the controller's and the
# kernel's part of each packet. Measured on one 2-core machine
# (bench/capacity.py, docs/numbers.md): rings of 16 and 32 hosts kept
# fidelity >= 0.95 when priced at 1.1 of the cores, and the 64-host ring
# fell short there (0.888) but not at 0.74; at 70% the plan asked twice
# the dilation the 16- and 32-host rings needed. 85% stays below every
# point that fell short.
CPU_SHARE = 0.85
PROCESS_SHARE = 0.7
LADDER = (1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # ends at MAX_DILATION


@dataclass(frozen=True)
class Cost:
    """The CPU one Load asks at dilation 1, in cores."""

    load: Load
    calibration: object  # calibration.Calibration
    groups: tuple = ()  # the hosts each agent process plays (tuples of names)

    @property
    def agent_cores(self):
        return self.load.total_pps * self.calibration.agent_us_per_packet / 1e6

    @property
    def switch_cores(self):
        return self.load.packet_hops_per_s * self.calibration.switch_us_per_packet_hop / 1e6

    @property
    def cores(self):
        return self.agent_cores + self.switch_cores

    def host_cores(self):
        """{host: cores its senders are asked for}."""
        us = self.calibration.agent_us_per_packet
        return {h: pps * us / 1e6 for h, pps in self.load.host_pps().items()}

    def process_cores(self):
        """{(hosts of one process): cores it is asked for}: each agent
        process's hosts together, every other sending host alone."""
        cores = self.host_cores()
        out = {}
        for group in self.groups:
            out[group] = sum(cores.pop(h, 0.0) for h in group)
        out.update({(h,): c for h, c in cores.items()})
        return out

    @property
    def busiest_process(self):
        cores = self.process_cores()
        return max(cores, key=cores.get) if cores else None

    def fits_at(self, n):
        """Do both limits hold at dilation `n`?"""
        process = max(self.process_cores().values(), default=0.0)
        return self.cores / n <= CPU_SHARE * self.calibration.cores and process / n <= PROCESS_SHARE


@dataclass(frozen=True)
class Plan:
    scenario: str
    peak: Cost  # the moment that asks the most CPU
    costs: tuple  # every moment's Cost, in time order
    dilation: float  # the recommended one
    fits: bool  # False: not even the last step of LADDER keeps the budget

    @property
    def calibration(self):
        return self.peak.calibration

    @property
    def budget_cores(self):
        return CPU_SHARE * self.calibration.cores

    def fits_at(self, n):
        return all(c.fits_at(n) for c in self.costs)

    def to_dict(self):
        """The plan's numbers, for results.json and `hpnlab plan --json`."""
        peak, busiest = self.peak, self.peak.busiest_process
        return {
            "scenario": self.scenario,
            "dilation": self.dilation,
            "fits": self.fits,
            "peak_at": peak.load.t,
            "cores_asked": _r(peak.cores),
            "agent_cores": _r(peak.agent_cores),
            "switch_cores": _r(peak.switch_cores),
            "budget_cores": _r(self.budget_cores),
            "cpu_share": CPU_SHARE,
            "agent_processes": len(peak.groups),
            "busiest_process": list(busiest) if busiest else None,
            "busiest_process_cores": _r(peak.process_cores()[busiest]) if busiest else None,
            "process_budget_cores": PROCESS_SHARE,
            "packets_per_second": _r(peak.load.total_pps),
            "packet_hops_per_second": _r(peak.load.packet_hops_per_s),
            "host_packets_per_second": {h: _r(v) for h, v in peak.load.host_pps().items()},
            "capacity": self.calibration.describe(),
            "calibration": None if self.calibration.is_default else self.calibration.path,
            "calibration_stale": self.calibration.stale(),
        }


def _r(x):
    return round(x, 4)


def plan(sc, calibration, processes_asked=None):
    """The Plan of undilated Scenario `sc` on a machine of `calibration`,
    its agents played by as many processes as a drill there would start
    (`processes_asked`: the environment's HPNLAB_AGENT_PROCESSES)."""
    hosts = agent_hosts(sc)
    n = process_count(len(hosts), calibration.cores, processes_asked)
    groups = tuple(tuple(g) for g in host_groups(hosts, n)) if hosts else ()
    costs = tuple(Cost(load, calibration, groups) for load in loads(sc))
    peak = max(costs, key=lambda c: c.cores)
    for n in LADDER:
        if all(c.fits_at(n) for c in costs):
            return Plan(sc.name, peak, costs, dilation=float(n), fits=True)
    return Plan(sc.name, peak, costs, dilation=float(LADDER[-1]), fits=False)


def resolve(sc, override=None, load_calibration=None, processes_asked=None):
    """(N, how it was chosen) for undilated Scenario `sc`: `override` (the
    command line's --dilation) wins over the scenario's `time_dilation`;
    'auto' asks the plan, with the Calibration `load_calibration()` returns
    (called only then) and `processes_asked` as for plan()."""
    setting, by = (
        (override, "command line")
        if override is not None
        else (sc.time_dilation, "scenario" if sc.time_dilation != 1 else "default")
    )
    if setting != AUTO:
        return float(setting), {"from": by}
    p = plan(sc, load_calibration(), processes_asked)
    return p.dilation, {"from": "auto", "set_by": by, "plan": p.to_dict()}
