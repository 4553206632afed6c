"""`hpnlab run`: build the fabric, run traffic, apply the fault timeline,
sample, tear down; then measure, judge, and write results.json, summary.md
and the plots."""

import datetime
import math
import os
import time
from dataclasses import dataclass, field

from testbed.emulation.capture import Capture
from testbed.emulation.realize import FabricNet, unreachable
from testbed.results import (
    analytical,
    controller,
    counters,
    dilation,
    emulator,
    expectations,
    pauses,
    plots,
    probe,
    queues,
    store,
    trust,
)
from testbed.results.flows import SETTLE_S, compute_metrics
from testbed.results.jobs import job_metrics
from traffic.iperf import INTERVAL_S, plan_pairs

from . import sampler
from .agents import JobAgents
from .announce import agent_pins, announcement, fabric_links
from .cost import CostMeter
from .faults import convergence_s, link_switch_ports, run_timeline, sleep_until, switch_ends
from .iperf import IperfFlows
from .jobs import agent_configs
from .probes import Probes
from .queue_sampler import QueueSampler


class ReachabilityError(RuntimeError):
    pass


@dataclass
class _Run:
    """What a drill recorded while the fabric was up."""

    t0: float  # the drill clock's zero (monotonic)
    ran_s: float  # traffic time actually run
    faults: list  # as applied, with applied_at
    problems: list  # what went wrong while running
    events: list  # the controller's events
    flows: IperfFlows
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


def run_scenario(sc, out_dir, log=print, dilation_choice=None):
    """Run Scenario `sc` (dilated already, if at all: testbed/fabric/dilation.py)
    and write its report into `out_dir`; `dilation_choice` says how its time
    dilation was chosen, for the report. Returns the results dict."""
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    run = _run(sc, out_dir, log)
    results = _results(sc, run, started, dilation_choice)
    _write(sc, run, results, out_dir, log)
    return results


def _run(sc, out_dir, log):
    """Bring the fabric up, play the scenario on it, tear it down."""
    run_dir = os.path.join(out_dir, "run")
    fabric = sc.fabric
    with FabricNet(fabric, run_dir, log=log) as fnet:
        _require_reachable(fnet)
        pairs = plan_pairs(fabric, sc.traffic)
        flows = IperfFlows(fnet, pairs, sc.duration_s, run_dir)
        senders = sorted({p.src for p in pairs})
        agents = placement = announced = None
        if sc.jobs:
            # The controller places every connection (and pins the precise
            # ones in the switches) before the first packet is sent.
            announced = announcement(fabric, sc.jobs)
            placement = fnet.announce_jobs(announced)
            configs = agent_configs(
                fabric, sc.jobs, run_dir, sc.duration_s, sc.transport, pins=agent_pins(fabric, placement)
            )
            agents = JobAgents(fnet, configs, run_dir, log)
        captures = []
        cost = CostMeter(
            end.ifname
            for link in fabric.links
            for end in (link.a, link.b)
            if fabric.nodes[end.node].is_switch
        )
        progress = _progress(fabric, senders, agents, sc.jobs, log)

        def on_sample(t, samp):
            cost.sample()
            progress(t, samp)

        samp = sampler.LinkSampler(fnet, senders, on_sample=on_sample)
        qsamp = QueueSampler(fnet.queues) if fnet.queues is not None else None
        probes = Probes(fnet, sc.probes, run_dir) if sc.probes else None
        try:
            for host in (sc.capture or {}).get("hosts", []):
                cap = Capture(fnet, host, out_dir, sc.capture["packets"])
                captures.append(cap)
                cap.wait_listening()
            if agents:
                agents.start()
                agents.wait_ready()
            flows.start_servers()
            if probes:
                probes.start_receivers()
            t0 = time.monotonic() + 0.1
            if probes:
                probes.start_senders(t0, t0 + sc.duration_s)
            if agents:
                agents.go(time.time() + (t0 - time.monotonic()))
            samp.start(t0)
            if qsamp:
                qsamp.start(t0)
            cost.start()
            faults, controller_actions = run_timeline(fnet, flows, pairs, sc, t0, log)
            if sc.jobs_only:
                # Every fault applied: the drill ends when the last agent
                # does (each stops at the deadline too).
                problems = agents.wait(timeout=max(0.0, t0 + sc.duration_s - time.monotonic()) + 15)
                ran_s = min(sc.duration_s, math.ceil((time.monotonic() - t0) / INTERVAL_S) * INTERVAL_S)
            else:
                sleep_until(t0 + sc.duration_s)
                problems = flows.wait(timeout=15)
                if probes:
                    problems += probes.wait(timeout=15)
                if agents:
                    problems += agents.wait(timeout=15)
                ran_s = sc.duration_s
        finally:
            emulation_cost = cost.stop() if cost.first else {}
            samp.stop()
            if qsamp:
                qsamp.stop()
            flows.stop()
            capture_files = [c.stop() for c in captures]
            if agents:
                agents.stop()
            if probes:
                probes.stop()
        pause_record = fnet.pauses.stop() if fnet.pauses is not None else None
        events = list(fnet.controller.events)
        problems += fnet.route_errors
        if samp.error:
            problems.append(f"sampling stopped early: {samp.error}")
        if qsamp and qsamp.error:
            problems.append(f"queue sampling stopped early: {qsamp.error}")
        if fnet.pauses is not None and pause_record is None:
            problems.append(f"the pause daemon wrote no record; see {fnet.pauses.log_path}")
        problems += [f"pause daemon: {e}" for e in (pause_record or {}).get("errors", [])]
        problems += [
            f"controller routes version {ev.get('version')}: {ev['apply_error']}"
            for ev in events
            if ev.get("apply_error")
        ]
        problems += [
            f"switch {ev.get('switch')} rejected an OpenFlow message from the controller "
            f"(error type {ev.get('type')}, code {ev.get('code')})"
            for ev in events
            if ev["event"] == "error"
        ]
        problems += [
            f"the controller refused a connection that claimed to be switch "
            f"{ev.get('switch')} ({ev.get('reason')})"
            for ev in events
            if ev["event"] == "refused"
        ]
        return _Run(
            t0=t0,
            ran_s=ran_s,
            faults=faults,
            problems=problems,
            events=events,
            flows=flows,
            samples=samp.samples,
            cpu=samp.cpu,
            agent_results=agents.results() if agents else None,
            capture_files=capture_files,
            datapath=fnet.datapath,
            bringup_s=fnet.timings.get("routes"),
            emulator=emulation_cost,
            queues=qsamp.result() if qsamp else None,
            pauses=pause_record,
            controller_actions=controller_actions,
            probes=probes.records() if probes else None,
            placement=placement,
            announced=announced,
        )


