"""The drill's plots: throughput.png (iperf3 flows, per flow and per source
host, with the outage windows), ports.png (what each NIC port of the
sending hosts carried), iterations.png (every training job's iteration
times against its analytical time) and the queues' backlog, marks and
pauses."""

import io
import os

from .dilation import note
from .flow_inputs import Series, as_faults, as_series
from .flows import aggregate, link_outages
from .store import atomic_write
from .text import fmt

PLOT_PNG, ITERATIONS_PNG = "throughput.png", "iterations.png"
FLOW_STYLES = ("-", "--", ":", "-.")


def host_of(flow_id, flow_info):
    """Source host of a flow; falls back to the 'src->dst#n' id convention."""
    info = flow_info.get(flow_id) or {}
    return info.get("src") or flow_id.split("->")[0]


def nan_gaps(values):
    # matplotlib draws NaN as a gap, which is exactly what "no sample" means.
    return [float("nan") if v is None else v for v in values]


def _draw_flows(ax, series, flow_info):
    """Thin per-flow lines and a thick aggregate per source host."""
    by_host = {}
    for fid in series.flows:
        by_host.setdefault(host_of(fid, flow_info), []).append(fid)
    colors = [f"C{i % 10}" for i in range(len(by_host))]
    label_flows = len(series.flows) <= 8  # beyond that the legend drowns the plot
    one_host = len(by_host) == 1
    for color, (host, ids) in zip(colors, sorted(by_host.items())):
        total = aggregate([series.values(f) for f in ids], len(series.t))
        total_color = "black" if one_host else color
        ax.plot(
            series.t,
            nan_gaps(total),
            color=total_color,
            linewidth=2.6,
            alpha=0.5,
            zorder=2,
            label=f"{host} total",
        )
        # One sending host: a colour per flow. Several: the flows of a host
        # share its colour and line styles tell them apart. Either way they
        # sit above the thick total so they stay visible.
        for k, fid in enumerate(ids):
            ax.plot(
                series.t,
                nan_gaps(series.values(fid)),
                color=f"C{k % 10}" if one_host else color,
                linewidth=1.0,
                linestyle="-" if one_host else FLOW_STYLES[k % len(FLOW_STYLES)],
                zorder=3,
                label=fid if label_flows else None,
            )


# How each kind of fault edge is drawn: (colour, verb of its label).
MARKS = {
    "link-down": ("red", "down"),
    "link-up": ("green", "up"),
    "link-degrade": ("darkorange", "degrade"),
    "link-restore": ("green", "restore"),
}
SPANS = {"down": ("red", "link down"), "degraded": ("orange", "link degraded")}


def fault_marks(faults) -> list[tuple[float, str, str]]:
    """(time, colour, label) of each line the plots draw: faults scheduled
    together with the same action (a switch's links, a named group) share
    one line, labelled by their name or their count, a degrade by the share
    of the rate it leaves, and by the time the controller's routes took to
    count it where that was measured (the slowest of the group) (pure)."""
    groups: dict = {}
    for raw in faults or []:
        f = as_faults([raw])[0]
        name = raw.get("name") if isinstance(raw, dict) else None
        key = (f.at, f.action, name)
        groups.setdefault(key, []).append(f)
    converged: dict = {}
    for raw in faults or []:
        if isinstance(raw, dict) and raw.get("converged_s") is not None:
            key = (raw["at"], raw["action"], raw.get("name"))
            converged[key] = max(converged.get(key, 0.0), raw["converged_s"])
    marks = []
    for key, fs in groups.items():
        _, action, name = key
        colour, verb = MARKS.get(action, ("grey", action))
        what = name or ("-".join(map(str, fs[0].link)) if len(fs) == 1 else f"{len(fs)} links")
        to = f" to {fs[0].rate:.0%}" if action == "link-degrade" and fs[0].rate is not None else ""
        # the routes' convergence, too short to draw on a drill's axis, is said
        routes = f", routes +{converged[key] * 1000:.0f} ms" if key in converged else ""
        marks.append((min(f.time for f in fs), colour, f"{verb} {what}{to}{routes}"))
    return sorted(marks)


