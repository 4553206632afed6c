"""A picture of a fabric (SVG or PNG): `hpnlab topo draw`, and fabric.svg in
a drill's report with the links that failed and the links that carried most.

Planes have a colour each (a link takes its plane's), DCI links are thick
and dashed, a node's shape says its tier; hosts are labelled with their
segment below them, ToRs with their rail. A failed link is drawn red and
dotted with a cross on it; a link's load, when given, sets its width.
"""

import io
import os

from testbed.fabric.layout import layout
from testbed.fabric.model import AGG, BORDER, CORE, HOST, TOR, Fabric

from .store import atomic_write

FORMATS = ("svg", "png")
FABRIC_SVG = "fabric.svg"  # in a drill's report
MARKERS = {HOST: "s", TOR: "o", AGG: "D", CORE: "h", BORDER: "^"}
NODE_COLOUR = {HOST: "0.35", TOR: "0.15", AGG: "0.15", CORE: "0.15", BORDER: "0.15"}
BUSIEST = 5  # links whose load is written on them
LABELLED_MAX = 64  # beyond this many nodes of a tier, names would overlap


def _plane_colour(plane):
    return "0.45" if plane is None else f"C{plane % 10}"


def _style(link, down, load, most):
    """(colour, width, line style) of one link."""
    if link.kind == "dci":
        colour, width, dash = "black", 2.4, "--"
    else:
        colour, width, dash = _plane_colour(link.plane), 1.0, "-"
    if load and most:
        width = 0.8 + 5.0 * load.get(link.name, 0.0) / most
    if link.name in down:
        colour, dash = "red", ":"
    return colour, width, dash


def _course(link, pos, arc):
    """The points a link is drawn through, and its middle: a straight line,
    or for a DCI link an arc raised by `arc` (borders share a row, and
    straight DCI links would lie on top of each other)."""
    (x0, y0), (x1, y1) = pos[link.a.node], pos[link.b.node]
    if not arc:
        return [x0, x1], [y0, y1], ((x0 + x1) / 2, (y0 + y1) / 2)
    steps = [i / 24 for i in range(25)]
    xs = [x0 + (x1 - x0) * t for t in steps]
    ys = [y0 + (y1 - y0) * t + 4 * arc * t * (1 - t) for t in steps]
    return xs, ys, (xs[12], ys[12])


def _draw_links(ax, fabric, pos, down, load):
    most = max(load.values(), default=0.0) if load else 0.0
    middles, dci = {}, 0
    for link in fabric.links:
        arc = 0.0
        if link.kind == "dci":
            dci += 1
            arc = 0.12 * dci
        xs, ys, middles[link.name] = _course(link, pos, arc)
        colour, width, dash = _style(link, down, load, most)
        ax.plot(xs, ys, color=colour, linewidth=width, linestyle=dash, zorder=1)
        if link.name in down:
            ax.plot(
                *([v] for v in middles[link.name]), marker="x", color="red", markersize=9, mew=2.2, zorder=3
            )
    if load and most:
        busiest = sorted(load.items(), key=lambda kv: -kv[1])[:BUSIEST]
        for name, value in busiest:
            if name not in middles or value <= 0:
                continue
            ax.annotate(
                f"{value / most:.0%}",
                middles[name],
                fontsize=6,
                color="0.1",
                ha="center",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
                zorder=4,
            )


def _label(node, rails):
    if node.kind == TOR and rails > 1:
        return f"{node.name}\nrail {node.rail}"
    return node.name


def _draw_nodes(ax, fabric, pos):
    per_tier: dict = {}
    for node in fabric.nodes.values():
        per_tier[node.kind] = per_tier.get(node.kind, 0) + 1
    rails = len({nic.rail for nic in fabric.nics})
    for node in fabric.nodes.values():
        x, y = pos[node.name]
        ax.plot(
            [x],
            [y],
            marker=MARKERS.get(node.kind, "o"),
            color=NODE_COLOUR.get(node.kind, "0.2"),
            markersize=7 if node.kind == HOST else 9,
            zorder=5,
            linestyle="none",
        )
        if per_tier[node.kind] <= LABELLED_MAX:
            below = node.kind == HOST
            ax.annotate(
                _label(node, rails),
                (x, y),
                xytext=(0, -9 if below else 8),
                textcoords="offset points",
                fontsize=6,
                ha="center",
                va="top" if below else "bottom",
                rotation=90 if below else 0,
                zorder=6,
            )


