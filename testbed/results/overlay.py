"""`hpnlab compare --plot`: several drills on one pair of axes, as a paper
draws its comparisons (HPN's Fig. 18a is two curves on one axis): each
run's sending hosts' throughput, or, for runs of training jobs only, each
job's iteration times, one colour per run and its outages shaded in it."""

from __future__ import annotations

from .flow_inputs import as_series
from .flows import aggregate
from .plots import finish_axes, host_of, nan_gaps, new_axes, outage_spans, png_bytes

HOST_STYLES = ("-", "--", ":", "-.")


def _label(results: dict, name: str) -> str:
    return f"{results.get('scenario') or name}"


def _throughput_lines(ax, results: dict, color: str, label: str) -> float:
    """Each sending host's total throughput; the run's length."""
    raw = results.get("series") or {}
    series = as_series(raw)
    flow_info = raw.get("flow_info") or {}
    by_host: dict[str, list] = {}
    for fid in series.flows:
        by_host.setdefault(host_of(fid, flow_info), []).append(fid)
    for k, (host, ids) in enumerate(sorted(by_host.items())):
        total = aggregate([series.values(f) for f in ids], len(series.t))
        ax.plot(
            series.t,
            nan_gaps(total),
            color=color,
            linewidth=1.8,
            linestyle=HOST_STYLES[k % len(HOST_STYLES)],
            label=f"{label}: {host}",
        )
    return series.t[-1] if series.t else 0.0


def _iteration_lines(ax, results: dict, color: str, label: str) -> float:
    """Each job's iteration times at the moment each iteration ended."""
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    end = 0.0
    for k, (name, job) in enumerate(sorted(jobs.items())):
        ends, times = job.get("iteration_ends_s") or [], job.get("iteration_times_s") or []
        n = min(len(ends), len(times))
        if not n:
            continue
        ax.plot(
            ends[:n],
            times[:n],
            color=color,
            marker="o",
            markersize=3,
            linewidth=1.4,
            linestyle=HOST_STYLES[k % len(HOST_STYLES)],
            label=f"{label}: {name}",
        )
        end = max(end, max(ends[:n]))
    return end


def overlay_png(runs: list[tuple[str, dict]]) -> bytes:
    """The PNG of `runs` ((name, results.json) each) on one pair of axes:
    throughput when any run has iperf3 flows, else iteration times."""
    flows = any(((r.get("series") or {}).get("flows")) for _, r in runs)
    fig, ax = new_axes()
    duration = 0.0
    for i, (name, results) in enumerate(runs):
        color, label = f"C{i % 10}", _label(results, name)
        draw = _throughput_lines if flows else _iteration_lines
        length = draw(ax, results, color, label)
        for start, stop in outage_spans(results.get("faults") or [], length):
            ax.axvspan(start, stop, color=color, alpha=0.08)
        duration = max(duration, length)
    what = "throughput per sending host" if flows else "iteration time per job"
    finish_axes(
        fig,
        ax,
        f"{' against '.join(_label(r, n) for n, r in runs)}: {what}\n(outages shaded in the run's colour)",
        "time since traffic start (s)",
        "throughput (Mbit/s)" if flows else "iteration time (s)",
        duration,
    )
    return png_bytes(fig)
