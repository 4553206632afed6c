"""Priority queues of every emulated port (pure): the classes a scenario
declares, which DSCP selects which class, and what each class holds on a
given port, in bytes on this machine.

A scenario without `queues` keeps one FIFO per port (the model then carries
no profile). With it, every egress (host, ToR, aggregation, interconnect)
gets the same classes, served in strict priority (first class first); a
port kind may override a class's buffer and ECN.

A class may be lossless (PFC-like): on a switch, when one of its queues
reaches XOFF, the links that feed that queue stop sending the class until
it falls to XON. XOFF defaults to the class's buffer; what arrives while a
pause takes effect lands above it, in headroom reserved on top: sized per
feeding link from the pause reaction this machine is held to
(PAUSE_REACTION_BUDGET), plus two frames in flight.

Amounts are written either as sizes in real bytes (divided by the scale,
like every byte count of the fabric) or as times at the port's rate ('5ms':
what the port sends in 5 ms of emulated time). Time dilation changes
neither: a dilated port is N times slower and its queue lasts N times
longer, holding the same bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .model import AGG, BORDER, CORE, HOST, TOR, Endpoint, Fabric, Link
from .units import parse_bytes, parse_time

MAX_CLASSES = 8
DSCP_VALUES = 64
HOST_PORTS, TOR_PORTS, AGG_PORTS, INTERCONNECT_PORTS = "host", "tor", "agg", "interconnect"
PORT_KINDS = (HOST_PORTS, TOR_PORTS, AGG_PORTS, INTERCONNECT_PORTS)
_NODE_PORT_KIND = {HOST: HOST_PORTS, TOR: TOR_PORTS, AGG: AGG_PORTS, CORE: AGG_PORTS, BORDER: AGG_PORTS}
ECN_STEP, ECN_RED = "step", "red"
DEFAULT_BUFFER = "100ms"  # as the single FIFO of a port without classes
DEFAULT_RED_PROBABILITY = 0.1
# The p99 pause reaction the engine is held to (measured and reported by
# every drill with a lossless class); headroom is sized from it.
PAUSE_REACTION_BUDGET = 0.005


def frame_bytes(mtu: int) -> int:
    return mtu + 14


def shaper_burst_bytes(mtu: int) -> int:
    """What a port's shaper (its HTB classes) may send back to back, at the
    veth's speed, after it was idle: two frames, or 15 KB at a small MTU.
    That much can reach the next switch's socket at one instant."""
    return max(15000, 2 * frame_bytes(mtu))


@dataclass(frozen=True)
class Amount:
    """A size in real bytes or a time at the port's rate (one of the two)."""

    real_bytes: float | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, raw: str | float) -> Amount:
        text = str(raw).strip()
        if not isinstance(raw, str) or text.endswith("B"):
            return cls(real_bytes=parse_bytes(raw))
        return cls(seconds=parse_time(raw))

    def bytes_on(self, real_rate_bps: float, scale: float) -> int:
        """Bytes on this machine for a port of real rate `real_rate_bps`."""
        if self.seconds is not None:
            return int(self.seconds * real_rate_bps / scale / 8)
        return int((self.real_bytes or 0.0) / scale)

    def text(self) -> str:
        return f"{self.seconds * 1e3:g}ms" if self.seconds is not None else f"{self.real_bytes:g}B"


@dataclass(frozen=True)
class Ecn:
    mode: str  # ECN_STEP: mark at or above k; ECN_RED: ramp min..max
    low: Amount  # k, or the ramp's start
    high: Amount | None = None  # the ramp's end (red)
    probability: float = 1.0  # marking probability at `high` (red)


@dataclass(frozen=True)
class Pfc:
    xoff: Amount | None = None  # None: the buffer less the headroom
    xon: Amount | None = None  # None: half of XOFF


