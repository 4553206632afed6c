"""`hpnlab run`: build the fabric, run traffic, apply the fault timeline,
sample, tear down; then measure, judge, and write results.json, summary.md
and the plots."""

import datetime
import math
import os
import time
from dataclasses import dataclass, field

from testbed.emulation.capture import Capture
from testbed.emulation.live import read_by_hand
from testbed.emulation.reachability import unreachable
from testbed.emulation.realize import FabricNet
from testbed.results import counters, distributions, drawing, heatmap, plots, store
from testbed.results.text import fmt
from traffic.iperf import INTERVAL_S, plan_pairs

from . import measure, sampler
from .agents import JobAgents
from .announce import agent_pins, announcement
from .cost import CostMeter
from .faults import run_timeline, sleep_until
from .iperf import IperfFlows
from .jobs import agent_configs
from .probes import Probes
from .queue_sampler import QueueSampler

OVS_REVALIDATE_MS = 100  # Open vSwitch's floor for other_config:max-revalidator


class ReachabilityError(RuntimeError):
    pass


def _phase(log, name, total=None):
    """Tell a progress display (testbed/cli/progress.py), when `log` is one,
    that the run entered phase `name` (None: over), `total` seconds long
    when known; a plain function such as `print` has no phases."""
    enter = getattr(log, "phase", None)
    if enter is not None:
        enter(name, total)


def _at(log, done):
    """Tell a progress display, when `log` is one, how far the phase got."""
    move = getattr(log, "at", None)
    if move is not None:
        move(done)


def run_scenario(sc, out_dir, log=print, dilation_choice=None, live=None):
    """Run Scenario `sc` (dilated already, if at all: testbed/fabric/dilation.py)
    and write its report into `out_dir`; `dilation_choice` says how its time
    dilation was chosen, for the report; `live`: the FabricNet of a fabric
    that is up, to play the scenario on instead of building one. Returns
    the results dict."""
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    n = sc.fabric.time_dilation
    if n != 1:
        log(f"time dilation {n:g}: times and rates below are emulated ones ({n:g}x slower on this machine)")
    _phase(log, "bringing the fabric up" if live is None else "starting the traffic")
    try:
        run = _run(sc, out_dir, log, live)
        log("measuring what the run did and writing the report")
        _phase(log, "measuring and writing the report")
        results = measure.results(sc, run, started, dilation_choice).to_dict()
        _write(sc, run, results, out_dir, log)
    finally:
        _phase(log, None)
    return results


@dataclass
class _Instruments:
    """What drives and watches one run: the iperf flows, the job agents,
    captures, probes, the link and queue samplers and the emulation's cost
    meter, started together before traffic and stopped together after."""

    flows: IperfFlows
    pairs: list
    senders: list
    sampler: sampler.LinkSampler
    cost: CostMeter
    agents: JobAgents | None = None
    placement: dict | None = None
    announced: dict | None = None
    queues: QueueSampler | None = None
    probes: Probes | None = None
    captures: list = field(default_factory=list)


def _instruments(sc, fnet, run_dir, log):
    """Announce the jobs to the controller and set up (not start) every
    instrument of the run."""
    fabric = sc.fabric
    pairs = plan_pairs(fabric, sc.traffic)
    senders = sorted({p.src for p in pairs})
    agents = placement = announced = None
    if sc.jobs:
        # The controller places every connection (and pins the precise
        # ones in the switches) before the first packet is sent.
        announced = announcement(fabric, sc.jobs, sc.crux)
        placement = fnet.announce_jobs(announced)
        pins = agent_pins(fabric, placement)
        configs = agent_configs(fabric, sc.jobs, run_dir, sc.duration_s, sc.transport, pins=pins)
        agents = JobAgents(fnet, configs, run_dir, log)
    cost = CostMeter(
        end.ifname for link in fabric.links for end in (link.a, link.b) if fabric.nodes[end.node].is_switch
    )
    progress = _progress(fabric, senders, agents, sc.jobs, log)

    def on_sample(t, samp):
        cost.sample()
        progress(t, samp)

    return _Instruments(
        flows=IperfFlows(fnet, pairs, sc.duration_s, run_dir),
        pairs=pairs,
        senders=senders,
        sampler=sampler.LinkSampler(fnet, senders, on_sample=on_sample),
        cost=cost,
        agents=agents,
        placement=placement,
        announced=announced,
        queues=QueueSampler(fnet.queues) if fnet.queues is not None else None,
        probes=Probes(fnet, sc.probes, run_dir) if sc.probes else None,
    )


