"""Where each node of a fabric sits in a picture of it (pure geometry).

Tiers from the bottom: hosts, ToRs, aggregation switches, cores, borders.
Each datacenter gets a band of its own, side by side, so DCI links run
between bands. Inside a band, hosts go by segment, ToRs by segment, rail
and port (a dual-ToR pair side by side under its hosts), aggregation
switches by plane, so a plane is one block of the picture.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import AGG, BORDER, CORE, HOST, TOR, Fabric, Node

TIERS = (HOST, TOR, AGG, CORE, BORDER)
TIER_GAP = 1.0  # vertical distance between tiers
DC_GAP = 0.6  # share of a node's width left empty between datacenters


@dataclass(frozen=True)
class Layout:
    """Node name -> (x, y); `width` and `height` bound every position."""

    positions: dict[str, tuple[float, float]]
    width: float
    height: float


def _order(node: Node, index: dict[str, int]) -> tuple:
    """How nodes of one tier and one DC follow each other left to right."""
    if node.kind == HOST:
        return (node.segment or 0, index[node.name])
    if node.kind == TOR:
        return (node.segment or 0, node.rail or 0, index[node.name])
    if node.kind == AGG:
        return (node.plane or 0, node.segment or 0, index[node.name])
    return (index[node.name],)


def layout(fabric: Fabric) -> Layout:
    """Positions for every node: x in node widths, y in tiers. Each tier of
    a DC is spread over the DC's band, centred, so that a tier with few
    nodes sits above the middle of the many below it."""
    index = {name: i for i, name in enumerate(fabric.nodes)}  # the order the builder made them in
    dcs = sorted({n.dc for n in fabric.nodes.values()})
    tiers = [t for t in TIERS if any(n.kind == t for n in fabric.nodes.values())]
    counts = {
        (dc, t): sorted(
            (n for n in fabric.nodes.values() if n.dc == dc and n.kind == t), key=lambda n: _order(n, index)
        )
        for dc in dcs
        for t in tiers
    }
    band = {dc: max(len(counts[dc, t]) for t in tiers) for dc in dcs}
    positions: dict[str, tuple[float, float]] = {}
    left = 0.0
    for dc in dcs:
        for level, tier in enumerate(tiers):
            nodes = counts[dc, tier]
            step = band[dc] / len(nodes) if nodes else 0.0
            for i, node in enumerate(nodes):
                positions[node.name] = (left + (i + 0.5) * step, level * TIER_GAP)
        left += band[dc] + DC_GAP * band[dc] * (dc != dcs[-1])
    return Layout(positions, left, (len(tiers) - 1) * TIER_GAP)