def outage_spans(faults, duration, kind="down") -> list[tuple[float, float]]:
    """The times some link was down (kind "down") or degraded ("degraded"),
    overlapping windows merged (a failed switch is one span, not six shades
    stacked darker) (pure)."""
    spans: list[list[float]] = []
    windows = [w for w in link_outages(faults, duration) if w["kind"] == kind]
    for w in sorted(windows, key=lambda w: w["start"]):
        if spans and w["start"] <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], w["end"])
        else:
            spans.append([w["start"], w["end"]])
    return [(a, b) for a, b in spans]


def draw_faults(ax, faults, duration, pauses=None):
    """Shade the windows links were down or degraded; mark every fault edge
    with a labelled line; with `pauses` (results' pause records), a tick
    along the bottom where each PFC pause began."""
    starts = [r["start_s"] for r in pauses or () if r.get("start_s") is not None]
    if starts:
        ax.vlines(
            starts,
            0,
            0.03,
            transform=ax.get_xaxis_transform(),
            color="deeppink",
            linewidth=0.6,
            label="PFC pause",
        )
    for kind, (colour, label) in SPANS.items():
        for i, (start, end) in enumerate(outage_spans(faults, duration, kind)):
            ax.axvspan(start, end, color=colour, alpha=0.10, label=label if i == 0 else None)
    for t, colour, label in fault_marks(faults):
        ax.axvline(t, color=colour, linestyle="--", linewidth=1.1)
        ax.text(
            t,
            0.98,
            f" {label}",
            transform=ax.get_xaxis_transform(),
            rotation=90,
            va="top",
            ha="right",
            fontsize=7,
            color=colour,
        )


def new_axes():
    """A figure on the Agg canvas and its single axes.

    matplotlib's object API with the Agg canvas never needs a display and
    never touches pyplot's global state. Imported here: writing JSON and
    markdown should not pay matplotlib's import time, nor fail on a machine
    that only reads results.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def finish_axes(fig, ax, title, xlabel, ylabel, duration) -> None:
    """Title, labels, limits (time from 0 to `duration`, values from 0) and
    the legend beside the axes."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlim(0, max(duration, 1e-3))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()


def png_bytes(fig) -> bytes:
    png = io.BytesIO()
    fig.canvas.print_png(png)
    return png.getvalue()


def finish_plot(fig, ax, out_dir, filename, title, xlabel, ylabel, duration):
    """finish_axes, then write the PNG and return its path."""
    finish_axes(fig, ax, title, xlabel, ylabel, duration)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, filename)
    atomic_write(path, png_bytes(fig))
    return path


def titled(title, time_dilation):
    """The title, with the time dilation on a second line when there is one."""
    extra = note(time_dilation)
    return f"{title}\n({extra})" if extra else title


def plot_throughput(
    out_dir: str,
    series: Series | dict,
    faults: list | None,
    title: str,
    flow_info: dict | None = None,
    time_dilation: float = 1,
    pauses: list | None = None,
) -> str | None:
    """Write throughput.png into `out_dir` and return its path.

    `series` is the results' series dict ({interval_s, t, flows, flow_info})
    or a flow_inputs.Series, in emulated time (results/dilation.py);
    `time_dilation` is only stated in the title.
    """
    if flow_info is None:
        flow_info = series.get("flow_info", {}) if isinstance(series, dict) else {}
    series = as_series(series)
    duration = series.t[-1] if series.t else 0.0

    fig, ax = new_axes()
    _draw_flows(ax, series, flow_info)
    draw_faults(ax, faults, duration, pauses)
    return finish_plot(
        fig,
        ax,
        out_dir,
        PLOT_PNG,
        titled(title, time_dilation),
        "time since traffic start (s)",
        "throughput (Mbit/s)",
        duration,
    )


