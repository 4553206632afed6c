"""What a job does, read from its traffic: Crux's inputs measured rather
than declared (pure).

In production Crux gives each job a unique top priority for a window and
reads its iteration period from the periodicity of its traffic. Here the
controller polls the byte counters of a job's connections (the rules at
their first switch count every packet) and hands the samples to
`profile`: a synchronous training job sends in bursts (its collective)
separated by silences (its computation), so

  period      the mean time from one burst's start to the next
  compute_s   the mean silence between two bursts (the computation that
              does not overlap communication: what a priority can win back)
  bytes       per connection, what it carried from the first burst's start
              to the last one's, divided by the periods between them

A burst already under way when the window opens is not a start: its
beginning was not seen, and counting it would add a part of a burst to the
bytes and a part of a period to the periods.

A job that never falls silent at the sampling's resolution (or for too few
intervals to make periods) computes for less than one sample between
bursts: its compute time is taken as 0 and
its bytes per iteration as its bytes per period of the whole window, which
ranks it as pure communication, as Crux would.

The estimate is only as fine as the samples. A silence is the sampling
intervals that carried nothing plus the silent part of the busy interval on
each side of them: an edge interval that carried x bytes was busy for about
x over the job's rate in the middle of a burst (the median over intervals
whose neighbours are busy too). Without that, a silence of a few intervals
loses one interval on average (its two edges), and since the switches
refresh their counters on a clock of their own (every 100 ms), which of its
intervals look silent moves from period to period. A job whose bursts are
too short to have a middle keeps the whole intervals only: measured as
lighter (more communication-bound) than it is. A silence shorter than one
interval is not seen at all. `resolution_s` says how fine the samples were.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from .model import Job

# A sampling interval that carried fewer bytes than this (a few frames: an
# ACK or a CNP, not a collective's step) counts as silent.
SILENT_BYTES = 4 * 1500
# Bursts needed to speak of a period: two full periods.
MIN_BURSTS = 3


@dataclass(frozen=True)
class JobProfile:
    period_s: float  # one iteration, burst start to burst start
    compute_s: float  # the silence between bursts
    bytes: dict  # {connection: bytes per iteration}
    iterations: int  # whole periods seen
    resolution_s: float  # the median sampling interval

    @property
    def comm_s(self) -> float:
        """The part of a period the job was sending."""
        return max(0.0, self.period_s - self.compute_s)

    def as_dict(self) -> dict:
        return {
            "period_s": round(self.period_s, 4),
            "compute_s": round(self.compute_s, 4),
            "comm_s": round(self.comm_s, 4),
            "iterations": self.iterations,
            "resolution_s": round(self.resolution_s, 4),
            "bytes": {name: round(b) for name, b in sorted(self.bytes.items())},
        }


def _runs(busy: Sequence[bool]) -> list[tuple[bool, int, int]]:
    """[(busy, first interval, last interval)] of maximal runs."""
    out: list[tuple[bool, int, int]] = []
    for k, b in enumerate(busy):
        if out and out[-1][0] == b:
            out[-1] = (b, out[-1][1], k)
        else:
            out.append((b, k, k))
    return out


def profile(times: Sequence[float], counters: Mapping[str, Sequence[float]]) -> JobProfile | None:
    """The profile of one job from samples of its connections' cumulative
    byte counters taken at `times` (seconds, increasing; every connection
    sampled at every time). None when the samples show no traffic at all
    or fewer than MIN_BURSTS bursts while the job also fell silent (a window
    too short to hold two periods)."""
    n = len(times)
    if n < 2 or any(len(c) != n for c in counters.values()):
        raise ValueError("every connection needs one counter value per sample time")
    if any(b <= a for a, b in zip(times, times[1:])):
        raise ValueError("sample times must increase")
    total = [sum(c[k] for c in counters.values()) for k in range(n)]
    sent = [b - a for a, b in zip(total, total[1:])]  # interval k: times[k] .. times[k + 1]
    if sum(sent) <= 0:
        return None
    resolution = statistics.median(b - a for a, b in zip(times, times[1:]))
    busy = [s >= SILENT_BYTES for s in sent]
    runs = _runs(busy)
    # A burst under way at the window's first interval has no seen start.
    starts = [first for b, first, _ in runs if b and first > 0]
    if len(starts) < MIN_BURSTS:
        began = busy.index(True) if True in busy else len(busy)
        if busy[-1] and len(busy) - began >= MIN_BURSTS and busy[began:].count(False) < MIN_BURSTS:
            # busy since it began, up to the window's end, but for fewer
            # silent intervals than it takes to see a period: its silences
            # are shorter than a sample (the few seen are where a sample
            # happened to fall inside one)
            return _never_silent(times, counters, resolution, began, len(times) - 1)
        return None
    first, last = starts[0], starts[-1]
    periods = len(starts) - 1
    # The silences between the first burst and the last, per period: a
    # sampling too coarse for the period (a silence missed now and then)
    # sees fewer, longer periods, but computation and bytes per period
    # grow together and the intensity, their ratio, holds.
    rate = _burst_rate(times, sent, busy)
    silent = sum(
        _silence(times, sent, a, b, rate) for is_busy, a, b in runs if not is_busy and first < a and b < last
    )
    return JobProfile(
        period_s=(times[last] - times[first]) / periods,
        compute_s=silent / periods,
        bytes={name: (c[last] - c[first]) / periods for name, c in counters.items()},
        iterations=periods,
        resolution_s=resolution,
    )


def _burst_rate(times: Sequence[float], sent: Sequence[float], busy: Sequence[bool]) -> float | None:
    """Bytes per second the job sends in the middle of its bursts: the
    median over the busy intervals whose neighbours are busy too (None when
    no burst is three intervals long)."""
    middle = [
        sent[k] / (times[k + 1] - times[k])
        for k in range(1, len(sent) - 1)
        if busy[k - 1] and busy[k] and busy[k + 1]
    ]
    return statistics.median(middle) if middle else None


def _silence(times: Sequence[float], sent: Sequence[float], a: int, b: int, rate: float | None) -> float:
    """How long the job was silent around the silent intervals a..b: those
    intervals, plus the part of the busy interval on each side that the
    bytes it carried, at the burst's rate, leave over."""
    span = times[b + 1] - times[a]
    if rate is None:
        return span
    for k in (a - 1, b + 1):
        span += max(0.0, times[k + 1] - times[k] - sent[k] / rate)
    return span


