"""The parts of a scenario as typed records, with their defaults in one
place: built once by the loader (scenario.py) from a checked file, and
taken as they are by every later stage (the announcement, the agents'
plans, the capacity plan, the analysis)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .units import parse_bound, parse_bytes, parse_time
from .vocabulary import time_unit


@dataclass(frozen=True)
class Job:
    """A training job: `hosts` run its ranks in order (rank i on hosts[i]);
    `bytes` is the per-rank message size after scaling, `bytes_real` as
    written; `groups` (hierarchical collectives) lists host names."""

    name: str
    hosts: tuple[str, ...]
    collective: str
    bytes: int
    bytes_real: float
    groups: tuple[tuple[str, ...], ...] | None = None
    compute_s: float = 0.0
    overlap: float = 0.0
    iterations: int = 5
    dscp: int = 26
    port: int | None = None  # the NIC port (plane) every connection takes; None: spread
    microbatches: int = 1
    start: float = 0.0
    paths: str = "ecmp"  # "ecmp" | "precise" | "via"
    priority: str = "fixed"  # "fixed" | "crux"
    # paths: via: (("SRC>DST" or "SRC", (switch, ...)), ...) in the file's order
    via: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_entry(cls, raw: dict[str, Any], scale: float, groups: list | None) -> Job:
        """The job a checked file's entry describes; `groups` resolved to host
        names by the caller (it needs the fabric), bytes divided by `scale`
        (times stay real, so compute/communication ratios hold)."""
        real = parse_bytes(raw["bytes"])
        fields = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        given = {
            k: raw[k] for k in ("iterations", "dscp", "port", "microbatches", "paths", "priority") if k in raw
        }
        return cls(
            name=raw["name"],
            hosts=tuple(raw["hosts"]),
            collective=raw["collective"],
            bytes=int(round(real / scale)),
            bytes_real=real,
            groups=None if groups is None else tuple(tuple(g) for g in groups),
            compute_s=parse_time(raw.get("compute", fields["compute_s"])),
            overlap=float(raw.get("overlap", fields["overlap"])),
            start=parse_time(raw.get("start", fields["start"])),
            via=tuple(
                (str(key), (to,) if isinstance(to, str) else tuple(to))
                for key, to in (raw.get("via") or {}).items()
            ),
            **given,
        )

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    @property
    def rank_groups(self) -> list[list[int]] | None:
        """`groups` as rank numbers, the form schedules take."""
        if self.groups is None:
            return None
        index = {h: i for i, h in enumerate(self.hosts)}
        return [[index[h] for h in g] for g in self.groups]

    def dilated(self, n: float) -> Job:
        """The same job on a machine running n times slower: compute and start stretched."""
        return dataclasses.replace(self, compute_s=self.compute_s * n, start=self.start * n)


@dataclass(frozen=True)
class Fault:
    """A cable pulled (link-down) or replugged (link-up), or a link's rate
    cut to a share of it (link-degrade, `rate`) or given back
    (link-restore), at `at` seconds: the `index`-th link between the two
    nodes of `link`."""

    at: float
    action: str
    link: tuple[str, str]
    index: int = 0
    name: str | None = None  # faults that share a name are judged together (probes)
    # the entry of the file's `faults` this one comes from (a switch-down or
    # a link-flap entry makes several), so that problems name that entry
    source: int | None = dataclasses.field(default=None, compare=False)
    rate: float | None = None  # a link-degrade's share of the link's rate (0..1)

    @classmethod
    def from_entry(cls, raw: dict[str, Any], source: int | None = None) -> Fault:
        a, b = raw["link"]
        at, index, name = parse_time(raw["at"]), raw.get("index", 0), raw.get("name") or None
        rate = parse_bound(raw["rate"]) if "rate" in raw else None
        return cls(at, raw["action"], (a, b), index, name, source, rate)

    @classmethod
    def flap(cls, raw: dict[str, Any], source: int | None = None) -> list[Fault]:
        """A link-flap entry: the link down at `at`, up `every` later, down
        again, `times` times over."""
        a, b = raw["link"]
        at, every = parse_time(raw["at"]), parse_time(raw["every"])
        return [
            cls(
                at + (2 * k + up) * every,
                "link-up" if up else "link-down",
                (a, b),
                raw.get("index", 0),
                None,
                source,
            )
            for k in range(raw["times"])
            for up in (0, 1)
        ]

    def dilated(self, n: float) -> Fault:
        return dataclasses.replace(self, at=self.at * n)


@dataclass(frozen=True)
class TrafficFlow:
    """Bulk traffic from `src` to every host of `dst`, from `start` seconds
    to the end of the run."""

    src: str
    dst: tuple[str, ...]
    kind: str = "iperf3"
    parallel: int = 1  # streams per destination and rail
    start: float = 0.0
    dscp: int = 0
    rails: tuple[int, ...] | None = (0,)  # the NICs (rails) that send; None: every rail

    @classmethod
    def from_entry(cls, raw: dict[str, Any]) -> TrafficFlow:
        dst, rails = raw["dst"], raw.get("rails", [0])
        return cls(
            src=raw["src"],
            dst=tuple(dst) if isinstance(dst, list) else (dst,),
            kind=raw.get("kind", "iperf3"),
            parallel=raw.get("parallel", 1),
            start=parse_time(raw.get("start", 0)),
            dscp=raw.get("dscp", 0),
            rails=None if rails == "all" else tuple(rails),
        )

    def rails_of(self, nic_count: int) -> tuple[int, ...]:
        """The rails that send, for a source host with `nic_count` NICs."""
        return tuple(range(nic_count)) if self.rails is None else self.rails

    def dilated(self, n: float) -> TrafficFlow:
        return dataclasses.replace(self, start=self.start * n)


@dataclass(frozen=True)
class Expectation:
    """A bound on one measured metric, of a host, a job, a queue class or a
    named fault (or the whole run); inclusive, either side optional."""

    metric: str
    name: str = ""
    host: str | None = None
    job: str | None = None
    relative_to: str | None = None  # a job whose same metric divides this one's
    queue_class: str | None = None  # `class` in the file
    fault: str | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def from_entry(cls, raw: dict[str, Any]) -> Expectation:
        e = cls(
            metric=raw["metric"],
            name=raw.get("name") or "",
            host=raw.get("host"),
            job=raw.get("job"),
            relative_to=raw.get("relative_to"),
            queue_class=raw.get("class"),
            fault=raw.get("fault"),
            min=_bound(raw, "min"),
            max=_bound(raw, "max"),
        )
        return e if e.name else dataclasses.replace(e, name=e.default_name())

    def default_name(self) -> str:
        """A readable name: 'fault_throughput_ratio of s0h0 >= 0.45'."""
        who = self.host or self.job or self.queue_class or self.fault
        text = self.metric + (f" of {who}" if who else "")
        if self.relative_to:
            text += f" / that of {self.relative_to}"
        low, high = self.min, self.max
        if low is not None and high is not None:
            return f"{text} in [{low:g}, {high:g}]"
        return f"{text} >= {low:g}" if low is not None else f"{text} <= {high:g}"


def _bound(raw: dict[str, Any], side: str) -> float | None:
    """An expectation's `min` or `max` in its metric's unit ('45%' is 0.45,
    '2s' of a metric in ms is 2000); None when not written."""
    value = raw.get(side)
    return None if value is None else parse_bound(value, time_unit(raw["metric"]) or "")


@dataclass(frozen=True)
class CruxRunning:
    """Crux as it runs (the scenario's `crux:`): each job profiled alone at
    the top class for `window_s`, a job silent for `idle_s` has stopped,
    counters read every `poll_s`."""

    window_s: float = 3.0
    idle_s: float = 1.0
    poll_s: float = 0.1

    @classmethod
    def from_entry(cls, raw: dict[str, Any]) -> CruxRunning:
        d = cls()
        return cls(
            window_s=parse_time(raw.get("window", d.window_s)),
            idle_s=parse_time(raw.get("idle", d.idle_s)),
            poll_s=parse_time(raw.get("poll", d.poll_s)),
        )

    def dilated(self, n: float) -> CruxRunning:
        return CruxRunning(self.window_s * n, self.idle_s * n, self.poll_s * n)

    def announced(self) -> dict:
        """What the controller is told (controllers/core.py)."""
        return {"window_s": self.window_s, "idle_s": self.idle_s, "poll_s": self.poll_s}