PORTS_PNG = "ports.png"


def plot_ports(out_dir: str, results: dict) -> str | None:
    """Write ports.png: what each NIC port of the sending hosts carried over
    time (its egress counters at 10 Hz), so that a dual-ToR host's traffic
    is seen moving to its other port when a link fails. None when no host
    port was sampled."""
    series = results.get("series") or {}
    ports, info, t = series.get("ports") or {}, series.get("port_info") or {}, series.get("t") or []
    if not ports or not t or not any(any(v for v in values if v) for values in ports.values()):
        return None
    fig, ax = new_axes()
    hosts = sorted({(info.get(p) or {}).get("host", p) for p in ports})
    for p in sorted(ports):
        host, to = (info.get(p) or {}).get("host", p), (info.get(p) or {}).get("to", "?")
        k = hosts.index(host)
        mine = sorted(q for q in ports if (info.get(q) or {}).get("host", q) == host)
        ax.plot(
            t[: len(ports[p])],
            nan_gaps(ports[p]),
            color=f"C{(k * 2 + mine.index(p)) % 10}",
            linestyle=FLOW_STYLES[mine.index(p) % len(FLOW_STYLES)],
            linewidth=1.6,
            label=f"{host} port to {to}",
        )
    duration = results.get("duration_s") or t[-1]
    draw_faults(ax, results.get("faults") or [], duration, results.get("pauses"))
    title = titled(
        f"{results.get('scenario') or '(unnamed)'}: what each NIC port of the sending hosts sent",
        results.get("time_dilation"),
    )
    return finish_plot(
        fig, ax, out_dir, PORTS_PNG, title, "time since traffic start (s)", "throughput (Mbit/s)", duration
    )


def plot_iterations(out_dir: str, results: dict) -> str | None:
    """Write iterations.png into `out_dir`: every job's iteration times at
    the moments the iterations ended, its analytical iteration time as a
    dashed line of the same colour, and the faults. Returns its path, or
    None when the drill ran no training job."""
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    if not jobs:
        return None
    faults = results.get("faults") or []
    ends = [e for j in jobs.values() for e in j.get("iteration_ends_s") or [] if e is not None]
    duration = results.get("duration_s") or max(ends, default=0.0)

    fig, ax = new_axes()
    for i, (name, j) in enumerate(sorted(jobs.items())):
        color = f"C{i % 10}"
        x = j.get("iteration_ends_s") or []
        y = nan_gaps((j.get("iteration_times_s") or [])[: len(x)])
        ax.plot(
            x[: len(y)],
            y,
            color=color,
            marker="o",
            markersize=4,
            linewidth=1.4,
            zorder=3,
            label=f"{name} ({j.get('collective') or '?'}, {fmt(j.get('ranks'))} ranks)",
        )
        analytical = j.get("analytical_iteration_s")
        if analytical is not None:
            ax.axhline(
                analytical,
                color=color,
                linestyle="--",
                linewidth=1.0,
                zorder=2,
                label=f"{name} analytical {fmt(analytical, ' s')}",
            )
    draw_faults(ax, faults, duration, results.get("pauses"))
    tops = [
        t
        for j in jobs.values()
        for t in (j.get("iteration_times_s") or []) + [j.get("analytical_iteration_s")]
        if t is not None
    ]
    if tops:
        ax.set_ylim(0, 1.15 * max(tops) or 1.0)  # room above the first, slowest iteration
    title = titled(
        f"{results.get('scenario') or '(unnamed)'}: iteration time per job", results.get("time_dilation")
    )
    return finish_plot(
        fig,
        ax,
        out_dir,
        ITERATIONS_PNG,
        title,
        "iteration end, time since traffic start (s)",
        "iteration time (s)",
        duration,
    )


