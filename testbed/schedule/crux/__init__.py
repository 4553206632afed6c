"""Crux communication scheduling for several training jobs sharing a fabric:
choose each flow's path, give each job a priority, and fold those priorities
into the few priority levels the switches have. This package's face is
`plan`, which runs the three steps and returns a Plan a controller can
install; the steps live in their own modules.

Pure: no I/O, no switches. The input is a list of jobs (their compute time per
iteration and their flows with candidate paths, model.py) and the bandwidth
of every link.

Why intensity: on a bottleneck link, the GPU time the cluster gets back is the
integral of the intensity of whichever job is transmitting, so the link should
serve the most intense jobs first. Scheduling that exactly is NP-complete; the
three steps below are the heuristics:

1. select_paths (paths.py): jobs in decreasing intensity take the least
   congested paths left by the jobs before them.
2. assign_priorities (priority.py): priority P_j = k_j * I_j, where k_j
   corrects intensity for how much a job actually suffers from waiting (a
   job whose traffic hides behind its own computation hardly suffers at
   all), measured with a model of one shared link (shared_link.py).
3. compress (compression.py): the total order of P is cut into K levels,
   losing as little contention weight as possible (DP over sampled
   topological orders).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from .compression import compress, contention_dag, priority_order, validate_levels
from .model import Bandwidth, Job, validate_jobs
from .paths import select_paths, selection_order
from .priority import assign_priorities, reference_job


@dataclass
class Plan:
    """Everything the three steps decided. Paths are lists of link ids."""

    selection_order: list = field(default_factory=list)  # order jobs chose paths
    paths: dict = field(default_factory=dict)  # job -> flow -> [links]
    intensities: dict = field(default_factory=dict)  # on the chosen paths
    reference: str | None = None  # job with k = 1
    factors: dict = field(default_factory=dict)  # k_j
    priorities: dict = field(default_factory=dict)  # P_j = k_j * I_j
    order: list = field(default_factory=list)  # by decreasing P
    edges: list = field(default_factory=list)  # Edge, contention DAG
    level_count: int = 1  # K, levels available
    levels: dict = field(default_factory=dict)  # job -> level, 0 highest
    cut: float = 0.0  # edge weight kept apart
    total_weight: float = 0.0  # all edge weight

    def as_dict(self) -> dict:
        """Plain JSON-ready form (strings, numbers, lists, dicts)."""
        return {
            "selection_order": list(self.selection_order),
            "paths": {
                job: {flow: list(path) for flow, path in flows.items()} for job, flows in self.paths.items()
            },
            "intensities": dict(self.intensities),
            "reference": self.reference,
            "factors": dict(self.factors),
            "priorities": dict(self.priorities),
            "order": list(self.order),
            "edges": [{"high": edge.high, "low": edge.low, "weight": edge.weight} for edge in self.edges],
            "level_count": self.level_count,
            "levels": dict(self.levels),
            "cut": self.cut,
            "total_weight": self.total_weight,
        }


def plan(jobs: Sequence[Job], bandwidth: Bandwidth, levels: int, samples: int = 10, seed: int = 0) -> Plan:
    """Run the three steps for `jobs` over links of `bandwidth` (bytes/s)
    with `levels` hardware priority levels; `seed` fixes the sampled
    topological orders."""
    validate_levels(levels)
    validate_jobs(jobs, bandwidth)
    jobs = list(jobs)
    if not jobs:
        return Plan(level_count=levels)
    paths = select_paths(jobs, bandwidth)
    priorities = assign_priorities(jobs, paths, bandwidth)
    intensities = {name: priority.intensity for name, priority in priorities.items()}
    values = {name: priority.value for name, priority in priorities.items()}
    edges = contention_dag(jobs, paths, values, intensities)
    order = priority_order(values)
    compression = compress(order, edges, levels, samples, random.Random(seed))
    return Plan(
        selection_order=[job.name for job in selection_order(jobs, bandwidth)],
        paths={job: {flow: list(path) for flow, path in chosen.items()} for job, chosen in paths.items()},
        intensities=intensities,
        reference=reference_job(jobs).name,
        factors={name: priority.factor for name, priority in priorities.items()},
        priorities=values,
        order=order,
        edges=edges,
        level_count=levels,
        levels=compression.levels,
        cut=compression.cut,
        total_weight=sum(edge.weight for edge in edges),
    )