def _draw_groups(ax, fabric, pos):
    """Segment names under the hosts, DC names above each band (several DCs)."""
    segments: dict = {}
    for node in fabric.hosts():
        segments.setdefault((node.dc, node.segment), []).append(pos[node.name][0])
    for (_dc, segment), xs in segments.items():
        name = f"segment {segment}" if segment is not None else ""
        ax.annotate(
            name,
            ((min(xs) + max(xs)) / 2, 0),
            xytext=(0, -42),
            textcoords="offset points",
            fontsize=7,
            ha="center",
            color="0.3",
        )
    dcs = sorted({n.dc for n in fabric.nodes.values()})
    if len(dcs) > 1:
        top = max(y for _, y in pos.values())
        for dc in dcs:
            xs = [pos[n.name][0] for n in fabric.nodes.values() if n.dc == dc]
            ax.annotate(
                f"DC {dc}",
                ((min(xs) + max(xs)) / 2, top),
                xytext=(0, 22),
                textcoords="offset points",
                fontsize=9,
                ha="center",
                weight="bold",
            )


def _legend(ax, fabric, down, load):
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_plane_colour(p), label=f"plane {p}") for p in fabric.planes()]
    if any(link.kind == "dci" for link in fabric.links):
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=2.4, label="DCI link"))
    if down:
        handles.append(Line2D([], [], color="red", linestyle=":", marker="x", label="failed link"))
    if load:
        handles.append(Line2D([], [], color="0.3", linewidth=4, label="width: load (busiest: share of most)"))
    for kind in (HOST, TOR, AGG, CORE, BORDER):
        if any(n.kind == kind for n in fabric.nodes.values()):
            handles.append(
                Line2D(
                    [],
                    [],
                    marker=MARKERS[kind],
                    color=NODE_COLOUR[kind],
                    linestyle="none",
                    label={HOST: "host", TOR: "ToR", AGG: "aggregation", CORE: "core", BORDER: "border"}[
                        kind
                    ],
                )
            )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)


def failed_links(fabric: Fabric, faults) -> set[str]:
    """Names of the links that `faults` (Fault records) take down at some
    point of the timeline."""
    down = set()
    for fault in faults:
        links = fabric.links_between(*fault.link)
        if fault.action == "link-down" and fault.index < len(links):
            down.add(links[fault.index].name)
    return down


def draw_fabric(fabric: Fabric, path: str, down=(), load=None, title=None) -> str:
    """Write the picture of `fabric` to `path` (its suffix, .svg or .png,
    says the format) and return the path. `down`: names of links drawn as
    failed; `load`: {link name: a measure of what it carried}."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"{path}: expected a file name ending in .svg or .png")
    geometry = layout(fabric)
    width = min(40.0, max(7.0, 0.45 * geometry.width + 2.5))
    fig = Figure(figsize=(width, 1.3 * geometry.height + 2.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    down = set(down)
    _draw_links(ax, fabric, geometry.positions, down, load)
    _draw_nodes(ax, fabric, geometry.positions)
    _draw_groups(ax, fabric, geometry.positions)
    _legend(ax, fabric, down, load)
    ax.set_xlim(-0.3, geometry.width + 0.3)
    ax.set_ylim(-0.75, geometry.height + 0.45 + 0.12 * sum(link.kind == "dci" for link in fabric.links))
    ax.axis("off")
    ax.set_title(
        title or f"{fabric.name}: {len(fabric.hosts())} hosts, {len(fabric.switches())} switches", fontsize=10
    )
    fig.tight_layout()
    data = io.BytesIO()
    fig.savefig(data, format=fmt)
    atomic_write(path, data.getvalue())
    return path
