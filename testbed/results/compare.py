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


def _completion(job):
    """The job's completion time as measured when it ran all its
    iterations; otherwise "~" and what its mean iteration time projects
    for them (a drill often ends first); "-" when it never iterated."""
    done = job.get("job_completion_s")
    if done is not None:
        return fmt(done)
    mean, planned = job.get("iteration_time_s"), job.get("iterations_planned")
    return f"~{fmt(mean * planned)}" if mean and planned else "-"


def _job_comparison_rows(results):
    """Table rows of one run's training jobs, one per job, then the
    aggregate GPU utilization (weighted by GPUs) of all of them."""
    metrics = results.get("metrics") or {}
    jobs = metrics.get("jobs") or {}
    name = _run_name(results)
    rows = [
        [
            name if i == 0 else "",
            job,
            fmt(j.get("iterations_completed")),
            fmt(j.get("iteration_time_s")),
            fmt(j.get("iteration_time_p99_s")),
            _completion(j),
            pct(j.get("gpu_utilization")),
            fmt(j.get("retransmissions")),
            fmt(j.get("stalled_iterations")),
        ]
        for i, (job, j) in enumerate(jobs.items())
    ]
    if len(jobs) > 1:
        rows.append(["", "(all GPUs)", "", "", "", "", pct(metrics.get("gpu_utilization")), "", ""])
    return rows


def _utilization_against_first(results_list):
    """One line per later run: its aggregate GPU utilization against the
    first run's, as a relative change (None when either is missing)."""
    utils = [(_run_name(r), (r.get("metrics") or {}).get("gpu_utilization")) for r in results_list]
    (first, base), lines = utils[0], []
    for name, util in utils[1:]:
        if base and util is not None:
            lines.append(f"{name}: aggregate GPU utilization {util / base - 1:+.1%} against {first}")
    return lines


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
            ["scenario", "job", "iters", "iter_s", "p99_s", "jct_s", "gpu_util", "retx", "stalled"], job_rows
        )
        text += (
            "\n(iter_s: mean iteration time after the first; jct_s: job completion time,"
            "\n ~ where the drill ended first: planned iterations x iter_s; retx: retransmissions)"
        )
        text += "".join("\n" + line for line in _utilization_against_first(results_list))
    # results.json files may come from anyone: what they say is shown, never obeyed
    return "\n".join(printable(line) for line in text.split("\n"))


HOST_KEYS = ("before_mbit", "during_mbit", "after_mbit", "max_silence_s", "fault_throughput_ratio")
JOB_KEYS = (
    "iterations_completed",
    "iteration_time_s",
    "iteration_time_p99_s",
    "job_completion_s",
    "gpu_utilization",
    "retransmissions",
    "stalled_iterations",
)


def side_by_side_data(results_list: list[dict]) -> list[dict]:
    """What `compare --json` prints: per run the numbers the tables show,
    unformatted, and its aggregate GPU utilization against the first run's
    (pure)."""
    out = []
    base = ((results_list[0].get("metrics") or {}).get("gpu_utilization")) if results_list else None
    for results in results_list:
        metrics = results.get("metrics") or {}
        util = metrics.get("gpu_utilization")
        out.append(
            {
                "scenario": results.get("scenario"),
                "time_dilation": results.get("time_dilation"),
                "verdict": verdict(results),
                "fidelity": fidelity_min(results),
                "hosts": {
                    h: {k: m.get(k) for k in HOST_KEYS} for h, m in (metrics.get("hosts") or {}).items()
                },
                "overall": {k: (metrics.get("overall") or {}).get(k) for k in HOST_KEYS},
                "jobs": {j: {k: m.get(k) for k in JOB_KEYS} for j, m in (metrics.get("jobs") or {}).items()},
                "gpu_utilization": util,
                "gpu_utilization_vs_first": util / base - 1 if base and util is not None else None,
            }
        )
    return out
