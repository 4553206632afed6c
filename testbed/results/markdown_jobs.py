"""summary.md's sections on training jobs: iterations, GPU utilization,
retransmissions and gaps per job, and the paths their connections took."""

import os

from .jobs import STALL_FACTOR
from .text import fmt, mb, md_table, pct


def section_jobs(results: dict) -> str:
    """Training jobs: one row per job, the fault phases, the aggregates."""
    metrics = results.get("metrics") or {}
    jobs = metrics.get("jobs") or {}
    parts = [_jobs_table(jobs), _JOBS_NOTE]
    parts += _gap_events(jobs)
    phased = {
        name: j
        for name, j in jobs.items()
        if any(f"iteration_{k}_s" in j for k in ("before", "during", "after"))
    }
    if phased:
        parts.append(_phases_text(phased))
    if any(j.get("dci_bytes") or j.get("crossing_bytes_per_iteration") for j in jobs.values()):
        rows = [[name, j.get("dci_bytes"), j.get("crossing_bytes_per_iteration")] for name, j in jobs.items()]
        parts.append(
            md_table(["job", "DCI bytes while it ran", "schedule's crossing bytes per iteration"], rows)
        )
    lines = [f"GPU utilization over all jobs (weighted by GPUs): **{pct(metrics.get('gpu_utilization'))}**."]
    if metrics.get("dci_bytes") is not None:
        lines.append(f"Bytes over the DC interconnect: {fmt(metrics['dci_bytes'])}.")
    parts.append(" ".join(lines))
    for key, alt in (("iterations", "iterations"), ("iterations_cdf", "iteration times, cumulative")):
        plot = (results.get("files") or {}).get(key)
        if plot:
            parts.append(f"![{alt}]({os.path.basename(plot)})")
    return "\n\n".join(parts)


_JOBS_HEADER = [
    "job",
    "collective",
    "ranks",
    "iterations",
    "mean iter (s)",
    "p50 (s)",
    "p99 (s)",
    "analytical (s)",
    "measured/analytical",
    "completion (s)",
    "bytes/rank/iter expected",
    "bytes ratio (worst)",
    "retransmissions",
    "timeouts",
    "GPU util",
    "stalled",
]

_JOBS_NOTE = (
    "*iter*: job-level iteration time (an iteration ends when its last rank "
    "ends it); mean, p50 and p99 skip the first iteration (start-up skew). "
    "*bytes ratio*: the payload bytes receivers counted in the rank-iteration "
    "furthest from the algorithm's formula, over the formula (no formula, no "
    "ratio). *GPU util*: compute time over iteration "
    f"time (a proxy). *stalled*: iterations longer than {fmt(STALL_FACTOR)}x the "
    "median."
)


def _jobs_table(jobs):
    rows = [
        [
            name,
            j.get("collective") or "-",
            j.get("ranks"),
            f"{fmt(j.get('iterations_completed'))}/{fmt(j.get('iterations_planned'))}",
            j.get("iteration_time_s"),
            j.get("iteration_time_p50_s"),
            j.get("iteration_time_p99_s"),
            j.get("analytical_iteration_s"),
            j.get("iteration_time_vs_analytical"),
            j.get("job_completion_s"),
            j.get("bytes_per_rank_expected"),
            j.get("bytes_per_rank_ratio"),
            j.get("retransmissions"),
            j.get("timeouts"),
            pct(j.get("gpu_utilization")),
            j.get("stalled_iterations"),
        ]
        for name, j in jobs.items()
    ]
    return md_table(_JOBS_HEADER, rows)


def _gap_events(jobs):
    """Per job whose receivers saw packet gaps, the first five of them."""
    parts = []
    for name, j in jobs.items():
        events = j.get("gap_events") or []
        if events:
            lines = [
                f"- {fmt(e['t'], ' s')}: {e['from']} -> {e['to']}, iteration {e['iter']}, "
                f"expected PSN {e['expected_psn']}, got {e['got_psn']}"
                for e in events[:5]
            ]
            parts.append(
                f"Packet gaps seen by the receivers of {name} "
                f"({fmt(j.get('gaps_seen'))} in all; first {len(lines)}):\n\n" + "\n".join(lines)
            )
    return parts


