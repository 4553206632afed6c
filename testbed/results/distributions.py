"""The report's plots that are not drawn against time: each job's
iteration times as a cumulative distribution (iterations-cdf.png) and the
probes' longest delivery gap per named fault (probes.png)."""

import os

from .plots import finish_axes, finish_plot, new_axes, png_bytes, titled
from .store import atomic_write

CDF_PNG = "iterations-cdf.png"


def plot_iteration_cdf(out_dir: str, results: dict) -> str | None:
    """Write iterations-cdf.png: each job's iteration times as a cumulative
    distribution (the tail a fault or a neighbour adds shows as the curve's
    long right end). None without a job of two iterations or more."""
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    times = {n: sorted(t for t in j.get("iteration_times_s") or [] if t is not None) for n, j in jobs.items()}
    times = {n: t for n, t in times.items() if len(t) >= 2}
    if not times:
        return None
    fig, ax = new_axes()
    for i, (name, t) in enumerate(sorted(times.items())):
        ax.step(t, [(k + 1) / len(t) for k in range(len(t))], where="post", color=f"C{i % 10}", label=name)
    longest = max(t[-1] for t in times.values())
    title = titled(
        f"{results.get('scenario') or '(unnamed)'}: iteration times, cumulative", results.get("time_dilation")
    )
    return finish_plot(
        fig, ax, out_dir, CDF_PNG, title, "iteration time (s)", "share of iterations", longest * 1.05
    )


PROBES_PNG = "probes.png"


def plot_probe_gaps(out_dir: str, results: dict) -> str | None:
    """Write probes.png: per named fault, the longest time a probe flow
    went without a delivery, beside the gap before any fault (the probes'
    own spacing) and each gap_ms bound the scenario set. None without probes."""
    faults = ((results.get("metrics") or {}).get("probe") or {}).get("faults") or {}
    if not faults:
        return None
    names = list(faults)
    base = ((results.get("metrics") or {}).get("probe") or {}).get("base_gap_ms")
    fig, ax = new_axes()
    gaps = [faults[n].get("gap_ms") or 0 for n in names]
    colors = ["C3" if faults[n].get("action") == "link-down" else "C2" for n in names]
    ax.bar(range(len(names)), gaps, color=colors)
    for i, g in enumerate(gaps):
        ax.text(i, g, f"{g:g} ms", ha="center", va="bottom", fontsize=8)
    if base is not None:
        ax.axhline(base, color="grey", linestyle=":", label=f"before any fault: {base:g} ms")
    for e in results.get("expectations") or []:
        if e.get("metric") == "gap_ms" and e.get("max") is not None and e.get("fault") in names:
            i = names.index(e["fault"])
            ax.hlines(e["max"], i - 0.4, i + 0.4, color="black", linestyle="--")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{n}\n({faults[n].get('action')})" for n in names], fontsize=8)
    title = titled(
        f"{results.get('scenario') or '(unnamed)'}: longest delivery gap of the probes per fault "
        "(dashed: the bound expected)",
        results.get("time_dilation"),
    )
    finish_axes(fig, ax, title, "named fault", "longest gap (ms)", len(names) - 0.5)
    ax.set_xlim(-0.6, len(names) - 0.4)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, PROBES_PNG)
    atomic_write(path, png_bytes(fig))
    return path
