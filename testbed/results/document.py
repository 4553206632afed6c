"""results.json's top level as a record: the fields a run writes, in the
order it writes them. `schemas/results.json` documents each key for the
people and tools that read the file; this record is the code's side of the
same contract, so a key cannot be added or dropped in one place only (a
unit test holds the two together)."""

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FabricSummary:
    kind: str
    datapath: str | None  # "kernel" or "user"
    hosts: int
    switches: int
    links: int
    bringup_s: float | None  # machine time from nothing to every switch holding its routes


@dataclass(frozen=True)
class Results:
    scenario: str
    description: str
    scenario_file: str
    started: str  # ISO 8601 with its time zone
    duration_s: float  # traffic time actually run (emulated)
    duration_planned_s: float
    time_dilation: float
    time_dilation_choice: dict
    passed: bool
    trustworthy: bool
    trust: dict
    fabric: FabricSummary
    expectations: list
    metrics: dict
    faults: list
    series: dict
    queues: dict | None
    pauses: list | None
    placement: dict | None
    problems: list

    def to_dict(self) -> dict:
        """The dict results.json holds (files and plot errors are added as
        the report is written)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["fabric"] = {f.name: getattr(self.fabric, f.name) for f in fields(self.fabric)}
        return out


def keys() -> list[str]:
    """The top-level keys every run writes, in order."""
    return [f.name for f in fields(Results)]
