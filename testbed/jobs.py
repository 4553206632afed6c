"""Training jobs in a drill: agent plans (pure), running the agents, and the
job metrics computed from what the agents measured (pure)."""
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from traffic import collectives, roce

from .procs import end as end_process

MAX_GAP_EVENTS = 20  # gap events listed per job in results.json
STALL_FACTOR = 3.0   # an iteration this many times the job's median counts as stalled


# --- plans (pure) --------------------------------------------------------------

def rank_specs(fabric, jobs):
    """{host: [job spec for the rank on that host]}; job ids follow scenario order."""
    per_host = {}
    for job_id, job in enumerate(jobs):
        peers = []
        for h in job["hosts"]:
            nic = fabric.nics_of(h)[0]
            peers.append({"host": h, "ip": nic.ip, "mac": nic.mac})
        index = {h: i for i, h in enumerate(job["hosts"])}
        groups = None if job["groups"] is None else [[index[h] for h in g] for g in job["groups"]]
        for rank, h in enumerate(job["hosts"]):
            per_host.setdefault(h, []).append({
                "id": job_id, "name": job["name"], "rank": rank, "peers": peers,
                "collective": job["collective"], "bytes": job["bytes"], "groups": groups,
                "compute_s": job["compute_s"], "overlap": job["overlap"],
                "iterations": job["iterations"], "dscp": job["dscp"], "port": job["port"],
                "microbatches": job["microbatches"], "start": job["start"]})
    return per_host


def agent_configs(fabric, jobs, run_dir, deadline_s, transport=None):
    """{host: config dict} for every host that runs at least one rank;
    `transport` holds the scenario's knobs (DCQCN rates as shares of the
    port's line rate, turned into bit/s here)."""
    rates = {}
    for link in fabric.links:
        if link.kind == "access":
            rates[link.a.ifname] = link.rate_bps / fabric.scale
    out = {}
    for host, specs in rank_specs(fabric, jobs).items():
        nic = fabric.nics_of(host)[0]
        rate = min(rates[p] for p in nic.ports)
        knobs = dict(transport or {})
        dcqcn = dict(knobs.pop("dcqcn", {}))
        for share in [k for k in dcqcn if k.endswith("_share")]:
            dcqcn[share.replace("_share", "_bps")] = dcqcn.pop(share) * rate
        out[host] = {"host": host, "deadline_s": deadline_s, "payload": roce.payload_for_mtu(fabric.mtu),
                     **knobs, "dcqcn": dcqcn,
                     "out": os.path.join(run_dir, f"agent-{host}.json"),
                     "nic": {"ip": nic.ip, "mac": nic.mac, "ports": list(nic.ports),
                             "rate_bps": min(rates[p] for p in nic.ports)},
                     "jobs": specs}
    return out


def schedule_of(job):
    """The schedule a job's ranks run (same call the agents make)."""
    n = len(job["hosts"])
    if job["collective"] == "hierarchical":
        index = {h: i for i, h in enumerate(job["hosts"])}
        return collectives.hierarchical_allreduce([[index[h] for h in g] for g in job["groups"]],
                                                  job["bytes"], port=job["port"])
    if job["collective"] == "pipeline":
        return collectives.pipeline(n, job["bytes"], microbatches=job["microbatches"], port=job["port"])
    return collectives.compile(job["collective"], n=n, size=job["bytes"], port=job["port"])


def expected_bytes_per_rank(job):
    """Bytes a rank must move per iteration by the algorithm's formula
    (independent of the schedule code for the AllReduces)."""
    n, s = len(job["hosts"]), job["bytes"]
    if job["collective"] in ("ring", "halving-doubling") and s % n == 0:
        return 2 * (n - 1) * s // n
    return None  # other collectives: the schedule's volume is the reference


def frame_bytes(fabric):
    """A full RoCE frame on this fabric: the largest payload its MTU allows
    plus Ethernet, IPv4, UDP, BTH and ICRC."""
    return roce.payload_for_mtu(fabric.mtu) + roce.FRAME_OVERHEAD


