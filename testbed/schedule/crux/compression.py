"""Crux's step 3, priority compression: the total order of priorities is
folded into the K levels the switches have, losing as little contention
weight as possible. The jobs whose chosen paths share a link form a
contention DAG (higher priority -> lower, weighted by the higher job's
intensity); a cut of a topological order into K consecutive blocks keeps
the weight of the edges it separates, and the best cut of each of a few
sampled orders is found by dynamic programming (exact optimization is
NP-complete). An exhaustive search gives the true optimum on small
instances to check it against.

Apart because it is graph work on names and weights: after the DAG is
built it knows nothing of flows, links or bandwidth.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .model import Job, Path

# Exhaustive compression refuses instances with more assignments than this.
_MAX_EXHAUSTIVE_ASSIGNMENTS = 5_000_000


class Edge(NamedTuple):
    """Contention between two jobs on a shared link: `high` has the higher
    priority; `weight` (high's intensity) is lost if both share one level."""

    high: str
    low: str
    weight: float


class Compression(NamedTuple):
    """Level of each job (0 = highest priority) and the weight of the
    contention edges whose ends sit on different levels."""

    levels: dict
    cut: float


def validate_levels(levels: int) -> None:
    """The number of hardware priority levels is a whole number, at least 1."""
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
        raise ValueError(f"levels must be an integer >= 1 (hardware priority queues), got {levels!r}")


def priority_order(priorities: dict[str, float]) -> list[str]:
    """Job names by decreasing priority value, ties by name."""
    return sorted(priorities, key=lambda name: (-priorities[name], name))


def links_of(chosen_for_job: dict[str, Path]) -> set[str]:
    """Links used by a job's chosen paths ({flow name: path})."""
    return {link for path in chosen_for_job.values() for link in path}


def contention_dag(
    jobs: Sequence[Job], chosen: dict, priorities: dict[str, float], intensities: dict[str, float]
) -> list[Edge]:
    """Edges high -> low between every two jobs whose chosen paths share a
    link, from the higher priority to the lower (`priorities` is
    {job name: P}), weighted by the higher job's intensity."""
    names = [job.name for job in jobs]
    links = {name: links_of(chosen[name]) for name in names}
    order = priority_order({name: priorities[name] for name in names})
    edges = []
    for rank, high in enumerate(order):
        for low in order[rank + 1 :]:
            if links[high] & links[low]:
                edges.append(Edge(high, low, intensities[high]))
    return edges


def cut_value(edges: Sequence[Edge], levels: dict[str, int]) -> float:
    """Weight of the edges whose two jobs are on different levels."""
    return sum(weight for high, low, weight in edges if levels[high] != levels[low])


def respects_order(edges: Sequence[Edge], levels: dict[str, int]) -> bool:
    """No edge goes from a lower-priority level up to a higher one."""
    return all(levels[high] <= levels[low] for high, low, _ in edges)


def _validate_edges(jobs: Sequence[str], edges: Sequence[Edge]) -> None:
    known = set(jobs)
    for high, low, weight in edges:
        for name in (high, low):
            if name not in known:
                raise ValueError(f"edge {high!r} -> {low!r} names job {name!r}, which is not among the jobs")
        if high == low:
            raise ValueError(f"edge {high!r} -> {low!r} joins a job to itself; expected two different jobs")
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"edge {high!r} -> {low!r}: weight must be a finite number >= 0, got {weight!r}")


def random_topological_order(jobs: Sequence[str], edges: Sequence[Edge], rng: random.Random) -> list[str]:
    """An order of `jobs` with every edge's high before its low, drawn by
    repeatedly taking a random job among those with no unplaced
    predecessor."""
    successors: dict = {job: [] for job in jobs}
    waiting_on = {job: 0 for job in jobs}
    for high, low, _ in edges:
        successors[high].append(low)
        waiting_on[low] += 1
    ready = [job for job in jobs if waiting_on[job] == 0]
    order = []
    while ready:
        job = ready.pop(rng.randrange(len(ready)))
        order.append(job)
        for successor in successors[job]:
            waiting_on[successor] -= 1
            if waiting_on[successor] == 0:
                ready.append(successor)
    if len(order) < len(jobs):
        stuck = sorted(job for job in jobs if waiting_on[job] > 0)
        raise ValueError(f"edges form a cycle through jobs {stuck!r}; expected a DAG")
    return order


def _forward_weights(order: Sequence[str], edges: Sequence[Edge]) -> list[list[float]]:
    """weight[p][q]: edge weight from the job at position p to the one at q."""
    position = {job: index for index, job in enumerate(order)}
    weight = [[0.0] * len(order) for _ in order]
    for high, low, edge_weight in edges:
        if position[high] >= position[low]:
            raise ValueError(f"order puts {low!r} before {high!r}, against edge {high!r} -> {low!r}")
        weight[position[high]][position[low]] += edge_weight
    return weight


