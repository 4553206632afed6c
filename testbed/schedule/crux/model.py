"""Crux's inputs and what they cost the links: the Flow and Job records,
the checks that refuse bad ones in one line, and a job's load, communication
time and GPU intensity once its flows have paths.

Apart from the three steps because all of them read it: path selection
ranks jobs by intensity, priority assignment turns communication time into
a periodic job, and the plan validates the same inputs first.

Units: flow sizes are bytes per training iteration, bandwidths are bytes per
second and compute times seconds per iteration, so communication times are in
seconds and GPU intensity (compute seconds / communication seconds) has no
unit. Bits and bits per second give the same intensities; only the two must
agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Path = tuple  # a path: the ids of the links it crosses, in order
Bandwidth = dict  # {link id: bytes per second}


# --- inputs ------------------------------------------------------------------
@dataclass(frozen=True)
class Flow:
    """One flow of a job: the bytes it carries per iteration and the paths it
    may take, each a tuple of link ids (one of them will be chosen)."""

    name: str
    bytes: float
    paths: tuple

    def __post_init__(self) -> None:
        # Lists parsed from JSON or YAML are welcome; tuples keep Flow hashable.
        object.__setattr__(self, "paths", tuple(tuple(path) for path in self.paths))


@dataclass(frozen=True)
class Job:
    """A training job: seconds of GPU computation per iteration (W_j), its
    flows, and the share of its communication (0..1) that can run while it
    computes instead of after."""

    name: str
    compute_s: float
    flows: tuple
    overlap: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "flows", tuple(self.flows))

    @property
    def total_bytes(self) -> float:
        """Bytes the job sends per iteration, over all its flows."""
        return sum(flow.bytes for flow in self.flows)


# --- validation --------------------------------------------------------------
def is_positive_number(value: object) -> bool:
    """A finite int or float above zero (a bool is not a number here)."""
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def _is_nonempty_name(value: object) -> bool:
    return isinstance(value, str) and value != ""


def validate_bandwidth(bandwidth: Bandwidth) -> None:
    """Every link rate must be a positive finite number of bytes/s."""
    for link, rate in bandwidth.items():
        if not is_positive_number(rate):
            raise ValueError(f"link {link!r}: bandwidth must be a positive number of bytes/s, got {rate!r}")


def validate_path(job: Job, flow: Flow, path: Path, bandwidth: Bandwidth) -> None:
    """A path is a non-empty, loop-free sequence of links that all have a bandwidth."""
    where = f"job {job.name!r} flow {flow.name!r}"
    if not path:
        raise ValueError(f"{where}: a path must name at least one link, got an empty path")
    if len(set(path)) != len(path):
        raise ValueError(f"{where}: path {list(path)!r} uses a link twice; expected a loop-free path")
    for link in path:
        if link not in bandwidth:
            raise ValueError(f"{where}: path {list(path)!r} uses link {link!r}, which has no bandwidth")


def validate_flow(job: Job, flow: Flow, bandwidth: Bandwidth) -> None:
    """A flow has a name, a positive size and at least one usable path."""
    if not _is_nonempty_name(flow.name):
        raise ValueError(f"job {job.name!r}: a flow name must be a non-empty string, got {flow.name!r}")
    where = f"job {job.name!r} flow {flow.name!r}"
    if not is_positive_number(flow.bytes):
        raise ValueError(
            f"{where}: bytes must be a positive number of bytes per iteration, got {flow.bytes!r}"
        )
    if not flow.paths:
        raise ValueError(f"{where}: expected at least one candidate path, got none")
    for path in flow.paths:
        validate_path(job, flow, path, bandwidth)


def validate_job(job: Job, bandwidth: Bandwidth) -> None:
    """A job has a name, positive compute, an overlap in 0..1 and valid flows
    with distinct names."""
    if not _is_nonempty_name(job.name):
        raise ValueError(f"a job name must be a non-empty string, got {job.name!r}")
    if not is_positive_number(job.compute_s):
        raise ValueError(
            f"job {job.name!r}: compute_s must be a positive number of seconds, got {job.compute_s!r}"
        )
    if not (
        isinstance(job.overlap, (int, float))
        and not isinstance(job.overlap, bool)
        and 0.0 <= job.overlap <= 1.0
    ):
        raise ValueError(f"job {job.name!r}: overlap must be a share between 0 and 1, got {job.overlap!r}")
    if not job.flows:
        raise ValueError(f"job {job.name!r}: expected at least one flow, got none")
    names = [flow.name for flow in job.flows]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(
                f"job {job.name!r}: flow name {name!r} is used twice; expected distinct flow names"
            )
    for flow in job.flows:
        validate_flow(job, flow, bandwidth)


def validate_jobs(jobs: Sequence[Job], bandwidth: Bandwidth) -> None:
    """All jobs valid, with distinct names, over valid link rates."""
    validate_bandwidth(bandwidth)
    names = [job.name for job in jobs]
    for job in jobs:
        validate_job(job, bandwidth)
        if names.count(job.name) > 1:
            raise ValueError(f"job name {job.name!r} is used twice; expected distinct job names")


# --- communication time and intensity ----------------------------------------
def link_bytes(placements: Iterable[tuple[Flow, Path]]) -> dict[str, float]:
    """Bytes per iteration on each link when every (flow, path) pair of
    `placements` sends the flow's bytes along its path."""
    load: dict = {}
    for flow, path in placements:
        add_flow(load, flow.bytes, path)
    return load


def add_flow(load: dict[str, float], flow_bytes: float, path: Path) -> None:
    """Put `flow_bytes` more on every link of `path` in the load map `load`."""
    for link in path:
        load[link] = load.get(link, 0.0) + flow_bytes


def chosen_placements(job: Job, chosen: dict[str, Path]) -> list[tuple[Flow, Path]]:
    """(flow, path) pairs of `job` under `chosen` ({flow name: path})."""
    placements = []
    for flow in job.flows:
        if flow.name not in chosen:
            raise ValueError(
                f"job {job.name!r} flow {flow.name!r}: no path chosen; expected one path per flow"
            )
        placements.append((flow, tuple(chosen[flow.name])))
    return placements


def communication_time(job: Job, chosen: dict[str, Path], bandwidth: Bandwidth) -> float:
    """t_j: seconds the job's own traffic keeps its busiest link busy per
    iteration, max over links e of M_{j,e} / B_e, with its flows on `chosen`."""
    load = link_bytes(chosen_placements(job, chosen))
    for link in load:
        if link not in bandwidth:
            raise ValueError(f"job {job.name!r}: chosen path uses link {link!r}, which has no bandwidth")
    return max(sent / bandwidth[link] for link, sent in load.items())


def intensity(job: Job, chosen: dict[str, Path], bandwidth: Bandwidth) -> float:
    """GPU intensity I_j = W_j / t_j of `job` with its flows on `chosen`
    ({flow name: path}): computation per second of communication."""
    return job.compute_s / communication_time(job, chosen, bandwidth)
