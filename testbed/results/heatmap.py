"""links.png: every link direction's utilization over time, a row per
egress port that carried traffic and a column per 10 Hz sample, from the
egress counters the drill sampled (what each port really sent, against
its shaped rate): where the load went, and where it went when a link
failed."""

from __future__ import annotations

import os

from testbed.fabric.model import Fabric

from .counters import port_series
from .plots import draw_faults, new_axes, png_bytes, titled
from .store import atomic_write

LINKS_PNG = "links.png"
IDLE = 0.01  # a row whose port never passed 1% of its rate is left out
MAX_ROWS = 64  # the busiest; more would not be readable


def utilization_rows(fabric: Fabric, samples: list, interval: float) -> tuple[list[str], list[list[float]]]:
    """(row labels 'node -> node', utilization rows in [0, ..]) of every
    egress port the samples hold that carried traffic, busiest first; time
    in the samples' own clock (pure)."""
    n = int(round(samples[-1][0] / interval)) if samples else 0
    ends = {}
    for link in fabric.links:
        for end, other in ((link.a, link.b), (link.b, link.a)):
            ends[end.ifname] = (f"{end.node} -> {other.node}", fabric.scaled_mbit(link))
    mbit = port_series(samples, ends, n, interval)
    rows = []
    for dev, values in mbit.items():
        label, rate = ends[dev]
        util = [0.0 if v is None else v / rate for v in values]
        if util and max(util) >= IDLE:
            rows.append((sum(util), label, util))
    rows.sort(key=lambda r: -r[0])
    rows = rows[:MAX_ROWS]
    return [label for _, label, _ in rows], [util for _, _, util in rows]


def plot_link_heatmap(
    out_dir: str, fabric: Fabric, samples: list, results: dict, interval: float = 0.1
) -> str | None:
    """Write links.png; None when no link carried traffic. `samples` are
    the run's (machine time); the plot is in emulated time, as the rest."""
    labels, rows = utilization_rows(fabric, samples, interval)
    if not rows:
        return None
    n = results.get("time_dilation") or 1
    duration = len(rows[0]) * interval / n
    fig, ax = new_axes()
    fig.set_size_inches(11, max(3.0, 1.2 + 0.18 * len(rows)))
    image = ax.imshow(
        rows,
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        vmin=0,
        vmax=1,
        extent=(0, duration, len(rows) - 0.5, -0.5),
    )
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    draw_faults(ax, results.get("faults") or [], duration, results.get("pauses"))
    fig.colorbar(image, ax=ax, label="utilization (sent / shaped rate)", fraction=0.04, pad=0.01)
    ax.set_xlabel("time since traffic start (s)")
    ax.set_title(
        titled(
            f"{results.get('scenario') or '(unnamed)'}: link utilization, busiest first",
            results.get("time_dilation"),
        )
    )
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, LINKS_PNG)
    atomic_write(path, png_bytes(fig))
    return path