def _crossing_weights(weight: list[list[float]]) -> list[list[float]]:
    """C[j][i] for 0 <= j <= i <= n: weight of the edges from the first j jobs
    of the order into jobs j+1..i, i.e. what a block (j, i] cuts off from
    everything before it."""
    n = len(weight)
    # entering[q][j]: weight into job q from the first j jobs.
    entering = [[0.0] * (n + 1) for _ in range(n)]
    for q in range(n):
        for j in range(n):
            entering[q][j + 1] = entering[q][j] + weight[j][q]
    crossing = [[0.0] * (n + 1) for _ in range(n + 1)]
    for j in range(n + 1):
        for i in range(j + 1, n + 1):
            crossing[j][i] = crossing[j][i - 1] + entering[i - 1][j]
    return crossing


def _best_block_ends(crossing: list[list[float]], n: int, levels: int) -> list[int]:
    """Ends of at most `levels` consecutive blocks covering positions 0..n,
    maximizing the cut: f(i, k) = max over j <= i of f(j, k-1) + C(j, i).
    Allowing j = i (an empty block) lets a split use fewer levels."""
    best = [[-math.inf] * (n + 1) for _ in range(levels + 1)]
    start_of_last = [[0] * (n + 1) for _ in range(levels + 1)]
    best[0][0] = 0.0
    for k in range(1, levels + 1):
        for i in range(n + 1):
            for j in range(i + 1):
                value = best[k - 1][j] + crossing[j][i]
                if value > best[k][i]:
                    best[k][i] = value
                    start_of_last[k][i] = j
    ends = []
    end = n
    for k in range(levels, 0, -1):
        ends.append(end)
        end = start_of_last[k][end]
    return sorted(set(ends))


def _levels_from_ends(order: Sequence[str], ends: Sequence[int]) -> dict[str, int]:
    """Level of each job when `order` is cut before each position in `ends`."""
    levels = {}
    start = 0
    for level, end in enumerate(end for end in ends if end > 0):
        for job in order[start:end]:
            levels[job] = level
        start = end
    return levels


def split_order(order: Sequence[str], edges: Sequence[Edge], levels: int) -> Compression:
    """The best cut of the topological order `order` into at most `levels`
    consecutive blocks (levels numbered from 0 without gaps)."""
    validate_levels(levels)
    _validate_edges(order, edges)
    crossing = _crossing_weights(_forward_weights(order, edges))
    assignment = _levels_from_ends(order, _best_block_ends(crossing, len(order), levels))
    return Compression(assignment, cut_value(edges, assignment))


def compress(
    jobs: Iterable[str],
    edges: Sequence[Edge],
    levels: int,
    samples: int = 10,
    rng: random.Random | None = None,
) -> Compression:
    """Fold the priority order into `levels` hardware levels: split each of
    `samples` random topological orders of the contention DAG optimally into
    consecutive blocks and keep the best cut. `jobs` lists every job (also
    those without edges); `rng` is a random.Random (seeded 0 when None)."""
    validate_levels(levels)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    jobs = list(jobs)
    _validate_edges(jobs, edges)
    rng = random.Random(0) if rng is None else rng
    best = split_order(random_topological_order(jobs, edges, rng), edges, levels)
    for _ in range(samples - 1):
        candidate = split_order(random_topological_order(jobs, edges, rng), edges, levels)
        if candidate.cut > best.cut:
            best = candidate
    return best


def exhaustive_compression(jobs: Sequence[str], edges: Sequence[Edge], levels: int) -> Compression:
    """The true optimum over every order-respecting level assignment, by
    enumeration (small instances only). More levels than jobs are never
    needed, so at most len(jobs) levels are tried."""
    validate_levels(levels)
    jobs = list(jobs)
    _validate_edges(jobs, edges)
    usable = min(levels, len(jobs)) or 1
    if usable ** len(jobs) > _MAX_EXHAUSTIVE_ASSIGNMENTS:
        raise ValueError(
            f"exhaustive_compression: {len(jobs)} jobs on {usable} levels is "
            f"too many assignments to enumerate (at most "
            f"{_MAX_EXHAUSTIVE_ASSIGNMENTS})"
        )
    best = Compression({job: 0 for job in jobs}, 0.0)
    for choice in itertools.product(range(usable), repeat=len(jobs)):
        assignment = dict(zip(jobs, choice))
        if not respects_order(edges, assignment):
            continue
        value = cut_value(edges, assignment)
        if value > best.cut:
            best = Compression(_without_gaps(assignment), value)
    return best


def _without_gaps(assignment: dict[str, int]) -> dict[str, int]:
    """The same assignment with levels renumbered 0, 1, ... in order."""
    rank = {level: index for index, level in enumerate(sorted(set(assignment.values())))}
    return {job: rank[level] for job, level in assignment.items()}