def _start(sc, fnet, inst, out_dir):
    """Start every instrument, receivers before senders; returns t0, the
    drill clock's zero (monotonic), a moment after the last one started."""
    for host in (sc.capture or {}).get("hosts", []):
        cap = Capture(fnet, host, out_dir, sc.capture["packets"])
        inst.captures.append(cap)
        cap.wait_listening()
    if inst.agents:
        inst.agents.start()
        inst.agents.wait_ready()
    inst.flows.start_servers()
    if inst.probes:
        inst.probes.start_receivers()
    t0 = time.monotonic() + 0.1
    if inst.probes:
        inst.probes.start_senders(t0, t0 + sc.duration_s)
    if inst.agents:
        inst.agents.go(time.time() + (t0 - time.monotonic()))
    inst.sampler.start(t0)
    if inst.queues:
        inst.queues.start(t0)
    inst.cost.start()
    return t0


def _play(sc, fnet, inst, t0, log):
    """Apply the fault timeline and wait for the traffic to end: (faults as
    applied, the controller's stops and starts, problems, seconds run)."""
    faults, controller_actions = run_timeline(fnet, inst.flows, inst.pairs, sc, t0, log)
    if sc.jobs_only:
        # Every fault applied: the drill ends when the last agent does
        # (each stops at the deadline too).
        problems = inst.agents.wait(timeout=max(0.0, t0 + sc.duration_s - time.monotonic()) + 15)
        ran_s = min(sc.duration_s, math.ceil((time.monotonic() - t0) / INTERVAL_S) * INTERVAL_S)
        return faults, controller_actions, problems, ran_s
    sleep_until(t0 + sc.duration_s)
    problems = inst.flows.wait(timeout=15)
    if inst.probes:
        problems += inst.probes.wait(timeout=15)
    if inst.agents:
        problems += inst.agents.wait(timeout=15)
    return faults, controller_actions, problems, sc.duration_s


def _stop(inst):
    """Stop every instrument (each that started); returns (the emulation's
    cost over the traffic, the capture files)."""
    emulation_cost = inst.cost.stop() if inst.cost.first else {}
    inst.sampler.stop()
    if inst.queues:
        inst.queues.stop()
    inst.flows.stop()
    capture_files = [c.stop() for c in inst.captures]
    if inst.agents:
        inst.agents.stop()
    if inst.probes:
        inst.probes.stop()
    return emulation_cost, capture_files


def _run(sc, out_dir, log, live=None):
    """Bring the fabric up, play the scenario on it, tear it down; or, with
    `live` (the FabricNet of a running `hpnlab up`), play it on that one."""
    run_dir = os.path.join(out_dir, "run")
    if live is not None:
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
        for key, value in _ovs_options(sc).items():
            live.ledger.set_ovs_option(key, value)  # put back when the fabric goes down
        return _play_on(live, sc, run_dir, out_dir, log, live=True)
    with FabricNet(sc.fabric, run_dir, log=log, ovs_options=_ovs_options(sc)) as fnet:
        slowest_ms = _require_reachable(fnet)
        log(
            f"every host reaches its rail's NICs out of each port (checked in "
            f"{fnet.timings['reachability']:.1f} s; the slowest first answer took {fmt(slowest_ms)} ms)"
        )
        record = _play_on(fnet, sc, run_dir, out_dir, log)
        log("traffic over; tearing the fabric down")
        _phase(log, "tearing the fabric down")
    log(f"fabric torn down in {fnet.timings['teardown']:.1f} s{_slow_steps(fnet.timings['teardown_steps'])}")
    return record


def _slow_steps(took, slow_s=1.0):
    """' (Mininet 9.1 s, ...)': the teardown's steps that took a second or
    more, longest first; '' when none did."""
    slow = sorted(((s, what) for what, s in took.items() if s >= slow_s), reverse=True)
    return f" ({', '.join(f'{what} {s:.1f} s' for s, what in slow)})" if slow else ""


def _play_on(fnet, sc, run_dir, out_dir, log, live=False):
    """Play the scenario on a fabric that is up; the record of the run.
    `live`: the fabric lives on (`hpnlab up`): its pause daemon is started
    again once it handed over this run's pauses, and the cables pulled by
    hand meanwhile (`hpnlab link`, `switch`) count among the run's faults."""
    first_event, first_route_error = len(fnet.controller.events), len(fnet.route_errors)
    inst = _instruments(sc, fnet, run_dir, log)
    try:
        t0 = _start(sc, fnet, inst, out_dir)
        _phase(log, "traffic", sc.duration_s / sc.fabric.time_dilation)
        faults, controller_actions, problems, ran_s = _play(sc, fnet, inst, t0, log)
        if live:
            faults = sorted(faults + read_by_hand(fnet.run_dir, t0, ran_s), key=lambda f: f["applied_at"])
    finally:
        emulation_cost, capture_files = _stop(inst)
    pause_record = fnet.pauses.stop() if fnet.pauses is not None else None
    if live and fnet.pauses is not None:
        fnet.ledger.add_process(fnet.pauses.start(), fnet.pauses.argv)
    events = list(fnet.controller.events)[first_event:]
    problems += _instrument_problems(fnet, inst, pause_record, first_route_error)
    problems += controller_problems(events)
    return measure.RunRecord(
        t0=t0,
        ran_s=ran_s,
        faults=faults,
        problems=problems,
        events=events,
        flows=inst.flows,
        samples=inst.sampler.samples,
        cpu=inst.sampler.cpu,
        agent_results=inst.agents.results() if inst.agents else None,
        capture_files=capture_files,
        datapath=fnet.datapath,
        bringup_s=fnet.timings.get("routes"),
        emulator=emulation_cost,
        queues=inst.queues.result() if inst.queues else None,
        pauses=pause_record,
        controller_actions=controller_actions,
        probes=inst.probes.records() if inst.probes else None,
        placement=inst.placement,
        announced=inst.announced,
    )