def _never_silent(times, counters, resolution, first, last):
    """A job busy from sample `first` to sample `last`: pure communication
    at this resolution, one period per sampling interval of that span."""
    intervals = last - first
    return JobProfile(
        period_s=resolution,
        compute_s=0.0,
        bytes={name: (c[last] - c[first]) / intervals for name, c in counters.items()},
        iterations=intervals,
        resolution_s=resolution,
    )


def measured_job(job: Job, p: JobProfile, min_compute_s: float) -> Job:
    """`job` with what its traffic showed in place of what was declared:
    the measured compute time (at least `min_compute_s`: Crux ranks by
    compute over communication and needs it positive) and each
    connection's measured bytes per iteration (a connection the counters
    did not see keeps its declared bytes)."""
    flows = tuple(replace(f, bytes=p.bytes.get(f.name, f.bytes)) for f in job.flows)
    return replace(job, compute_s=max(p.compute_s, min_compute_s), flows=flows)


def declared_and_measured(job: Job, p: JobProfile) -> dict:
    """What was declared beside what was measured, and how far apart (the
    measured over the declared), for the report."""
    measured_bytes = sum(p.bytes.get(f.name, f.bytes) for f in job.flows)

    def ratio(measured, declared):
        return round(measured / declared, 3) if declared else None

    return {
        "declared": {"compute_s": job.compute_s, "bytes": round(job.total_bytes)},
        "measured": dict(p.as_dict(), bytes=round(measured_bytes)),
        # measured over declared (no unit: keys without a time suffix)
        "ratio": {
            "compute": ratio(p.compute_s, job.compute_s),
            "bytes": ratio(measured_bytes, job.total_bytes),
        },
        "unseen": sorted(f.name for f in job.flows if f.name not in p.bytes),
    }
