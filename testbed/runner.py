"""`hpnlab run`: build the fabric, run traffic, apply the fault timeline,
sample, tear down, and write results.json, summary.md and a plot."""
import datetime
import math
import os
import time

from . import expectations, jobs as jobs_mod, metrics, report, sampler
from .capture import Capture
from .realize import FabricNet, unreachable
from traffic.iperf import INTERVAL_S, IperfFlows, plan_pairs


class ReachabilityError(RuntimeError):
    pass


def run_scenario(sc, out_dir, log=print):
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    run_dir = os.path.join(out_dir, "run")
    fabric = sc.fabric
    with FabricNet(fabric, run_dir, log=log) as fnet:
        _require_reachable(fnet)
        pairs = plan_pairs(fabric, sc.traffic)
        flows = IperfFlows(fnet, pairs, sc.duration_s, run_dir)
        senders = sorted({p.src for p in pairs})
        agents = None
        if sc.jobs:
            configs = jobs_mod.agent_configs(fabric, sc.jobs, run_dir, sc.duration_s, sc.transport)
            agents = jobs_mod.JobAgents(fnet, configs, run_dir, log)
        captures = []
        samp = sampler.LinkSampler(fnet, senders,
                                   on_sample=_progress(fabric, senders, agents, sc.jobs, log))
        try:
            for host in (sc.capture or {}).get("hosts", []):
                cap = Capture(fnet, host, out_dir, sc.capture["packets"])
                captures.append(cap)
                cap.wait_listening()
            if agents:
                agents.start()
                agents.wait_ready()
            flows.start_servers()
            t0 = time.monotonic() + 0.1
            if agents:
                agents.go(time.time() + (t0 - time.monotonic()))
            samp.start(t0)
            faults = _timeline(fnet, flows, pairs, sc, t0, log)
            if sc.jobs_only:
                # Every fault applied: the drill ends when the last agent
                # does (each stops at the deadline too).
                problems = agents.wait(timeout=max(0.0, t0 + sc.duration_s - time.monotonic()) + 15)
                ran_s = min(sc.duration_s,
                            math.ceil((time.monotonic() - t0) / INTERVAL_S) * INTERVAL_S)
            else:
                _sleep_until(t0 + sc.duration_s)
                problems = flows.wait(timeout=15)
                if agents:
                    problems += agents.wait(timeout=15)
                ran_s = sc.duration_s
        finally:
            samp.stop()
            flows.stop()
            capture_files = [c.stop() for c in captures]
            if agents:
                agents.stop()
        events = list(fnet.controller.events)
        problems += fnet.route_errors
        if samp.error:
            problems.append(f"sampling stopped early: {samp.error}")
        problems += [f"controller routes version {ev.get('version')}: {ev['apply_error']}"
                     for ev in events if ev.get("apply_error")]
        datapath = fnet.datapath
        bringup = fnet.timings.get("routes")
    for fault in faults:
        fault["converged_s"] = _convergence(events, t0, fault)
    per_flow, info = flows.series()
    series = _grid(per_flow, info, ran_s)
    rates, names = sampler.egress_rates(fabric)
    fid_links = sampler.fidelity(samp.samples, rates, names)
    m = metrics.compute_metrics(series, info, faults, ran_s, fid_links)
    m["queue_drops"] = sampler.queue_drops(samp.samples, names)
    if sc.jobs:
        agent_results = agents.results()
        rate = jobs_mod.goodput_bps(fabric)
        dc_of = {h.name: h.dc for h in fabric.hosts()}
        m.update(jobs_mod.job_metrics(sc.jobs, agent_results, rate, faults, ran_s, dc_of,
                                      fabric))
        for jm in m["jobs"].values():
            if jm.get("window_s"):
                jm["dci_bytes"] = sampler.dci_bytes(fabric, samp.samples, *jm["window_s"])
        _generator_fidelity(m, agent_results)
        lost = jobs_mod.unexplained_loss(m["jobs"], m["queue_drops"], faults)
        if lost:
            m["fidelity"]["unexplained_loss"] = lost
        m["dci_bytes"] = sampler.dci_bytes(fabric, samp.samples)
    m["host_cpu"] = sampler.cpu_summary(samp.cpu)
    trustworthy = expectations.is_trustworthy(m["fidelity"]["min"])
    exp = expectations.evaluate(sc.expect, m, trustworthy)
    results = {
        "scenario": sc.name, "description": sc.description, "scenario_file": sc.path,
        "started": started, "duration_s": round(ran_s, 3), "duration_planned_s": sc.duration_s,
        # A run that hit problems (a tool that failed, routes not installed)
        # did not do what the scenario asked, whatever the numbers say.
        "passed": trustworthy and expectations.all_passed(exp) and not problems,
        "trustworthy": trustworthy,
        "fabric": {"kind": fabric.kind, "datapath": datapath, "hosts": len(fabric.hosts()),
                   "switches": len(fabric.switches()), "links": len(fabric.links),
                   "bringup_s": bringup},
        "expectations": exp, "metrics": m, "faults": faults, "series": series,
        "problems": problems,
    }
    plot = report.plot_throughput(out_dir, series, faults, f"{sc.name}: throughput per flow",
                                  flow_info=info)
    results["files"] = {"results": "results.json", "summary": "summary.md",
                        "plot": os.path.basename(plot)}
    if capture_files:
        results["files"]["captures"] = [os.path.basename(p) for p in capture_files if p]
    iterations = report.plot_iterations(out_dir, results)
    if iterations:
        results["files"]["iterations"] = os.path.basename(iterations)
    report.write_results(out_dir, results)
    return results


