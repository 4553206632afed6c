"""`hpnlab compare`: several drills' results side by side in the terminal."""

from testbed.fabric.problems import printable

from .text import fmt, pct, text_table
from .verdicts import fidelity_min, verdict


def _run_name(results):
    """The scenario's name, and its time dilation when it had one (every
    number is in emulated time either way, so the runs compare)."""
    name, n = results.get("scenario") or "-", results.get("time_dilation")
    return f"{name} (dilation {n:g})" if n and n != 1 else name


def _comparison_rows(results):
    """Table rows of one run: one per source host, then the overall line."""
    metrics = results.get("metrics") or {}
    name, word, fid = _run_name(results), verdict(results), fidelity_min(results)
    scopes = list((metrics.get("hosts") or {}).items())
    scopes.append(("(all)", metrics.get("overall") or {}))
    rows = []
    for i, (host, m) in enumerate(scopes):
        first = i == 0
        rows.append(
            [
                name if first else "",
                word if first else "",
                host,
                fmt(m.get("before_mbit")),
                fmt(m.get("during_mbit")),
                fmt(m.get("after_mbit")),
                fmt(m.get("max_silence_s")),
                fmt(m.get("fault_throughput_ratio")),
                fmt(fid) if first else "",
            ]
        )
    return rows


def _job_comparison_rows(results):
    """Table rows of one run's training jobs, one per job."""
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    name = _run_name(results)
    return [
        [
            name if i == 0 else "",
            job,
            fmt(j.get("iteration_time_s")),
            fmt(j.get("iteration_time_p99_s")),
            pct(j.get("gpu_utilization")),
            fmt(j.get("retransmissions")),
            fmt(j.get("stalled_iterations")),
        ]
        for i, (job, j) in enumerate(jobs.items())
    ]


def render_side_by_side(results_list: list[dict]) -> str:
    """A compact terminal table comparing several runs (e.g. dual vs single ToR),
    and a second one for their training jobs when any ran some."""
    header = ["scenario", "result", "host", "before", "during", "after", "silence_s", "ratio", "fidelity"]
    rows = []
    for results in results_list:
        rows += _comparison_rows(results)
    text = text_table(header, rows) + "\n(throughput in Mbit/s; ratio = during/before)"
    job_rows = [row for results in results_list for row in _job_comparison_rows(results)]
    if job_rows:
        text += "\n\n" + text_table(
            ["scenario", "job", "iter_s", "p99_s", "gpu_util", "retx", "stalled"], job_rows
        )
        text += "\n(iter_s: mean iteration time after the first; retx: retransmissions)"
    # results.json files may come from anyone: what they say is shown, never obeyed
    return "\n".join(printable(line) for line in text.split("\n"))