def goodput_bps(fabric):
    """Payload rate of one NIC port: its line rate less RoCE framing."""
    port = min(l.rate_bps for l in fabric.links if l.kind == "access") / fabric.scale
    payload = roce.payload_for_mtu(fabric.mtu)
    return port * payload / (payload + roce.FRAME_OVERHEAD)


def path_latency_s(fabric, job, frame_bytes=None):
    """The longest store-and-forward delay between two ranks that exchange
    data: after the sender's own port, every further hop serializes the
    frame again at its link's (scaled) rate. Paths follow the controller's
    routes on the healthy fabric."""
    from controllers.routing import compute_routes, trace
    frame_bytes = frame_bytes or globals()["frame_bytes"](fabric)
    routes = compute_routes(fabric)
    sched = schedule_of(job)
    worst = 0.0
    pairs = {(r, s.peer) for r, steps in sched.steps.items() for s in steps if s.kind == "send"}
    for r, p in pairs:
        src, dst = job["hosts"][r], job["hosts"][p]
        ifname = fabric.nics_of(src)[0].ports[0]
        path = trace(fabric, routes, ifname, fabric.nics_of(dst)[0].ip)
        if not path:
            continue
        hops = list(zip(path, path[1:]))
        delay = sum(frame_bytes * 8 / (fabric.links_between(a, b)[0].rate_bps / fabric.scale)
                    for a, b in hops)
        worst = max(worst, delay)
    return worst


def analytical_iteration_s(job, port_rate_bps, latency_s=0.0):
    """Iteration time on an idle fabric: compute plus the schedule's
    communication time at one port's rate (one flow per transfer), with the
    overlapped share of compute hidden."""
    comm = collectives.analytical_time(schedule_of(job), port_rate_bps, latency_s)
    compute = job["compute_s"]
    return max(compute, (1.0 - job["overlap"]) * compute + comm)


# --- running -------------------------------------------------------------------

class JobAgents:
    def __init__(self, fnet, configs, run_dir, log=print):
        self.fnet = fnet
        self.configs = configs
        self.run_dir = run_dir
        self.log = log
        self.procs = {}
        self.progress = []
        self.ready = set()
        self.lock = threading.Condition()

    def start(self):
        for host, cfg in self.configs.items():
            path = os.path.join(self.run_dir, f"agent-{host}.cfg.json")
            with open(path, "w") as fh:
                json.dump(cfg, fh, indent=1)
            with open(os.path.join(self.run_dir, f"agent-{host}.log"), "w") as err:
                proc = self.fnet.popen_in(host, [sys.executable, "-m", "traffic.agent", path],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=err, text=True)
            self.procs[host] = proc
            threading.Thread(target=self._follow, args=(host, proc), daemon=True).start()

    def _follow(self, host, proc):
        for line in proc.stdout:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self.lock:
                if rec.get("event") == "ready":
                    self.ready.add(host)
                else:
                    self.progress.append(rec)
                self.lock.notify_all()
        with self.lock:  # the agent is gone: whoever waits for it must know now
            self.lock.notify_all()

    def wait_ready(self, timeout=60.0):
        """Block until every agent has set up its sockets (an event each
        agent prints), so that they can all start at the same moment."""
        with self.lock:
            ok = self.lock.wait_for(lambda: len(self.ready) == len(self.procs) or any(
                p.poll() is not None for p in self.procs.values()), timeout)
            missing = sorted(set(self.procs) - self.ready)
        if not ok or missing:
            raise RuntimeError(f"traffic agents not ready in {timeout:.0f} s: {', '.join(missing)} "
                               f"(logs in {self.run_dir})")

    def go(self, start_at):
        for proc in self.procs.values():
            proc.stdin.write(json.dumps({"start_at": start_at}) + "\n")
            proc.stdin.flush()

    def last_progress(self):
        with self.lock:
            return list(self.progress)

    def wait(self, timeout):
        """Wait for every agent (each stops itself at its deadline)."""
        problems = []
        deadline = time.monotonic() + timeout
        for host, proc in self.procs.items():
            try:
                rc = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rc = end_process(proc, 10)
                problems.append(f"agent on {host} did not stop by itself")
            if rc != 0:
                problems.append(f"agent on {host} exited with status {rc}: see "
                                f"{os.path.join(self.run_dir, 'agent-' + host + '.log')}")
        return problems

    def stop(self):
        """End every agent. Closing its stdin first releases one still
        waiting for the start (it returns on end of input)."""
        for proc in self.procs.values():
            if proc.stdin and not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            end_process(proc, max(0.1, deadline - time.monotonic()))

    def results(self):
        out = {}
        for host, cfg in self.configs.items():
            try:
                with open(cfg["out"]) as fh:
                    out[host] = json.load(fh)
            except (OSError, json.JSONDecodeError):
                out[host] = None
        return out


