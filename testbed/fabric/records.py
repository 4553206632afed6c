"""The parts of a scenario as typed records, with their defaults in one
place: built once by the loader (scenario.py) from a checked file, and
taken as they are by every later stage (the announcement, the agents'
plans, the capacity plan, the analysis)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .units import parse_bytes, parse_time


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
    paths: str = "ecmp"  # "ecmp" | "precise"
    priority: str = "fixed"  # "fixed" | "crux"

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