def _results(sc, run, started, dilation_choice=None):
    """Measure what the run recorded, bring it back to emulated time, decide
    whether it can be trusted, and judge the expectations: the results dict."""
    fabric, faults = sc.fabric, run.faults
    for fault in faults:
        fault["converged_s"] = convergence_s(run.events, run.t0, fault, link_switch_ports(fabric, fault))
    per_flow, info = run.flows.series()
    series = _grid(per_flow, info, run.ran_s)
    rates, names = counters.egress_rates(fabric)
    fid_links = counters.fidelity(
        run.samples,
        rates,
        names,
        counters.egress_owners(fabric),
        counters.fault_edges(fabric, faults, SETTLE_S),
        frame_bytes=fabric.mtu + 14,
    )
    m = compute_metrics(series, info, faults, run.ran_s, fid_links)
    m["queue_drops"] = counters.queue_drops(run.samples, names)
    # where the machine itself dropped frames, as the kernel counted them
    # (testbed/drill/cost.py): what to look at when loss is unexplained
    emulator_drops = {k: run.emulator.get(k) for k in ("ovs_socket_drops", "backlog_drops")}
    m["emulator_drops"] = emulator_drops
    m["emulator_hold"] = emulator.emulator_hold(fabric, run.emulator.get("ovs_held_bytes"))
    if run.queues:
        m["queue_drops"].update(queues.class_drops(run.queues))
        m["classes"] = queues.class_totals(run.queues)
        m["queue_telemetry"] = {k: run.queues[k] for k in ("sample_hz", "samples", "cpu_share")}
    if sc.jobs:
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
        m["generators"] = emulator.generator_metrics(
            run.agent_results, pauses.paused_intervals(run.pauses) if run.pauses else None
        )
        emulator.fold_generators(m["fidelity"], m["generators"])
        lost = emulator.unexplained_loss(
            m["jobs"], m["queue_drops"], faults, m["generators"]["rx_overflows"], emulator_drops
        )
        if lost:
            lost["emulator_drops"] = emulator_drops
            m["fidelity"]["unexplained_loss"] = lost
        m["dci_bytes"] = counters.dci_bytes(fabric, run.samples)
        m["cpu_per_packet"] = counters.cpu_per_packet(run.agent_results, run.emulator)
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
    # Measured so far: this machine's time. Judged and reported from here
    # on: emulated time, which is what the scenario's bounds are written in.
    n = sc.fabric.time_dilation
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
    pause_recs = None
    if run.pauses is not None:
        class_names = [c.name for c in fabric.queues.classes]
        pause_recs = pauses.to_emulated(pauses.records(run.pauses, run.t0, class_names), n)
        m["pfc"] = pauses.summary(
            pause_recs,
            run.pauses.get("events", 0),
            run.pauses.get("errors", ()),
            run.pauses.get("scheduling"),
        )
        totals = pauses.class_totals(pause_recs)
        for c in fabric.queues.classes:
            if c.pfc is not None:
                m.setdefault("classes", {}).setdefault(c.name, {}).update(
                    totals.get(c.name, {"pauses": 0, "paused_s": 0.0})
                )
    m["controller"] = controller.record(run.events, run.t0, run.controller_actions, run.ran_s, n)
    run.problems += controller.problems(m["controller"])
    judged = trust.assess(m, faults)
    trustworthy = judged["trustworthy"]
    exp = expectations.evaluate(sc.expect, m, trustworthy)
    return {
        "scenario": sc.name,
        "description": sc.description,
        "scenario_file": sc.path,
        "started": started,
        "duration_s": emulated["duration_s"],
        "duration_planned_s": emulated["duration_planned_s"],
        "time_dilation": n,
        "time_dilation_choice": dilation_choice or {"from": "given"},
        # A run that hit problems (a tool that failed, routes not installed)
        # did not do what the scenario asked, whatever the numbers say.
        "passed": trustworthy and expectations.all_passed(exp) and not run.problems,
        "trustworthy": trustworthy,
        "trust": judged,
        "fabric": {
            "kind": fabric.kind,
            "datapath": run.datapath,
            "hosts": len(fabric.hosts()),
            "switches": len(fabric.switches()),
            "links": len(fabric.links),
            "bringup_s": run.bringup_s,
        },
        "expectations": exp,
        "metrics": m,
        "faults": faults,
        "series": series,
        "queues": queues.to_emulated(run.queues, n),
        "pauses": pause_recs,
        "placement": run.placement,
        "problems": run.problems,
    }