QUEUES_PNG = "queues.png"
QUEUE_LINES = 8  # the busiest port-classes; more lines would be unreadable


def plot_queues(out_dir: str, results: dict) -> str | None:
    """Write queues.png: the backlog of the busiest port-classes over time
    (bytes, sampled by the queue engine). None when nothing queued."""
    q = results.get("queues") or {}
    series = (q.get("series") or {}).get("backlog_bytes") or {}
    t = (q.get("series") or {}).get("t") or []
    if not series or not t:
        return None
    busiest = sorted(series, key=lambda k: -max(series[k]))[:QUEUE_LINES]
    fig, ax = new_axes()
    for i, name in enumerate(busiest):
        ax.plot(
            t[: len(series[name])],
            [v / 1000 for v in series[name]],
            linewidth=1.0,
            color=f"C{i % 10}",
            label=name,
        )
    duration = results.get("duration_s") or t[-1]
    draw_faults(ax, results.get("faults") or [], duration, results.get("pauses"))
    title = titled(
        f"{results.get('scenario') or '(unnamed)'}: queue backlog per port and class",
        results.get("time_dilation"),
    )
    return finish_plot(
        fig, ax, out_dir, QUEUES_PNG, title, "time since traffic start (s)", "backlog (KB)", duration
    )


MARKS_PNG = "marks.png"
PAUSES_PNG = "pauses.png"


def plot_marks(out_dir: str, results: dict) -> str | None:
    """Write marks.png: CE marks per second of the busiest marking
    port-classes over time. None when nothing was marked."""
    q = results.get("queues") or {}
    marks = (q.get("series") or {}).get("marks") or {}
    t = (q.get("series") or {}).get("t") or []
    if not marks or len(t) < 2:
        return None
    busiest = sorted(marks, key=lambda k: -marks[k][-1])[:QUEUE_LINES]
    fig, ax = new_axes()
    for i, name in enumerate(busiest):
        cum = marks[name]
        rate = [(cum[j] - cum[j - 1]) / max(t[j] - t[j - 1], 1e-9) for j in range(1, len(cum))]
        ax.plot(t[1 : len(cum)], rate, linewidth=1.0, color=f"C{i % 10}", label=name)
    duration = results.get("duration_s") or t[-1]
    draw_faults(ax, results.get("faults") or [], duration, results.get("pauses"))
    title = titled(
        f"{results.get('scenario') or '(unnamed)'}: ECN marks per port and class",
        results.get("time_dilation"),
    )
    return finish_plot(
        fig, ax, out_dir, MARKS_PNG, title, "time since traffic start (s)", "CE marks per second", duration
    )


def plot_pauses(out_dir: str, results: dict) -> str | None:
    """Write pauses.png: every pause as a bar on its link's row (the
    upstream port that was paused, and the class). None without pauses."""
    recs = results.get("pauses") or []
    if not recs:
        return None
    rows = sorted({f"{r['link']}/{r['class']}" for r in recs})
    fig, ax = new_axes()
    for i, row in enumerate(rows):
        bars = [
            (r["start_s"], max(r["duration_s"], 1e-4)) for r in recs if f"{r['link']}/{r['class']}" == row
        ]
        ax.broken_barh(bars, (i + 0.65, 0.7), color=f"C{i % 10}")  # row i at height i + 1
    ax.set_yticks(range(1, len(rows) + 1))
    ax.set_yticklabels(rows, fontsize=8)
    duration = results.get("duration_s") or max(r["start_s"] + r["duration_s"] for r in recs)
    draw_faults(ax, results.get("faults") or [], duration)
    title = titled(
        f"{results.get('scenario') or '(unnamed)'}: pauses per link and class", results.get("time_dilation")
    )
    return finish_plot(
        fig,
        ax,
        out_dir,
        PAUSES_PNG,
        title,
        "time since traffic start (s)",
        "paused upstream port / class",
        duration,
    )