def _phases_text(phased):
    """Iteration time before, during and after the faults, per job."""
    rows = []
    for name, j in phased.items():
        before, during = j.get("iteration_before_s"), j.get("iteration_during_s")
        slowdown = j.get("fault_iteration_slowdown")
        if slowdown is None and before and during is not None:
            slowdown = during / before
        rows.append([name, before, during, j.get("iteration_after_s"), slowdown])
    return (
        "Iteration time around the faults (mean of the iterations that ended "
        "before the first outage, overlapped one, or started after the last):\n\n"
        + md_table(["job", "before (s)", "during (s)", "after (s)", "during/before"], rows)
    )


def section_paths(results: dict) -> str:
    """Where the controller put each job's connections (its answer on the
    job channel) and the bytes each link the jobs could use carried."""
    placement = results.get("placement") or {}
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    parts = []
    rows = []
    for job in placement.get("jobs", []):
        flows = job.get("flows", [])
        pinned = [f for f in flows if f.get("port")]
        unreachable = sum(1 for f in flows if f.get("unreachable"))
        rows.append(
            [
                job["name"],
                job.get("paths"),
                len(flows),
                len(pinned),
                unreachable,
                jobs.get(job["name"], {}).get("link_load_max_mean"),
            ]
        )
    parts.append(
        "What the controller chose (ecmp: the host and every switch hash each "
        "connection; precise: each connection pinned, NIC port included; via: pinned "
        "where the job's rules say, hashed where no rule or no live path meets them), and how "
        "evenly each job's bytes spread over the switch-to-switch links it could "
        "use (max/mean of their egress byte counters while it ran; 1 = even):\n\n"
        + md_table(["job", "paths", "connections", "pinned", "unreachable", "link load max/mean"], rows)
    )
    pinned = [
        [job["name"], f["name"], " > ".join(f["path"])]
        for job in placement.get("jobs", [])
        for f in job.get("flows", [])
        if f.get("path")
    ]
    if pinned:
        parts.append(
            "Pinned connections (the egress interfaces of each path):\n\n"
            + md_table(["job", "connection", "path"], pinned)
        )
    loaded = [name for name, j in jobs.items() if j.get("link_load")]
    if loaded:
        links = sorted({link for name in loaded for link in jobs[name]["link_load"]})
        rows = [[link] + [mb(jobs[name]["link_load"].get(link)) for name in loaded] for link in links]
        parts.append(
            "Bytes per link while each job ran (MB, egress counters):\n\n"
            + md_table(["link (egress)"] + loaded, rows)
        )
    return "\n\n".join(parts)


def section_crux(crux: dict) -> str:
    """Crux as it ran: each decision of the running schedule, and what each
    job declared beside what its traffic showed."""
    decisions = [
        [d["at"], d["why"], ", ".join(f"{job} {level}" for job, level in sorted(d["levels"].items()))]
        for d in crux.get("decisions", [])
    ]
    rows = []
    for name, j in sorted((crux.get("jobs") or {}).items()):
        declared, measured, ratio = j.get("declared") or {}, j.get("measured") or {}, j.get("ratio") or {}
        rows.append(
            [
                name,
                declared.get("compute_s"),
                measured.get("compute_s"),
                ratio.get("compute"),
                mb(declared.get("bytes")),
                mb(measured.get("bytes")),
                ratio.get("bytes"),
                measured.get("period_s"),
                measured.get("iterations"),
                measured.get("resolution_s"),
            ]
        )
    return (
        "The controller read each crux job's traffic (its connections' byte counters at their first "
        "switch), profiled each job alone at the top class when it began to send, and planned the "
        "classes from what it measured (level 0 is the highest):\n\n"
        + md_table(["at (s)", "decision", "levels"], decisions)
        + "\n\nWhat each job declared beside what was measured "
        + "(per iteration; ratio = measured / declared):\n\n"
        + md_table(
            [
                "job",
                "compute declared (s)",
                "measured (s)",
                "ratio",
                "bytes declared (MB)",
                "measured (MB)",
                "ratio",
                "period (s)",
                "periods seen",
                "sampling (s)",
            ],
            rows,
        )
    )
