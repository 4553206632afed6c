"""`hpnlab queues`: the running fabric's class queues, read from the queue
engine's counters (the BPF maps its owner pinned) twice, an interval apart.

The counters are the ones the drills sample (queues.py): what entered and
left each (port, class) queue, what it dropped and marked, and the PFC
episode (odd while the queue is above XOFF, so its upstream is paused). A
row tells what happened in the interval and, for drops, marks and pauses,
since the fabric came up. Reading is a copy of two arrays; the rows are
computed by a pure function the tests drive with numbers of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.fabric.model import Fabric

from .queues import CLASSES, PFC_FIELDS, STAT_FIELDS, QueueEngine, port_slots

ENQ_B, ENQ_P, DEQ_B, DEQ_P, DROP_B, DROP_P, MARKS, ECT = range(len(STAT_FIELDS))
EPISODE = PFC_FIELDS.index("episode")


@dataclass
class Port:
    ifname: str
    node: str  # the node whose egress this queue is
    to: str  # the node at the far end of the wire
    slot: int
    rate_mbit: float  # the port's emulated rate


def ports_of(fabric: Fabric) -> list[Port]:
    """Every port of the fabric with a queue, in the engine's slot order."""
    slots, _, _ = port_slots(fabric)
    out = []
    for link in fabric.links:
        for end, other in ((link.a, link.b), (link.b, link.a)):
            out.append(Port(end.ifname, end.node, other.node, slots[end.ifname], fabric.scaled_mbit(link)))
    return sorted(out, key=lambda p: p.slot)


def select(ports: list[Port], wanted: list[str]) -> list[Port]:
    """The ports named by interface or by node (all of a node's ports);
    every port when nothing is named. ValueError names what matched nothing."""
    if not wanted:
        return ports
    chosen = [p for p in ports if p.ifname in wanted or p.node in wanted]
    unknown = [w for w in wanted if not any(w in (p.ifname, p.node) for p in ports)]
    if unknown:
        like = ports[0].ifname
        raise ValueError(f"{', '.join(unknown)}: neither a port (like {like}) nor a node of this fabric")
    return chosen


def rows(
    ports: list[Port],
    classes: list[str],
    before: tuple[np.ndarray, np.ndarray],
    after: tuple[np.ndarray, np.ndarray],
    seconds: float,
) -> list[dict]:
    """One row per (port, class) (pure). `before`/`after`: (the stat
    table, the PFC table) as read, one row per slot x CLASSES + class;
    `seconds`: the time between the two reads."""
    (st0, _), (st1, pf1) = before, after
    out = []
    for p in ports:
        for c, name in enumerate(classes):
            i = p.slot * CLASSES + c
            a, b = st0[i].astype(np.int64), st1[i].astype(np.int64)
            episode = int(pf1[i][EPISODE])
            sent = int(b[DEQ_B] - a[DEQ_B])
            out.append(
                {
                    "port": p.ifname,
                    "node": p.node,
                    "to": p.to,
                    "class": name,
                    "backlog_bytes": max(0, int(b[ENQ_B] - b[DEQ_B])),
                    "backlog_pkts": max(0, int(b[ENQ_P] - b[DEQ_P])),
                    "sent_bytes": sent,
                    "sent_mbit_s": sent * 8 / seconds / 1e6 if seconds > 0 else 0.0,
                    "port_mbit": p.rate_mbit,
                    "drops": int(b[DROP_P] - a[DROP_P]),
                    "drops_total": int(b[DROP_P]),
                    "marks": int(b[MARKS] - a[MARKS]),
                    "marks_total": int(b[MARKS]),
                    "pausing_upstream": bool(episode & 1),
                    "pauses_total": (episode + 1) // 2,
                }
            )
    return out


def busy(row: dict) -> bool:
    """Whether anything happened at this queue in the interval or is held in it."""
    keys = ("backlog_bytes", "sent_bytes", "drops", "marks", "pausing_upstream")
    return any(row[k] for k in keys)


class Counters:
    """The running fabric's queue counters, open for reading."""

    def __init__(self, fabric: Fabric):
        self.engine = QueueEngine(fabric).attach_pinned()

    def read(self) -> tuple[np.ndarray, np.ndarray]:
        """A copy of both tables, one row per slot x CLASSES + class."""
        stat, pfc = self.engine.maps["hpnlab_qstat"], self.engine.maps["hpnlab_pfc"]
        return (
            np.frombuffer(stat.memory(), dtype=np.uint64)[: stat.max_entries * len(STAT_FIELDS)]
            .reshape(-1, len(STAT_FIELDS))
            .copy(),
            np.frombuffer(pfc.memory(), dtype=np.uint64)[: pfc.max_entries * len(PFC_FIELDS)]
            .reshape(-1, len(PFC_FIELDS))
            .copy(),
        )

    def close(self) -> None:
        self.engine.detach()
