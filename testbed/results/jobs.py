"""Job metrics from what the traffic agents measured (pure): iteration times
(job-level: iteration k ends when its last rank ends it), completion time,
bytes, retransmissions, PSN gaps, the GPU-utilization proxy, and iteration
times before, during and after the faults."""

import statistics
from collections.abc import Iterable, Sequence

from testbed.fabric.model import Fabric
from testbed.fabric.records import Job
from traffic import collectives

from .analytical import analytical_iteration_s, expected_bytes_per_rank, path_latency_s, schedule_of
from .flows import fault_windows

MAX_GAP_EVENTS = 200  # gap events listed per job in results.json (the trust gate matches them to causes)
STALL_FACTOR = 3.0  # an iteration this many times the job's median counts as stalled


def job_metrics(
    jobs: Sequence[Job],
    agent_results: dict,
    port_rate_bps: float,
    faults: Iterable[dict] = (),
    duration: float | None = None,
    dc_of: dict | None = None,
    fabric: Fabric | None = None,
) -> dict:
    """Per job: iteration times (job-level: iteration k ends when its last
    rank ends it), completion time, bytes, retransmissions, GPU-utilization
    proxy; plus the aggregate utilization weighted by ranks (GPUs)."""
    out = {}
    windows = fault_windows(faults, float("inf") if duration is None else duration)
    for job in jobs:
        ranks = [r for res in agent_results.values() if res for r in res["jobs"] if r["name"] == job.name]
        latency = path_latency_s(fabric, job) if fabric is not None else 0.0
        out[job.name] = _one_job(job, ranks, port_rate_bps, windows, latency)
        if dc_of:
            groups: dict = {}
            for i, h in enumerate(job.hosts):
                groups.setdefault(dc_of[h], []).append(i)
            # What the schedule puts across DC boundaries: a reference for
            # the report beside the measured dci_bytes, never an expectation.
            per_iter = collectives.crossing_bytes(schedule_of(job), list(groups.values()))
            out[job.name]["crossing_bytes_per_iteration"] = per_iter
    total = sum(len(j.hosts) for j in jobs)
    util = [(m["gpu_utilization"], m["ranks"]) for m in out.values() if m["gpu_utilization"] is not None]
    aggregate = sum(u * n for u, n in util) / total if util and total else None
    return {"jobs": out, "gpu_utilization": aggregate}


def _one_job(job, ranks, port_rate_bps, windows, latency_s=0.0):
    complete, job_end, times = _iteration_ends(job, ranks)
    steady = times[1:] if len(times) > 1 else times  # the first includes start-up skew
    median = statistics.median(steady) if steady else None
    analytical = analytical_iteration_s(job, port_rate_bps, latency_s)
    return {
        "ranks": len(job.hosts),
        "collective": job.collective,
        "bytes_per_iteration": job.bytes,
        "iterations_planned": job.iterations,
        **_iteration_times(job, complete, job_end, times, steady, median),
        "analytical_iteration_s": analytical,
        "path_latency_s": latency_s,
        "iteration_time_vs_analytical": (statistics.mean(steady) / analytical)
        if steady and analytical
        else None,
        **_transfers(job, ranks),
        "gpu_utilization": _gpu_utilization(ranks),
        "stalled_iterations": sum(1 for t in times if median and t > STALL_FACTOR * median),
        **_phases(complete, job_end, times, windows),
    }


def _iteration_ends(job, ranks):
    """(the iterations every rank completed, when each ended on the drill's
    clock, how long each took): iteration k ends when its last rank ends it."""
    ends = {}
    for r in ranks:
        for rec in r["iterations"]:
            ends.setdefault(rec["iter"], []).append(rec["end"])
    complete = sorted(k for k, v in ends.items() if len(v) == len(job.hosts))
    # Agents time a job from its own start; put it on the drill's clock
    # (traffic start = 0), where faults and the other jobs live.
    job_end = [max(ends[k]) + job.start for k in complete]
    times = [b - a for a, b in zip([job.start] + job_end, job_end)]
    return complete, job_end, times


def _iteration_times(job, complete, job_end, times, steady, median):
    """Iterations completed, their times and ends, their mean, p50 and p99
    (`steady`: without the first), and the job's completion time."""
    return {
        "iterations_completed": len(complete),
        "iteration_times_s": [round(t, 4) for t in times],
        "iteration_ends_s": [round(t, 4) for t in job_end],
        "window_s": [job.start, job_end[-1]] if job_end else None,
        "iteration_time_s": statistics.mean(steady) if steady else None,
        "iteration_time_p50_s": median,
        "iteration_time_p99_s": _percentile(steady, 99) if steady else None,
        "job_completion_s": job_end[-1] - job.start if len(complete) == job.iterations else None,
    }


def _transfers(job, ranks):
    """What the ranks sent and received: bytes (against the algorithm's
    formula), retransmissions, PSN gaps, timeouts and congestion marks."""
    # Measured at the receivers: payload bytes that arrived in order, per
    # rank and iteration, against the volume the algorithm's formula
    # requires. Only a formula independent of the schedule is a reference:
    # the schedule's own volume is what the senders were told to send, and
    # comparing with it would only check the schedule against itself.
    expected = expected_bytes_per_rank(job)
    received = [rec["bytes_received"] for r in ranks for rec in r["iterations"]]
    ratios = [b / expected for b in received] if expected else []
    retransmitted = sum(r["retransmitted"] for r in ranks)
    sent = sum(r["packets_sent"] for r in ranks)
    return {
        "bytes_sent": sum(r["bytes_sent"] for r in ranks),
        "bytes_received": sum(r["bytes_received"] for r in ranks),
        "bytes_per_rank": statistics.mean(received) if received else None,
        "bytes_per_rank_expected": expected,
        "bytes_per_rank_ratio": max(ratios, key=lambda x: abs(x - 1.0)) if ratios else None,
        "retransmissions": retransmitted,
        "packets_sent": sent,
        "retransmission_ratio": retransmitted / sent if sent else 0.0,
        "gaps_seen": sum(r.get("gaps_seen", 0) for r in ranks),
        "gap_events": sorted(
            (dict(e, to=job.hosts[r["rank"]]) for r in ranks for e in r.get("gap_events", [])),
            key=lambda e: e["t"],
        )[:MAX_GAP_EVENTS],
        "timeouts": sum(r["timeouts"] for r in ranks),
        "cnps": sum(r["cnps_received"] for r in ranks),
        "ce_marks": sum(r["ce_marks"] for r in ranks),
    }


def _gpu_utilization(ranks):
    """The ranks' mean share of iteration time spent computing (a proxy)."""
    util = [
        sum(x["compute_s"] for x in r["iterations"]) / sum(x["iter_s"] for x in r["iterations"])
        for r in ranks
        if r["iterations"] and sum(x["iter_s"] for x in r["iterations"]) > 0
    ]
    return statistics.mean(util) if util else None


def _phases(complete, job_end, times, windows):
    """Iteration times before, during and after the outages, and the
    slowdown during them (None when there were faults but no ratio)."""
    phases = _by_phase(complete, job_end, times, windows)
    if phases.get("iteration_during_s") and phases.get("iteration_before_s"):
        phases["fault_iteration_slowdown"] = phases["iteration_during_s"] / phases["iteration_before_s"]
    elif windows:
        phases["fault_iteration_slowdown"] = None
    return phases


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