def _ovs_options(sc):
    """Open vSwitch settings the run needs: Crux as it runs reads the rules'
    byte counters, which Open vSwitch refreshes once per revalidation (every
    500 ms by default); 100 ms is the shortest it allows."""
    if sc.crux is None:
        return {}
    return {"max-revalidator": str(OVS_REVALIDATE_MS)}


def _instrument_problems(fnet, inst, pause_record, first_route_error=0):
    """What went wrong in the fabric's own machinery while the run ran."""
    problems = list(fnet.route_errors[first_route_error:])
    if inst.sampler.error:
        problems.append(f"sampling stopped early: {inst.sampler.error}")
    if inst.queues and inst.queues.error:
        problems.append(f"queue sampling stopped early: {inst.queues.error}")
    if fnet.pauses is not None and pause_record is None:
        problems.append(f"the pause daemon wrote no record; see {fnet.pauses.log_path}")
    problems += [f"pause daemon: {e}" for e in (pause_record or {}).get("errors", [])]
    return problems


def controller_problems(events: list) -> list[str]:
    """The controller's events that mean the run's routes were not as asked:
    routes it could not apply, messages a switch rejected, connections it
    refused (one claiming a switch's identity)."""
    problems = [
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
    return problems


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
                pauses=results.get("pauses"),
            ),
        ),
        ("ports", lambda: plots.plot_ports(out_dir, results)),
        ("links", lambda: heatmap.plot_link_heatmap(out_dir, sc.fabric, run.samples, results)),
        ("iterations", lambda: plots.plot_iterations(out_dir, results)),
        ("iterations_cdf", lambda: distributions.plot_iteration_cdf(out_dir, results)),
        ("probes", lambda: distributions.plot_probe_gaps(out_dir, results)),
        ("queues", lambda: plots.plot_queues(out_dir, results)),
        ("marks", lambda: plots.plot_marks(out_dir, results)),
        ("pauses", lambda: plots.plot_pauses(out_dir, results)),
        (
            "fabric",
            lambda: drawing.draw_fabric(
                sc.fabric,
                os.path.join(out_dir, drawing.FABRIC_SVG),
                down=drawing.failed_links(sc.fabric, sc.faults),
                load=counters.link_bytes(sc.fabric, run.samples),
                title=f"{sc.name}: the fabric, failed links and what each link carried",
            ),
        ),
    )
    for key, draw in drawings:
        if key == "plot" and not sc.traffic:
            continue  # no iperf3 flows: the throughput plot would be empty (jobs have iterations.png)
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
    """Refuse a fabric whose hosts do not all reach each other; else the
    milliseconds the slowest pair took to answer (its first try may wait
    for the neighbour's address to be resolved)."""
    reach = fnet.check_reachability()
    bad = unreachable(reach)
    if bad:
        raise ReachabilityError(
            f"{len(bad)} host/port pairs unreachable before traffic started, e.g. {bad[0]}"
        )
    return max((rtt for pairs in reach.values() for rtt in pairs.values()), default=0)


def _progress(fabric, senders, agents, jobs, log):
    """A line a second: each job's iterations and each sender's rate, in
    emulated time and rates (a dilated fabric runs n times slower here)."""
    ports = {h: sampler.host_ports(fabric, h) for h in senders}
    n = fabric.time_dilation
    last = [0.0]

    def on_sample(t, samp):
        if t - last[0] < n:
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
            rates = [samp.rate_mbit(p) * n for p in ports[h]]
            per_port = " ".join(f"{r:5.1f}" for r in rates)
            parts.append(f"{h} {sum(rates):6.1f} Mbit/s (ports: {per_port})")
        if parts:  # a drill of probes alone has nothing to say each second
            log(f"[{t / n:6.2f}s] " + "; ".join(parts))
        _at(log, t / n)

    return on_sample