def _generator_fidelity(m, agent_results):
    """How far the generators fell behind their pacing: packets sent late
    and the share of line rate they achieved while backlogged (a generator
    short of CPU falls behind, and the run must say so)."""
    got = [res for res in agent_results.values() if res]
    sent = sum(r["packets_sent"] for res in got for r in res["jobs"])
    late = sum(res["pacing"]["late_packets"] for res in got)
    tx = sum(res["pacing"]["tx_s"] for res in got)
    lost = sum(res["pacing"]["lost_s"] for res in got)
    on_time = tx / (tx + lost) if tx else None
    m["generators"] = {"packets_sent": sent, "late_packets": late,
                       "max_lag_s": max((res["pacing"]["max_lag_s"] for res in got), default=None),
                       "lost_s": round(lost, 4), "on_time": on_time,
                       "missing_results": sorted(h for h, r in agent_results.items() if r is None)}
    fid = m["fidelity"]
    if on_time is not None:
        fid["generators_on_time"] = on_time
        fid["min"] = on_time if fid["min"] is None else min(fid["min"], on_time)
    if m["generators"]["missing_results"]:
        fid["min"] = 0.0  # an agent that wrote nothing measured nothing


def _require_reachable(fnet):
    reach = fnet.check_reachability()
    bad = unreachable(reach)
    if bad:
        raise ReachabilityError(f"{len(bad)} host/port pairs unreachable before traffic "
                                f"started, e.g. {bad[0]}")


def _timeline(fnet, flows, pairs, sc, t0, log):
    """Start clients and apply faults at their scheduled times."""
    events = [(p.start, "client", p) for p in pairs]
    events += [(f["at"], "fault", f) for f in sc.faults]
    events.sort(key=lambda e: (e[0], e[1] != "client"))
    applied = []
    for at, kind, item in events:
        _sleep_until(t0 + at)
        if kind == "client":
            flows.start_client(item, t0)
            continue
        a, b = item["link"]
        link = fnet.fabric.links_between(a, b)[item.get("index", 0)]
        fnet.set_link(link, up=item["action"] == "link-up")
        t = time.monotonic() - t0
        log(f"[{t:6.2f}s] {item['action']} {a} <-> {b}")
        applied.append({"at": at, "applied_at": round(t, 4), "action": item["action"],
                        "link": [a, b], "index": item.get("index", 0), "link_name": link.name})
    return applied


def _convergence(events, t0, fault):
    """Seconds from a fault to the controller's next routes being acknowledged
    by every switch and installed in every host that needed a change."""
    for ev in events:
        if ev["event"] == "routes" and ev["t"] - t0 > fault["applied_at"]:
            return round(ev.get("applied_t", ev["t"]) - t0 - fault["applied_at"], 4)
    return None


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
                ranks = done.get(job["name"], {})
                it = min(ranks.values()) if len(ranks) == len(job["hosts"]) else 0
                parts.append(f"{job['name']} {it}/{job['iterations']} iterations")
        for h in senders:
            rates = [samp.rate_mbit(p) for p in ports[h]]
            per_port = " ".join(f"{r:5.1f}" for r in rates)
            parts.append(f"{h} {sum(rates):6.1f} Mbit/s (ports: {per_port})")
        log(f"[{t:6.2f}s] " + "; ".join(parts))
    return on_sample


def _sleep_until(deadline):
    # Scheduling a timeline, not waiting for an event: the drill's clock.
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
