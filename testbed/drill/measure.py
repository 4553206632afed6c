"""The second half of `hpnlab run`: what the run recorded while the
fabric was up (RunRecord) turned into the results dict. Metrics are
measured in this machine's time, brought back to emulated time
(results/dilation.py), and judged (results/judge.py). Pure: no fabric,
so tests drive it with synthetic recordings."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from testbed.results import analytical, controller, counters, crux, dilation, emulator, pauses, probe, queues
from testbed.results.document import FabricSummary, Results
from testbed.results.flows import SETTLE_S, compute_metrics
from testbed.results.jobs import job_metrics
from testbed.results.judge import judge
from traffic.iperf import INTERVAL_S

from .announce import announcement, fabric_links
from .faults import RATE_ACTIONS, convergence_s, link_switch_ports, switch_ends

if TYPE_CHECKING:  # the flows' record only; measuring starts no iperf
    from .iperf import IperfFlows


@dataclass
class RunRecord:
    """What a drill recorded while the fabric was up."""

    t0: float  # the drill clock's zero (monotonic)
    ran_s: float  # traffic time actually run
    faults: list  # as applied, with applied_at
    problems: list  # what went wrong while running
    events: list  # the controller's events
    flows: "IperfFlows"  # read for its series() only
    samples: list
    cpu: list
    agent_results: dict | None
    capture_files: list
    datapath: str
    bringup_s: float | None
    emulator: dict = field(default_factory=dict)  # Open vSwitch CPU and packet-hops over the traffic
    queues: dict | None = None  # the queue engine's counters (drill/queue_sampler.py)
    pauses: dict | None = None  # the pause daemon's record (emulation/pfc.py)
    controller_actions: list = field(default_factory=list)  # the timeline's stops and starts
    probes: list | None = None  # what each probe sent and received (drill/probes.py)
    placement: dict | None = None  # the controller's answer to the job announcement
    announced: dict | None = None  # what the controller was told (drill/announce.py)


def results(sc, run: RunRecord, started: str, dilation_choice: dict | None = None) -> Results:
    """Measure what the run recorded, bring it back to emulated time, decide
    whether it can be trusted, and judge the expectations: the results dict."""
    fabric = sc.fabric
    m, faults, series = _measure(sc, run)
    # Measured so far: this machine's time. Judged and reported from here
    # on: emulated time, which is what the scenario's bounds are written in.
    n = fabric.time_dilation
    emulated = dilation.to_emulated(
        {
            "metrics": m,
            "faults": faults,
            "series": series,
            "duration_s": round(run.ran_s, 3),
            "duration_planned_s": sc.duration_s,
        },
        n,
    )
    m, faults, series = emulated["metrics"], emulated["faults"], emulated["series"]
    pause_recs = _pause_measures(fabric, run, m, n)
    m["controller"] = controller.record(run.events, run.t0, run.controller_actions, run.ran_s, n)
    run.problems += controller.problems(m["controller"])
    verdict = judge(m, faults, sc.expect, run.problems)
    return Results(
        scenario=sc.name,
        description=sc.description,
        scenario_file=sc.path,
        started=started,
        duration_s=emulated["duration_s"],
        duration_planned_s=emulated["duration_planned_s"],
        time_dilation=n,
        time_dilation_choice=dilation_choice or {"from": "given"},
        passed=verdict["passed"],
        trustworthy=verdict["trustworthy"],
        trust=verdict["trust"],
        fabric=FabricSummary(
            kind=fabric.kind,
            datapath=run.datapath,
            hosts=len(fabric.hosts()),
            switches=len(fabric.switches()),
            links=len(fabric.links),
            bringup_s=run.bringup_s,
        ),
        expectations=verdict["expectations"],
        metrics=m,
        faults=faults,
        series=series,
        queues=queues.to_emulated(run.queues, n),
        pauses=pause_recs,
        placement=run.placement,
        problems=run.problems,
    )


def _measure(sc, run):
    """The run's metrics in this machine's time: (metrics, faults with
    their convergence, the throughput series)."""
    fabric, faults = sc.fabric, run.faults
    for fault in faults:
        if fault["action"] not in RATE_ACTIONS:  # a rate change leaves the routes as they stand
            fault["converged_s"] = convergence_s(run.events, run.t0, fault, link_switch_ports(fabric, fault))
    per_flow, info = run.flows.series()
    series = _grid(per_flow, info, run.ran_s)
    # The NIC ports of the hosts sampled (those that send): a dual-ToR host's
    # traffic moving from one port to the other when a link fails.
    port_info = _sampled_host_ports(fabric, run.samples)
    series["ports"] = counters.port_series(run.samples, port_info, len(series["t"]), INTERVAL_S)
    series["port_info"] = port_info
    rates, names = counters.egress_rates(fabric)
    fid_links = counters.fidelity(
        run.samples,
        rates,
        names,
        counters.egress_owners(fabric),
        counters.fault_edges(fabric, faults, SETTLE_S),
        frame_bytes=fabric.mtu + 14,
        shares=counters.rate_shares(fabric, faults),
    )
    m = compute_metrics(series, info, faults, run.ran_s, fid_links)
    m["queue_drops"] = counters.queue_drops(run.samples, names)
    # where the machine itself dropped frames, as the kernel counted them
    # (testbed/drill/cost.py): what to look at when loss is unexplained
    m["emulator_drops"] = {k: run.emulator.get(k) for k in ("ovs_socket_drops", "backlog_drops")}
    m["emulator_hold"] = emulator.emulator_hold(fabric, run.emulator.get("ovs_held_bytes"))
    if run.queues:
        m["queue_drops"].update(queues.class_drops(run.queues))
        m["classes"] = queues.class_totals(run.queues)
        m["queue_telemetry"] = {k: run.queues[k] for k in ("sample_hz", "samples", "cpu_share")}
    ran = crux.record(run.events, run.t0)
    if ran is not None:
        m["crux"] = ran
    if sc.jobs:
        _job_measures(sc, run, m, faults)
    if run.probes is not None:
        m["probe"] = probe.probe_results(
            run.probes,
            faults,
            run.t0,
            run.ran_s,
            run.samples,
            lambda f: [e.ifname for e in switch_ends(fabric, f)],
        )
        m.update(probe.gap_metrics(m["probe"]))
    m["host_cpu"] = counters.cpu_summary(run.cpu)
    if ran is not None:
        _crux_ratios(ran, m.get("jobs", {}))
    return m, faults, series


def _sampled_host_ports(fabric, samples) -> dict:
    """{ifname: {host, to}} for the hosts' NIC ports whose counters were
    sampled (those of the hosts that send)."""
    sampled = set().union(*(c.keys() for _, c in samples)) if samples else set()
    return {
        link.end(h.name).ifname: {"host": h.name, "to": link.other(h.name).node}
        for h in fabric.hosts()
        for link in fabric.links_of(h.name)
        if link.end(h.name).ifname in sampled
    }


def _crux_ratios(ran: dict, jobs: dict) -> None:
    """Each job's measured computation and bytes per iteration over what it
    declared, as the running Crux scheduler saw them, into `jobs`' metrics."""
    for name, seen in ran["jobs"].items():
        ratio = seen.get("ratio") or {}
        if name in jobs:
            jm = jobs[name]
            jm["crux_compute_ratio"], jm["crux_bytes_ratio"] = ratio.get("compute"), ratio.get("bytes")
            # computation per byte, measured over declared: the intensity's
            # ratio on the same paths, which a sampling that merges or
            # splits periods leaves alone (both parts move together)
            both = jm["crux_compute_ratio"] is not None and jm["crux_bytes_ratio"]
            jm["crux_intensity_ratio"] = (
                round(jm["crux_compute_ratio"] / jm["crux_bytes_ratio"], 3) if both else None
            )


