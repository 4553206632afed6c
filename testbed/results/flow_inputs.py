"""What the runner hands the flow analysis (flows.py), as typed records:
the flows, the faults it applied, the sampled throughput series and the
links' fidelity. Each as_* function also accepts the plain dict form that
results.json holds, so a report can be redrawn from a saved run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

LINK_DOWN, LINK_UP = "link-down", "link-up"
LINK_DEGRADE, LINK_RESTORE = "link-degrade", "link-restore"


@dataclass
class Flow:
    id: str
    src: str | None
    dst: str | None


@dataclass
class Fault:
    at: float  # scheduled, seconds since traffic start
    applied_at: float | None  # measured; None if the runner recorded no time
    action: str  # LINK_DOWN, LINK_UP, LINK_DEGRADE or LINK_RESTORE
    link: tuple[str, str]
    index: int = 0  # which of several parallel links between the two
    rate: float | None = None  # a link-degrade's share of the link's rate

    @property
    def time(self) -> float:
        """When the fault really happened (scheduled time if not measured)."""
        return self.at if self.applied_at is None else self.applied_at

    @property
    def link_key(self) -> tuple:
        # A link is undirected: ["a", "b"] and ["b", "a"] are the same cable;
        # parallel cables between the same pair differ by their index.
        return tuple(sorted(self.link)) + ((self.index,) if self.index else ())


@dataclass
class Series:
    interval_s: float
    t: list[float]
    flows: dict[str, list[float | None]] = field(default_factory=dict)

    def values(self, flow_id: str) -> list:
        """The flow's samples, padded with None to the length of `t`."""
        return pad(self.flows.get(flow_id, []), len(self.t))


@dataclass
class LinkFidelity:
    configured_mbit: float
    achieved_mbit: float | None
    measured: float | None = None  # fidelity measured directly (counters.fidelity)
    details: dict = field(default_factory=dict)  # carried into the report as is

    @property
    def fidelity(self) -> float | None:
        if self.measured is not None:
            return self.measured
        if self.achieved_mbit is None or not self.configured_mbit:
            return None
        return self.achieved_mbit / self.configured_mbit


def as_series(obj: Series | dict) -> Series:
    """Accept a Series or its dict form ({interval_s, t, flows})."""
    if isinstance(obj, Series):
        return obj
    return Series(interval_s=float(obj["interval_s"]), t=list(obj["t"]), flows=dict(obj.get("flows", {})))


def as_flows(obj: list | dict | None) -> list[Flow]:
    """Accept a list of Flow / {id, src, dst} dicts, or {id: {src, dst}}."""
    if isinstance(obj, dict):
        return [Flow(fid, info.get("src"), info.get("dst")) for fid, info in obj.items()]
    return [f if isinstance(f, Flow) else Flow(f["id"], f.get("src"), f.get("dst")) for f in obj or []]


def as_faults(objs: Iterable[Fault | dict] | None) -> list[Fault]:
    """Accept Fault objects or the runner's dicts; order by real time."""
    faults = [
        f
        if isinstance(f, Fault)
        else Fault(
            at=float(f["at"]),
            applied_at=_opt_float(f.get("applied_at")),
            action=f["action"],
            link=tuple(f["link"]),
            index=int(f.get("index") or 0),
            rate=_opt_float(f.get("rate")),
        )
        for f in objs or []
    ]
    return sorted(faults, key=lambda f: f.time)


def as_link_fidelity(links: dict | None) -> dict:
    """Accept {name: LinkFidelity} or {name: {configured_mbit, achieved_mbit,
    fidelity?, ...}}; other keys ride along into the report."""
    out = {}
    for name, item in (links or {}).items():
        if not isinstance(item, LinkFidelity):
            rest = {
                k: v for k, v in item.items() if k not in ("configured_mbit", "achieved_mbit", "fidelity")
            }
            item = LinkFidelity(
                float(item["configured_mbit"]),
                _opt_float(item.get("achieved_mbit")),
                _opt_float(item.get("fidelity")),
                rest,
            )
        out[name] = item
    return out


def _opt_float(x):
    return None if x is None else float(x)


def pad(values: list, length: int) -> list:
    """`values` cut or padded with None to exactly `length` samples."""
    values = list(values)[:length]
    return values + [None] * (length - len(values))