def _write(sc, run, results, out_dir, log=print):
    """results.json and summary.md first, so that a plot that fails cannot
    lose a finished run; then the plots, and the two again with the plots
    linked. A plot that fails is said in the results and on the terminal."""
    results["files"] = {"results": "results.json", "summary": "summary.md"}
    if run.capture_files:
        results["files"]["captures"] = [os.path.basename(p) for p in run.capture_files if p]
    store.write_results(out_dir, results)
    drawings = (
        (
            "plot",
            lambda: plots.plot_throughput(
                out_dir,
                results["series"],
                results["faults"],
                f"{sc.name}: throughput per flow",
                flow_info=results["series"]["flow_info"],
                time_dilation=results["time_dilation"],
            ),
        ),
        ("iterations", lambda: plots.plot_iterations(out_dir, results)),
        ("queues", lambda: plots.plot_queues(out_dir, results)),
        ("marks", lambda: plots.plot_marks(out_dir, results)),
        ("pauses", lambda: plots.plot_pauses(out_dir, results)),
    )
    for key, draw in drawings:
        try:
            path = draw()
        except Exception as e:  # noqa: BLE001 - the run's results stand without the plot
            results.setdefault("plot_errors", []).append(f"{key}: {type(e).__name__}: {e}")
            log(f"warning: the {key} plot failed ({type(e).__name__}: {e}); results.json is complete")
            continue
        if path:
            results["files"][key] = os.path.basename(path)
    store.write_results(out_dir, results)


def _require_reachable(fnet):
    reach = fnet.check_reachability()
    bad = unreachable(reach)
    if bad:
        raise ReachabilityError(
            f"{len(bad)} host/port pairs unreachable before traffic started, e.g. {bad[0]}"
        )


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


def _progress(fabric, senders, agents, jobs, log):
    ports = {h: sampler.host_ports(fabric, h) for h in senders}
    last = [0.0]

    def on_sample(t, samp):
        if t - last[0] < 1.0:
            return
        last[0] = t
        parts = []
        if agents:
            done = {}
            for rec in agents.last_progress():
                done.setdefault(rec["job"], {})[rec["rank"]] = rec["iter"] + 1
            for job in jobs:
                ranks = done.get(job.name, {})
                it = min(ranks.values()) if len(ranks) == len(job.hosts) else 0
                parts.append(f"{job.name} {it}/{job.iterations} iterations")
        for h in senders:
            rates = [samp.rate_mbit(p) for p in ports[h]]
            per_port = " ".join(f"{r:5.1f}" for r in rates)
            parts.append(f"{h} {sum(rates):6.1f} Mbit/s (ports: {per_port})")
        log(f"[{t:6.2f}s] " + "; ".join(parts))

    return on_sample
