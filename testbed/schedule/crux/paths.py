"""Crux's step 1, path selection: jobs in decreasing GPU intensity take
the least congested candidate paths left by the jobs before them, so the
most intense jobs get the emptiest links.

Apart because it is the one step the controller also runs on its own:
`precise` path placement is exactly this rule, with or without priorities.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import (
    Bandwidth,
    Job,
    Path,
    add_flow,
    chosen_placements,
    intensity,
    validate_jobs,
)


def congestion(path: Path, flow_bytes: float, load: dict[str, float], bandwidth: Bandwidth) -> tuple:
    """How crowded `path` would be with `flow_bytes` more on it, as a sort key:
    the worst link's time to drain its bytes first, then the sum over the
    path's links, so that among equally bad bottlenecks the shorter or
    emptier path wins."""
    drain = [(load.get(link, 0.0) + flow_bytes) / bandwidth[link] for link in path]
    return (max(drain), sum(drain))


def place_job(
    job: Job, load: dict[str, float], bandwidth: Bandwidth, keep: dict[str, Path] | None = None
) -> dict[str, Path]:
    """{flow name: path} for `job` on a network already carrying `load`.

    Larger flows choose first, and each counts the job's own flows placed
    before it, so a job spreads over parallel paths rather than stacking its
    flows on one. Equal candidates go to the one listed first. A flow whose
    path in `keep` ({flow name: path}) is still a candidate keeps it, and
    the others choose around it. `load` is not changed."""
    load = dict(load)
    chosen = {}
    for flow in job.flows:
        path = tuple((keep or {}).get(flow.name, ()))
        if path in flow.paths:
            add_flow(load, flow.bytes, path)
            chosen[flow.name] = path
    for flow in sorted(job.flows, key=lambda f: (-f.bytes, f.name)):
        if flow.name in chosen:
            continue
        path = min(flow.paths, key=lambda p: congestion(p, flow.bytes, load, bandwidth))
        add_flow(load, flow.bytes, path)
        chosen[flow.name] = path
    return chosen


def isolated_intensity(job: Job, bandwidth: Bandwidth) -> float:
    """The job's intensity with its flows placed as above on an otherwise
    empty network: the neutral value that ranks jobs before any path is
    chosen (unlike each flow's first candidate, it does not depend on the
    order the candidates happen to be listed in)."""
    return intensity(job, place_job(job, {}, bandwidth), bandwidth)


def selection_order(jobs: Sequence[Job], bandwidth: Bandwidth) -> list[Job]:
    """Jobs in the order they choose paths: decreasing isolated intensity,
    then by name."""
    return sorted(jobs, key=lambda job: (-isolated_intensity(job, bandwidth), job.name))


def select_paths(
    jobs: Sequence[Job], bandwidth: Bandwidth, keep: dict | None = None, first: Sequence[Job] = ()
) -> dict:
    """{job name: {flow name: path}}: jobs in decreasing intensity each take
    the least congested candidates given the traffic of the jobs before them,
    so intense jobs get the emptiest paths. `keep` ({job name: {flow name:
    path}}, an earlier selection) holds every flow whose path still exists
    where it was: only the others move. `first`: jobs placed before all the
    others, whatever their intensity (paths written by hand: the others
    choose around them)."""
    validate_jobs([*first, *jobs], bandwidth)
    load: dict = {}
    paths = {}
    for job in [*first, *selection_order(jobs, bandwidth)]:
        chosen = place_job(job, load, bandwidth, (keep or {}).get(job.name))
        for flow, path in chosen_placements(job, chosen):
            add_flow(load, flow.bytes, path)
        paths[job.name] = chosen
    return paths
