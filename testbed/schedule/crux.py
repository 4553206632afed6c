"""Crux communication scheduling for several training jobs sharing a fabric:
choose each flow's path, give each job a priority, and fold those priorities
into the few priority levels the switches have.

Pure: no I/O, no switches. The input is a list of jobs (their compute time per
iteration and their flows with candidate paths) and the bandwidth of every
link; the output is a Plan that a controller can install.

Units: flow sizes are bytes per training iteration, bandwidths are bytes per
second and compute times seconds per iteration, so communication times are in
seconds and GPU intensity (compute seconds / communication seconds) has no
unit. Bits and bits per second give the same intensities; only the two must
agree.

Why intensity: on a bottleneck link, the GPU time the cluster gets back is the
integral of the intensity of whichever job is transmitting, so the link should
serve the most intense jobs first. Scheduling that exactly is NP-complete; the
three steps below are the heuristics:

1. select_paths: jobs in decreasing intensity take the least congested paths
   left by the jobs before them.
2. assign_priorities: priority P_j = k_j * I_j, where k_j corrects intensity
   for how much a job actually suffers from waiting (a job whose traffic hides
   behind its own computation hardly suffers at all).
3. compress: the total order of P is cut into K levels, losing as little
   contention weight as possible (DP over sampled topological orders).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

Path = tuple  # a path: the ids of the links it crosses, in order
Bandwidth = dict  # {link id: bytes per second}

# Bounds on the correction factor k: a job that never suffers from waiting
# keeps a sliver of its intensity so that such jobs still order among
# themselves, and one that suffers while the reference never does still gets a
# finite priority.
FACTOR_FLOOR = 0.01
FACTOR_CEILING = 100.0

# Losses of utilization below this are simulation noise, not a preference.
_NEGLIGIBLE_LOSS = 1e-9

# The two-job simulation stops looking for its steady-state cycle after this
# many iterations of the prioritized job and then averages its second half.
_MAX_SIMULATED_ITERATIONS = 4000

# Exhaustive compression refuses instances with more assignments than this.
_MAX_EXHAUSTIVE_ASSIGNMENTS = 5_000_000


# --- inputs ------------------------------------------------------------------
@dataclass(frozen=True)
class Flow:
    """One flow of a job: the bytes it carries per iteration and the paths it
    may take, each a tuple of link ids (one of them will be chosen)."""

    name: str
    bytes: float
    paths: tuple

    def __post_init__(self):
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

    def __post_init__(self):
        object.__setattr__(self, "flows", tuple(self.flows))

    @property
    def total_bytes(self) -> float:
        """Bytes the job sends per iteration, over all its flows."""
        return sum(flow.bytes for flow in self.flows)


# --- validation --------------------------------------------------------------
def _is_positive_number(value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def _is_nonempty_name(value) -> bool:
    return isinstance(value, str) and value != ""


def validate_bandwidth(bandwidth: Bandwidth) -> None:
    """Every link rate must be a positive finite number of bytes/s."""
    for link, rate in bandwidth.items():
        if not _is_positive_number(rate):
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
    if not _is_positive_number(flow.bytes):
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
    if not _is_positive_number(job.compute_s):
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


def validate_levels(levels: int) -> None:
    """The number of hardware priority levels is a whole number, at least 1."""
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
        raise ValueError(f"levels must be an integer >= 1 (hardware priority queues), got {levels!r}")


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


# --- step 1: path selection --------------------------------------------------
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


def select_paths(jobs: Sequence[Job], bandwidth: Bandwidth, keep: dict | None = None) -> dict:
    """{job name: {flow name: path}}: jobs in decreasing intensity each take
    the least congested candidates given the traffic of the jobs before them,
    so intense jobs get the emptiest paths. `keep` ({job name: {flow name:
    path}}, an earlier selection) holds every flow whose path still exists
    where it was: only the others move."""
    validate_jobs(jobs, bandwidth)
    load: dict = {}
    paths = {}
    for job in selection_order(jobs, bandwidth):
        chosen = place_job(job, load, bandwidth, (keep or {}).get(job.name))
        for flow, path in chosen_placements(job, chosen):
            add_flow(load, flow.bytes, path)
        paths[job.name] = chosen
    return paths


# --- step 2: priority assignment ---------------------------------------------
@dataclass(frozen=True)
class Periodic:
    """A job as one contended link sees it. Each iteration computes for
    compute_s seconds and needs comm_s seconds of the link; the `overlap`
    share of that traffic is ready when the computation starts (so it can hide
    behind it), the rest only when the computation ends. The next iteration
    starts when the computation and all the traffic are done."""

    compute_s: float
    comm_s: float
    overlap: float = 0.0

    @property
    def intensity(self) -> float:
        return self.compute_s / self.comm_s

    def alone_iteration_s(self) -> float:
        """Iteration time with the link to itself: the computation plus the
        traffic that must wait for it, unless the traffic alone takes longer."""
        return max(self.compute_s + (1.0 - self.overlap) * self.comm_s, self.comm_s)


@dataclass(frozen=True)
class PairUtilization:
    """Steady-state GPU utilization of two jobs sharing a link, the one
    transmitting first and the one transmitting second, and the combined
    utilization (their mean: both jobs weigh the same)."""

    first: float
    second: float

    @property
    def combined(self) -> float:
        return (self.first + self.second) / 2.0


@dataclass
class _Runner:
    """Simulation state of one periodic job."""

    spec: Periodic
    compute_left: float = 0.0
    pending: float = 0.0  # released traffic not yet sent (link seconds)
    held: float = 0.0  # traffic released only when computing ends
    busy: float = 0.0  # GPU seconds computed so far

    def start_iteration(self) -> None:
        self.compute_left = self.spec.compute_s
        self.pending += self.spec.overlap * self.spec.comm_s
        self.held = (1.0 - self.spec.overlap) * self.spec.comm_s

    def settle(self) -> bool:
        """Release traffic that waited for the computation and begin the next
        iteration once everything is done. True when an iteration began."""
        if self.compute_left > 0.0:
            return False
        if self.held > 0.0:
            self.pending += self.held
            self.held = 0.0
        if self.pending > 0.0:
            return False
        self.start_iteration()
        return True


def _validate_periodic(spec, role) -> None:
    if not (_is_positive_number(spec.compute_s) and _is_positive_number(spec.comm_s)):
        raise ValueError(
            f"{role} job: compute_s and comm_s must be positive numbers of "
            f"seconds, got {spec.compute_s!r} and {spec.comm_s!r}"
        )
    if not 0.0 <= spec.overlap <= 1.0:
        raise ValueError(f"{role} job: overlap must be a share between 0 and 1, got {spec.overlap!r}")


def _advance(runners, tolerance) -> float:
    """Run the jobs to their next event and return the seconds that took.
    Strict priority: the earliest runner with traffic pending has the whole
    link (a higher-priority job preempts a lower one mid-transfer, as a
    strict-priority queue does per packet)."""
    served = next((runner for runner in runners if runner.pending > 0.0), None)
    steps = [runner.compute_left for runner in runners if runner.compute_left > 0.0]
    if served is not None:
        steps.append(served.pending)
    step = min(steps)
    for runner in runners:
        if runner.compute_left > 0.0:
            runner.busy += step
            runner.compute_left -= step
            if runner.compute_left <= tolerance:
                runner.compute_left = 0.0
    if served is not None:
        served.pending -= step
        if served.pending <= tolerance:
            served.pending = 0.0
    return step


def _state_key(runners, scale) -> tuple:
    """The runners' state, rounded so that a state reached again through a
    different chain of floating-point sums still compares equal."""
    return tuple(
        round(value / scale, 9)
        for runner in runners
        for value in (runner.compute_left, runner.pending, runner.held)
    )


def _utilization_between(start, end) -> list:
    (start_time, start_busy), (end_time, end_busy) = start, end
    span = end_time - start_time
    return [(after - before) / span for before, after in zip(start_busy, end_busy)]


def simulate_shared_link(specs: Sequence[Periodic]) -> list:
    """Steady-state GPU utilization of each job in `specs` (highest priority
    first) when they share one link under strict priority.

    All jobs start computing at time 0. Whenever the first job begins an
    iteration the whole state is recorded; once a state recurs the system is
    periodic from there, and utilization is the computation done over that
    cycle divided by its length, which is exact. Without a recurrence within
    the iteration budget, the second half of the run is averaged."""
    runners = [_Runner(spec) for spec in specs]
    for runner in runners:
        runner.start_iteration()
    scale = max(max(spec.compute_s, spec.comm_s) for spec in specs)
    tolerance = 1e-12 * scale
    now = 0.0
    seen: dict = {}
    records = []
    top_started = True
    while True:
        if top_started:
            key = _state_key(runners, scale)
            record = (now, [runner.busy for runner in runners])
            if key in seen:
                return _utilization_between(seen[key], record)
            seen[key] = record
            records.append(record)
            if len(records) > _MAX_SIMULATED_ITERATIONS:
                return _utilization_between(records[len(records) // 2], record)
        now += _advance(runners, tolerance)
        # Every runner settles, not only until the first one starts.
        top_started = [runner.settle() for runner in runners][0]


def utilization(first: Periodic, second: Periodic) -> PairUtilization:
    """GPU utilization when `first` and `second` (Periodic) share a link and
    `first` transmits first whenever both want it."""
    _validate_periodic(first, "first")
    _validate_periodic(second, "second")
    first_share, second_share = simulate_shared_link([first, second])
    return PairUtilization(first_share, second_share)


def waiting_loss(share_when_first: float, share_when_second: float) -> float:
    """Utilization a job loses by transmitting second instead of first
    (never below zero)."""
    return max(share_when_first - share_when_second, 0.0)


def factor_from_losses(
    job_loss: float, job_intensity: float, reference_loss: float, reference_intensity: float
) -> float:
    """k_j from the two jobs' losses: (L_j / I_j) / (L_r / I_r), bounded to
    [FACTOR_FLOOR, FACTOR_CEILING]; 1 when neither job loses anything."""
    if reference_loss <= _NEGLIGIBLE_LOSS:
        return 1.0 if job_loss <= _NEGLIGIBLE_LOSS else FACTOR_CEILING
    factor = (job_loss / job_intensity) / (reference_loss / reference_intensity)
    return min(max(factor, FACTOR_FLOOR), FACTOR_CEILING)


def priority_factor(job: Periodic, reference: Periodic) -> float:
    """k_j for `job` against `reference` (both Periodic), such that equal
    priorities k_j * I_j = k_r * I_r (k_r = 1) mean both orders on a shared
    link give the same combined utilization.

    Derivation: let U_x^1 and U_x^2 be job x's utilization when it transmits
    first and second, and L_x = U_x^1 - U_x^2 what waiting costs it. Combined
    utilization is the mean of the two jobs, so putting j before r instead of
    after changes it by ((U_j^1 + U_r^2) - (U_r^1 + U_j^2)) / 2 = (L_j - L_r) / 2:
    the job that loses more should go first, and the orders tie exactly when
    L_j = L_r. Priorities rank the same way and tie at the same point when
    P_j / P_r = L_j / L_r, i.e. k_j * I_j / I_r = L_j / L_r, so
    k_j = (L_j / I_j) / (L_r / I_r).

    Example (no overlap): j computes 1 s and sends 1 s, r computes 2 s and
    sends 2 s (equal intensity). r first: U_r = 1/2, U_j = 1/4 (combined
    37.5%); j first: U_j = 1/2, U_r = 1/3 (combined 41.7%). L_j = 1/4,
    L_r = 1/6, so k_j = 1.5. A job whose traffic hides behind its own
    computation loses little by waiting, so its k is small."""
    job_first = utilization(job, reference)
    reference_first = utilization(reference, job)
    job_loss = waiting_loss(job_first.first, reference_first.second)
    reference_loss = waiting_loss(reference_first.first, job_first.second)
    return factor_from_losses(job_loss, job.intensity, reference_loss, reference.intensity)


@dataclass(frozen=True)
class Priority:
    """Step 2's result for one job: intensity on its chosen paths, the
    correction factor k and the priority P = k * I."""

    intensity: float
    factor: float
    value: float


def reference_job(jobs: Sequence[Job]) -> Job:
    """The job with the most traffic per iteration (k = 1); ties by name."""
    return min(jobs, key=lambda job: (-job.total_bytes, job.name))


def as_periodic(job: Job, chosen: dict[str, Path], bandwidth: Bandwidth) -> Periodic:
    """The job as its busiest link sees it, with flows on `chosen`."""
    return Periodic(job.compute_s, communication_time(job, chosen, bandwidth), job.overlap)


def assign_priorities(jobs: Sequence[Job], chosen: dict, bandwidth: Bandwidth) -> dict:
    """{job name: Priority}: each job's intensity on its chosen paths
    (`chosen` is {job name: {flow name: path}}), corrected by the factor k
    measured against the reference job."""
    if not jobs:
        return {}
    validate_jobs(jobs, bandwidth)
    for job in jobs:
        if job.name not in chosen:
            raise ValueError(f"job {job.name!r}: no paths chosen; expected an entry per job")
    reference = reference_job(jobs)
    reference_spec = as_periodic(reference, chosen[reference.name], bandwidth)
    priorities = {}
    for job in jobs:
        spec = as_periodic(job, chosen[job.name], bandwidth)
        factor = 1.0 if job is reference else priority_factor(spec, reference_spec)
        priorities[job.name] = Priority(spec.intensity, factor, factor * spec.intensity)
    return priorities


# --- step 3: priority compression --------------------------------------------
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


def _validate_edges(jobs, edges) -> None:
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


def _forward_weights(order, edges) -> list:
    """weight[p][q]: edge weight from the job at position p to the one at q."""
    position = {job: index for index, job in enumerate(order)}
    weight = [[0.0] * len(order) for _ in order]
    for high, low, edge_weight in edges:
        if position[high] >= position[low]:
            raise ValueError(f"order puts {low!r} before {high!r}, against edge {high!r} -> {low!r}")
        weight[position[high]][position[low]] += edge_weight
    return weight


def _crossing_weights(weight) -> list:
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


def _best_block_ends(crossing, n, levels) -> list:
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


def _levels_from_ends(order, ends) -> dict:
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


def _without_gaps(assignment) -> dict:
    """The same assignment with levels renumbered 0, 1, ... in order."""
    rank = {level: index for index, level in enumerate(sorted(set(assignment.values())))}
    return {job: rank[level] for job, level in assignment.items()}


# --- the whole plan ----------------------------------------------------------
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