# --- metrics (pure) ------------------------------------------------------------

def job_metrics(jobs, agent_results, port_rate_bps, faults=(), duration=None, dc_of=None,
                fabric=None):
    """Per job: iteration times (job-level: iteration k ends when its last
    rank ends it), completion time, bytes, retransmissions, GPU-utilization
    proxy; plus the aggregate utilization weighted by ranks (GPUs)."""
    out = {}
    windows = _outages(faults, duration)
    for job in jobs:
        ranks = [r for res in agent_results.values() if res for r in res["jobs"]
                 if r["name"] == job["name"]]
        latency = path_latency_s(fabric, job) if fabric is not None else 0.0
        out[job["name"]] = _one_job(job, ranks, port_rate_bps, windows, latency)
        if dc_of:
            groups = {}
            for i, h in enumerate(job["hosts"]):
                groups.setdefault(dc_of[h], []).append(i)
            per_iter = collectives.crossing_bytes(schedule_of(job), list(groups.values()))
            out[job["name"]]["crossing_bytes_per_iteration"] = per_iter
    total = sum(len(j["hosts"]) for j in jobs)
    util = [(m["gpu_utilization"], m["ranks"]) for m in out.values() if m["gpu_utilization"] is not None]
    aggregate = sum(u * n for u, n in util) / total if util and total else None
    return {"jobs": out, "gpu_utilization": aggregate}


