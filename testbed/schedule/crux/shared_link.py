"""Two or more periodic training jobs sharing one link under strict
priority, simulated event by event to their steady-state GPU utilization.

Apart because it is a model of a link, not of Crux: it knows nothing of
jobs' flows, paths or bandwidths, only each job's compute and link seconds
per iteration. Crux's priority step (priority.py) measures with it how much
a job loses by transmitting second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import is_positive_number

# The two-job simulation stops looking for its steady-state cycle after this
# many iterations of the prioritized job and then averages its second half.
_MAX_SIMULATED_ITERATIONS = 4000


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
        """Computation per second of link time."""
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
        """The two jobs' mean utilization."""
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
        """Begin computing; release the share of traffic that may overlap."""
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


# (time, GPU seconds computed so far by each job) when the top job starts an iteration
_Record = tuple[float, list[float]]


def _validate_periodic(spec: Periodic, role: str) -> None:
    if not (is_positive_number(spec.compute_s) and is_positive_number(spec.comm_s)):
        raise ValueError(
            f"{role} job: compute_s and comm_s must be positive numbers of "
            f"seconds, got {spec.compute_s!r} and {spec.comm_s!r}"
        )
    if not 0.0 <= spec.overlap <= 1.0:
        raise ValueError(f"{role} job: overlap must be a share between 0 and 1, got {spec.overlap!r}")


def _advance(runners: Sequence[_Runner], tolerance: float) -> float:
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


def _state_key(runners: Sequence[_Runner], scale: float) -> tuple:
    """The runners' state, rounded so that a state reached again through a
    different chain of floating-point sums still compares equal."""
    return tuple(
        round(value / scale, 9)
        for runner in runners
        for value in (runner.compute_left, runner.pending, runner.held)
    )


def _utilization_between(start: _Record, end: _Record) -> list[float]:
    (start_time, start_busy), (end_time, end_busy) = start, end
    span = end_time - start_time
    return [(after - before) / span for before, after in zip(start_busy, end_busy)]


def simulate_shared_link(specs: Sequence[Periodic]) -> list[float]:
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
