"""Priority queues of every emulated port (pure): the classes a scenario
declares, which DSCP selects which class, and what each class holds on a
given port, in bytes on this machine.

A scenario without `queues` keeps one FIFO per port (the model then carries
no profile). With it, every egress (host, ToR, aggregation, interconnect)
gets the same classes, served in strict priority (first class first); a
port kind may override a class's buffer and ECN.

Amounts are written either as sizes in real bytes (divided by the scale,
like every byte count of the fabric) or as times at the port's rate ('5ms':
what the port sends in 5 ms of emulated time). Time dilation changes
neither: a dilated port is N times slower and its queue lasts N times
longer, holding the same bytes.
"""
from dataclasses import dataclass, field, asdict

from .model import AGG, BORDER, CORE, HOST, TOR
from .units import parse_bytes, parse_time

MAX_CLASSES = 8
DSCP_VALUES = 64
HOST_PORTS, TOR_PORTS, AGG_PORTS, INTERCONNECT_PORTS = "host", "tor", "agg", "interconnect"
PORT_KINDS = (HOST_PORTS, TOR_PORTS, AGG_PORTS, INTERCONNECT_PORTS)
_NODE_PORT_KIND = {HOST: HOST_PORTS, TOR: TOR_PORTS, AGG: AGG_PORTS, CORE: AGG_PORTS,
                   BORDER: AGG_PORTS}
ECN_STEP, ECN_RED = "step", "red"
DEFAULT_BUFFER = "100ms"        # as the single FIFO of a port without classes
DEFAULT_RED_PROBABILITY = 0.1


def frame_bytes(mtu):
    return mtu + 14


@dataclass(frozen=True)
class Amount:
    """A size in real bytes or a time at the port's rate (one of the two)."""
    real_bytes: float | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, raw):
        text = str(raw).strip()
        if not isinstance(raw, str) or text.endswith("B"):
            return cls(real_bytes=parse_bytes(raw))
        return cls(seconds=parse_time(raw))

    def bytes_on(self, real_rate_bps, scale):
        """Bytes on this machine for a port of real rate `real_rate_bps`."""
        if self.seconds is not None:
            return int(self.seconds * real_rate_bps / scale / 8)
        return int(self.real_bytes / scale)

    def text(self):
        return f"{self.seconds * 1e3:g}ms" if self.seconds is not None else f"{self.real_bytes:g}B"


@dataclass(frozen=True)
class Ecn:
    mode: str                   # ECN_STEP: mark at or above k; ECN_RED: ramp min..max
    low: Amount                 # k, or the ramp's start
    high: Amount | None = None  # the ramp's end (red)
    probability: float = 1.0    # marking probability at `high` (red)


@dataclass(frozen=True)
class QueueClass:
    name: str
    dscp: tuple = ()                           # DSCPs that select it
    buffer: Amount = Amount(seconds=parse_time(DEFAULT_BUFFER))
    ecn: Ecn | None = None


@dataclass(frozen=True)
class PortClass:
    """One class as realized on one port, in bytes on this machine."""
    index: int                  # 0 is served first
    name: str
    limit: int                  # bytes it may hold before it drops
    ecn_mode: str | None = None
    k_low: int = 0
    k_high: int = 0
    probability: float = 1.0


@dataclass(frozen=True)
class QueueProfile:
    classes: tuple                             # QueueClass, highest priority first
    overrides: dict = field(default_factory=dict)   # port kind -> {class name: {buffer?, ecn?}}

    def dscp_classes(self):
        """Class index of every DSCP value; DSCPs no class lists go to the
        last (lowest-priority) class."""
        out = [len(self.classes) - 1] * DSCP_VALUES
        for i, c in enumerate(self.classes):
            for d in c.dscp:
                out[d] = i
        return out

    def class_of_dscp(self, dscp):
        return self.classes[self.dscp_classes()[dscp]].name

    def port_classes(self, port_kind, real_rate_bps, scale):
        """[PortClass] of a port of this kind and real rate."""
        out = []
        for i, c in enumerate(self.classes):
            over = self.overrides.get(port_kind, {}).get(c.name, {})
            buffer, ecn = over.get("buffer", c.buffer), over.get("ecn", c.ecn)
            pc = PortClass(i, c.name, max(1, buffer.bytes_on(real_rate_bps, scale)))
            if ecn is not None:
                high = ecn.high.bytes_on(real_rate_bps, scale) if ecn.high else 0
                pc = PortClass(i, c.name, pc.limit, ecn.mode, ecn.low.bytes_on(real_rate_bps, scale),
                               high, ecn.probability)
            out.append(pc)
        return out

    # --- fabric.json ---------------------------------------------------------
    def to_dict(self):
        return {"classes": [asdict(c) for c in self.classes],
                "overrides": {k: {n: {f: asdict(v) for f, v in o.items()} for n, o in by.items()}
                              for k, by in self.overrides.items()}}

    @classmethod
    def from_dict(cls, d):
        def amount(a):
            return Amount(**a)

        def ecn(e):
            return None if e is None else Ecn(e["mode"], amount(e["low"]),
                                              amount(e["high"]) if e["high"] else None,
                                              e["probability"])

        classes = tuple(QueueClass(c["name"], tuple(c["dscp"]), amount(c["buffer"]), ecn(c["ecn"]))
                        for c in d["classes"])
        overrides = {k: {n: {f: (amount(v) if f == "buffer" else ecn(v)) for f, v in o.items()}
                         for n, o in by.items()} for k, by in d.get("overrides", {}).items()}
        return cls(classes, overrides)


def port_kind(fabric, link, end):
    """Which profile applies to the egress at `end` of `link`."""
    if link.kind == "dci" and fabric.nodes[end.node].is_switch:
        return INTERCONNECT_PORTS
    return _NODE_PORT_KIND[fabric.nodes[end.node].kind]


def classes_at(fabric, link, end):
    """[PortClass] of the egress at `end` of `link` (fabric.queues set)."""
    return fabric.queues.port_classes(port_kind(fabric, link, end), link.rate_bps, fabric.scale)


# --- from a scenario's `queues` mapping (already schema-checked) ---------------

def _ecn_entry(raw):
    if raw is None:
        return None
    if "k" in raw:
        return Ecn(ECN_STEP, Amount.parse(raw["k"]))
    return Ecn(ECN_RED, Amount.parse(raw["min"]), Amount.parse(raw["max"]),
               float(raw.get("probability", DEFAULT_RED_PROBABILITY)))


def _class_fields(raw):
    out = {}
    if "buffer" in raw:
        out["buffer"] = Amount.parse(raw["buffer"])
    if "ecn" in raw:
        out["ecn"] = _ecn_entry(raw["ecn"])
    return out


def profile_from(raw):
    """The QueueProfile of a `queues` mapping, or None for none."""
    if raw is None:
        return None
    classes = tuple(QueueClass(c["name"], tuple(c.get("dscp", ())), **_class_fields(c))
                    for c in raw["classes"])
    overrides = {kind: {name: _class_fields(o) for name, o in by.items()}
                 for kind, by in (raw.get("ports") or {}).items()}
    return QueueProfile(classes, overrides)