def _one_job(job, ranks, port_rate_bps, windows, latency_s=0.0):
    n = len(job["hosts"])
    iters = job["iterations"]
    ends = {}
    for r in ranks:
        for rec in r["iterations"]:
            ends.setdefault(rec["iter"], []).append(rec["end"])
    complete = sorted(k for k, v in ends.items() if len(v) == n)
    # Agents time a job from its own start; put it on the drill's clock
    # (traffic start = 0), where faults and the other jobs live.
    job_end = [max(ends[k]) + job["start"] for k in complete]
    times = [b - a for a, b in zip([job["start"]] + job_end, job_end)]
    steady = times[1:] if len(times) > 1 else times   # the first includes start-up skew
    median = statistics.median(steady) if steady else None
    analytical = analytical_iteration_s(job, port_rate_bps, latency_s)
    expected = expected_bytes_per_rank(job)
    planned = [r["bytes_per_iteration_planned"] for r in ranks]
    # Measured at the receivers: payload bytes that arrived in order, per
    # rank and iteration, against the algorithm's volume.
    ratios = []
    for r in ranks:
        ref = expected if expected is not None else r["bytes_per_iteration_planned"]
        ratios += [rec["bytes_received"] / ref for rec in r["iterations"] if ref]
    util = [sum(x["compute_s"] for x in r["iterations"]) / sum(x["iter_s"] for x in r["iterations"])
            for r in ranks if r["iterations"] and sum(x["iter_s"] for x in r["iterations"]) > 0]
    retransmitted = sum(r["retransmitted"] for r in ranks)
    sent = sum(r["packets_sent"] for r in ranks)
    phases = _by_phase(complete, job_end, times, windows)
    if phases.get("iteration_during_s") and phases.get("iteration_before_s"):
        phases["fault_iteration_slowdown"] = phases["iteration_during_s"] / phases["iteration_before_s"]
    elif windows:
        phases["fault_iteration_slowdown"] = None
    return {
        "ranks": n, "collective": job["collective"], "bytes_per_iteration": job["bytes"],
        "iterations_planned": iters, "iterations_completed": len(complete),
        "iteration_times_s": [round(t, 4) for t in times],
        "iteration_ends_s": [round(t, 4) for t in job_end],
        "window_s": [job["start"], job_end[-1]] if job_end else None,
        "iteration_time_s": statistics.mean(steady) if steady else None,
        "iteration_time_p50_s": median,
        "iteration_time_p99_s": _percentile(steady, 99) if steady else None,
        "job_completion_s": job_end[-1] - job["start"] if len(complete) == iters else None,
        "analytical_iteration_s": analytical,
        "path_latency_s": latency_s,
        "iteration_time_vs_analytical": (statistics.mean(steady) / analytical) if steady and analytical else None,
        "bytes_sent": sum(r["bytes_sent"] for r in ranks),
        "bytes_received": sum(r["bytes_received"] for r in ranks),
        "bytes_per_rank_expected": expected if expected is not None else (max(planned) if planned else None),
        "bytes_per_rank_ratio": max(ratios, key=lambda x: abs(x - 1.0)) if ratios else None,
        "retransmissions": retransmitted,
        "packets_sent": sent,
        "retransmission_ratio": retransmitted / sent if sent else 0.0,
        "gaps_seen": sum(r.get("gaps_seen", 0) for r in ranks),
        "gap_events": sorted((dict(e, to=job["hosts"][r["rank"]]) for r in ranks for e in r.get("gap_events", [])),
                             key=lambda e: e["t"])[:MAX_GAP_EVENTS],
        "timeouts": sum(r["timeouts"] for r in ranks),
        "cnps": sum(r["cnps_received"] for r in ranks),
        "ce_marks": sum(r["ce_marks"] for r in ranks),
        "gpu_utilization": statistics.mean(util) if util else None,
        "stalled_iterations": sum(1 for t in times if median and t > STALL_FACTOR * median),
        **phases,
    }


def unexplained_loss(job_metrics, queue_drops, faults):
    """Receivers that saw PSN gaps while no modeled queue dropped a packet
    and no link failed: the packets were lost inside the emulator itself (a
    switch or host short of CPU), not by the network being emulated. None
    when the emulated network accounts for every loss (or there was none)."""
    gaps = {name: jm["gaps_seen"] for name, jm in job_metrics.items() if jm.get("gaps_seen")}
    if not gaps or queue_drops or faults:
        return None
    return {"gaps_seen": gaps,
            "note": "receivers saw lost packets that no modeled queue dropped and no fault "
                    "explains: the emulator lost them (see gap_events per job)"}


def _outages(faults, duration):
    down, out = {}, []
    for f in faults:
        key = tuple(sorted(f["link"])) + (f.get("index") or 0,)
        if f["action"] == "link-down":
            down.setdefault(key, f["applied_at"])
        elif key in down:
            out.append((down.pop(key), f["applied_at"]))
    out += [(start, duration if duration is not None else float("inf")) for start in down.values()]
    return out


def _by_phase(complete, ends, times, windows):
    """Mean iteration time of iterations that ended before, during and after
    the outages (empty without faults)."""
    if not windows:
        return {}
    first, last = min(w[0] for w in windows), max(w[1] for w in windows)
    groups = {"before": [], "during": [], "after": []}
    for end, t in zip(ends, times):
        start = end - t
        if end <= first:
            groups["before"].append(t)
        elif start >= last:
            groups["after"].append(t)
        elif any(start < w1 and end > w0 for w0, w1 in windows):
            groups["during"].append(t)
    return {f"iteration_{k}_s": (statistics.mean(v) if v else None) for k, v in groups.items()}


def _percentile(values, p):
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1)))))
    return ordered[k]