@dataclass(frozen=True)
class QueueClass:
    name: str
    dscp: tuple = ()  # DSCPs that select it
    buffer: Amount = Amount(seconds=parse_time(DEFAULT_BUFFER))
    ecn: Ecn | None = None
    pfc: Pfc | None = None


@dataclass(frozen=True)
class PortClass:
    """One class as realized on one port, in bytes on this machine."""

    index: int  # 0 is served first
    name: str
    limit: int  # bytes it may hold before it drops; 0: no limit (a host's lossless class)
    ecn_mode: str | None = None
    k_low: int = 0
    k_high: int = 0
    probability: float = 1.0
    lossless: bool = False  # may be paused (every port of a lossless class)
    xoff: int = 0  # switch ports: pause the feeding links here; 0 = never
    xon: int = 0  # ... and release them at or below this
    headroom: int = 0  # what the feeding links may send during a pause


def headroom_bytes(feeding_rates_bps: list[float], mtu: int, scale: float) -> int:
    """What the links feeding a queue (real rates) can deliver while a pause
    takes effect: the reaction budget at each one's rate, plus two frames
    each (the frame on the wire and the one the pause lets by)."""
    return sum(int(PAUSE_REACTION_BUDGET * r / scale / 8) + 2 * frame_bytes(mtu) for r in feeding_rates_bps)


@dataclass(frozen=True)
class QueueProfile:
    classes: tuple  # QueueClass, highest priority first
    overrides: dict = field(default_factory=dict)  # port kind -> {class name: {buffer?, ecn?}}

    def dscp_classes(self) -> list[int]:
        """Class index of every DSCP value; DSCPs no class lists go to the
        last (lowest-priority) class."""
        out = [len(self.classes) - 1] * DSCP_VALUES
        for i, c in enumerate(self.classes):
            for d in c.dscp:
                out[d] = i
        return out

    def class_dscps(self) -> list[int | None]:
        """The DSCP that selects each class (the lowest such value), highest
        priority first: what a controller writes to put a flow in a class."""
        mapping = self.dscp_classes()
        return [mapping.index(i) if i in mapping else None for i in range(len(self.classes))]

    def class_of_dscp(self, dscp: int) -> str:
        return self.classes[self.dscp_classes()[dscp]].name

    def port_classes(
        self, port_kind: str, real_rate_bps: float, scale: float, headroom: int | None = None
    ) -> list[PortClass]:
        """[PortClass] of a port of this kind and real rate. `headroom`:
        bytes the links feeding it deliver during a pause (headroom_bytes),
        or None where nothing feeds it that could be paused (a host)."""
        out = []
        for i, c in enumerate(self.classes):
            over = self.overrides.get(port_kind, {}).get(c.name, {})
            buffer, ecn = over.get("buffer", c.buffer), over.get("ecn", c.ecn)
            limit = max(1, buffer.bytes_on(real_rate_bps, scale))
            fields: dict = {}
            if ecn is not None:
                fields.update(
                    ecn_mode=ecn.mode,
                    k_low=ecn.low.bytes_on(real_rate_bps, scale),
                    k_high=ecn.high.bytes_on(real_rate_bps, scale) if ecn.high else 0,
                    probability=ecn.probability,
                )
            if c.pfc is not None:
                fields["lossless"] = True
                if headroom is None:
                    # a host: its sockets fill and block while the class is
                    # paused, so its queue needs no limit of its own
                    limit = 0
                else:
                    # the buffer is the shared part, where XOFF sits; the
                    # headroom is reserved above it, as switches reserve it
                    xoff = c.pfc.xoff.bytes_on(real_rate_bps, scale) if c.pfc.xoff else limit
                    xon = c.pfc.xon.bytes_on(real_rate_bps, scale) if c.pfc.xon else xoff // 2
                    fields.update(xoff=xoff, xon=xon, headroom=headroom)
                    limit = xoff + headroom
            out.append(PortClass(i, c.name, limit, **fields))
        return out

    @property
    def lossless(self) -> bool:
        return any(c.pfc is not None for c in self.classes)

    # --- fabric.json ---------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "classes": [asdict(c) for c in self.classes],
            "overrides": {
                k: {n: {f: asdict(v) for f, v in o.items()} for n, o in by.items()}
                for k, by in self.overrides.items()
            },
        }

    @classmethod
    def from_dict(cls, d: dict) -> QueueProfile:
        def amount(a):
            return Amount(**a)

        def ecn(e):
            return (
                None
                if e is None
                else Ecn(
                    e["mode"], amount(e["low"]), amount(e["high"]) if e["high"] else None, e["probability"]
                )
            )

        def pfc(p):
            return None if p is None else Pfc(*(amount(p[k]) if p[k] else None for k in ("xoff", "xon")))

        classes = tuple(
            QueueClass(c["name"], tuple(c["dscp"]), amount(c["buffer"]), ecn(c["ecn"]), pfc(c.get("pfc")))
            for c in d["classes"]
        )
        overrides = {
            k: {n: {f: (amount(v) if f == "buffer" else ecn(v)) for f, v in o.items()} for n, o in by.items()}
            for k, by in d.get("overrides", {}).items()
        }
        return cls(classes, overrides)