def _job_measures(sc, run, m, faults):
    """Into metrics `m`: each job's iterations and the links it used, the
    traffic agents' own pacing, and any loss the emulator caused."""
    fabric = sc.fabric
    rate = analytical.goodput_bps(fabric)
    dc_of = {h.name: h.dc for h in fabric.hosts()}
    m.update(job_metrics(sc.jobs, run.agent_results, rate, faults, run.ran_s, dc_of, fabric))
    spread_over = fabric_links(fabric, run.announced or announcement(fabric, sc.jobs))
    for name, jm in m["jobs"].items():
        if jm.get("window_s"):
            jm["dci_bytes"] = counters.dci_bytes(fabric, run.samples, *jm["window_s"])
            # how evenly the job's bytes spread over the links it could use
            jm["link_load"] = counters.egress_bytes(run.samples, spread_over[name], *jm["window_s"])
            jm["link_load_max_mean"] = counters.max_mean(jm["link_load"])
    paused = pauses.paused_intervals(run.pauses) if run.pauses else None
    m["generators"] = emulator.generator_metrics(run.agent_results, paused)
    emulator.fold_generators(m["fidelity"], m["generators"])
    drops = m["emulator_drops"]
    lost = emulator.unexplained_loss(
        m["jobs"], m["queue_drops"], faults, m["generators"]["rx_overflows"], drops, m.get("crux")
    )
    if lost:
        lost["emulator_drops"] = drops
        m["fidelity"]["unexplained_loss"] = lost
    m["dci_bytes"] = counters.dci_bytes(fabric, run.samples)
    m["cpu_per_packet"] = counters.cpu_per_packet(run.agent_results, run.emulator)


def _pause_measures(fabric, run, m, n):
    """The pause daemon's record in emulated time (None without lossless
    classes); its summary and per-class totals into metrics `m`."""
    if run.pauses is None:
        return None
    class_names = [c.name for c in fabric.queues.classes]
    recs = pauses.to_emulated(pauses.records(run.pauses, run.t0, class_names), n)
    m["pfc"] = pauses.summary(
        recs,
        run.pauses.get("events", 0),
        run.pauses.get("errors", ()),
        run.pauses.get("scheduling"),
    )
    totals = pauses.class_totals(recs)
    for c in fabric.queues.classes:
        if c.pfc is not None:
            m.setdefault("classes", {}).setdefault(c.name, {}).update(
                totals.get(c.name, {"pauses": 0, "paused_s": 0.0})
            )
    return recs


def _grid(per_flow, info, duration):
    n = int(round(duration / INTERVAL_S))
    t = [round((i + 1) * INTERVAL_S, 3) for i in range(n)]
    flows = {}
    for fid, points in per_flow.items():
        values = [None] * n
        for t_end, mbit in points:
            i = int(round(t_end / INTERVAL_S)) - 1
            if 0 <= i < n:
                values[i] = mbit
        flows[fid] = values
    return {"interval_s": INTERVAL_S, "t": t, "flows": flows, "flow_info": info}