def port_kind(fabric: Fabric, link: Link, end: Endpoint) -> str:
    """Which profile applies to the egress at `end` of `link`."""
    if link.kind == "dci" and fabric.nodes[end.node].is_switch:
        return INTERCONNECT_PORTS
    return _NODE_PORT_KIND[fabric.nodes[end.node].kind]


def feeding_links(fabric: Fabric, link: Link, end: Endpoint) -> list[Link] | None:
    """The other links of the switch at `end`: what may feed its egress
    toward `link`. None for a host port."""
    if not fabric.nodes[end.node].is_switch:
        return None
    return [l for l in fabric.links if l is not link and end.node in (l.a.node, l.b.node)]


def classes_at(fabric: Fabric, link: Link, end: Endpoint) -> list[PortClass]:
    """[PortClass] of the egress at `end` of `link` (fabric.queues set)."""
    profile = fabric.queues
    if profile is None:
        raise ValueError("classes_at needs a fabric with queues")
    feeding = feeding_links(fabric, link, end)
    headroom = None
    if feeding is not None and profile.lossless:
        headroom = headroom_bytes([l.rate_bps for l in feeding], fabric.mtu, fabric.scale)
    return profile.port_classes(port_kind(fabric, link, end), link.rate_bps, fabric.scale, headroom)


# --- from a scenario's `queues` mapping (already schema-checked) ---------------


def _ecn_entry(raw):
    if raw is None:
        return None
    if "k" in raw:
        return Ecn(ECN_STEP, Amount.parse(raw["k"]))
    return Ecn(
        ECN_RED,
        Amount.parse(raw["min"]),
        Amount.parse(raw["max"]),
        float(raw.get("probability", DEFAULT_RED_PROBABILITY)),
    )


def _pfc_entry(raw):
    if raw is None:
        return None
    return Pfc(*(Amount.parse(raw[k]) if k in raw else None for k in ("xoff", "xon")))


def _class_fields(raw):
    out = {}
    if "buffer" in raw:
        out["buffer"] = Amount.parse(raw["buffer"])
    if "ecn" in raw:
        out["ecn"] = _ecn_entry(raw["ecn"])
    return out


def profile_from(raw: dict) -> QueueProfile:
    """The QueueProfile of a `queues` mapping, or None for none."""
    if raw is None:
        return None
    classes = tuple(
        QueueClass(c["name"], tuple(c.get("dscp", ())), pfc=_pfc_entry(c.get("pfc")), **_class_fields(c))
        for c in raw["classes"]
    )
    overrides = {
        kind: {name: _class_fields(o) for name, o in by.items()}
        for kind, by in (raw.get("ports") or {}).items()
    }
    return QueueProfile(classes, overrides)
