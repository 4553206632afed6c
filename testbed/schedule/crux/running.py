"""Crux as it runs: which priority level each job gets, decided from what
the jobs' traffic shows, again whenever a job starts or stops (pure).

The declared jobs (compute time and bytes from the announcement) seed the
first plan. From then on the controller feeds `observe` with samples of
every connection's byte counter, and the schedule follows the paper's
practice:

- a job that starts sending has *arrived*: it is profiled alone at the top
  level for `window_s` (the others are moved one level down, so no other
  job shares its level), and its period, computation and bytes per
  connection are read from that window (profile.py);
- once no job waits to be profiled, the jobs running are planned again
  from what was measured (the declared values stand in for a job whose
  window showed no period);
- a job whose counters have not moved for `idle_s` has *ended*: it leaves
  the plan and its level is free for the others.

Every decision is kept (`decisions`) with its time, its reason and the
levels it chose, for the controller to report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import plan as crux_plan
from .model import Bandwidth, Job
from .profile import SILENT_BYTES, JobProfile, declared_and_measured, measured_job, profile

# Crux ranks by compute over communication and needs compute positive.
MIN_COMPUTE_S = 1e-6


@dataclass(frozen=True)
class Decision:
    t: float
    why: str
    levels: dict  # job -> level, 0 highest; only the jobs running

    def as_dict(self) -> dict:
        return {"t": round(self.t, 4), "why": self.why, "levels": dict(sorted(self.levels.items()))}


@dataclass
class _Samples:
    times: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)  # connection -> [bytes]

    def add(self, t: float, counters: Mapping[str, float]) -> None:
        self.times.append(t)
        for name, value in counters.items():
            self.counters.setdefault(name, [0.0] * (len(self.times) - 1)).append(value)
        for values in self.counters.values():
            if len(values) < len(self.times):  # not reported this time: unchanged
                values.append(values[-1] if values else 0.0)


class RunningCrux:
    def __init__(
        self, jobs: Sequence[Job], bandwidth: Bandwidth, levels: int, window_s: float, idle_s: float
    ):
        if window_s <= 0 or idle_s <= 0:
            raise ValueError("window_s and idle_s must be positive")
        self.declared = {j.name: j for j in jobs}
        self.bandwidth = bandwidth
        self.level_count = levels
        self.window_s, self.idle_s = window_s, idle_s
        self.running: set[str] = set()
        self.last_bytes: dict[str, float] = {}
        self.last_moved: dict[str, float] = {}
        self.waiting: list[str] = []  # arrived, not profiled yet, in arrival order
        self.profiling: tuple[str, float, _Samples] | None = None  # job, since, its samples
        self.profiles: dict[str, JobProfile | None] = {}
        self.replan_due = False  # a profile came in: plan again once no job waits
        self.compared: dict[str, dict] = {}  # job -> declared_and_measured
        self.planned = self._plan(sorted(self.declared), measured=False)
        self.levels = dict(self.planned)
        self.decisions: list[Decision] = [Decision(0.0, "planned from the declared jobs", dict(self.levels))]

    # --- what the counters say -------------------------------------------------
    def observe(self, t: float, counters: Mapping[str, Mapping[str, float]]) -> bool:
        """Counters {job: {connection: cumulative bytes}} read at `t`
        (seconds, increasing). True when the levels changed."""
        before = dict(self.levels)
        for job, conns in counters.items():
            if job not in self.declared:
                continue
            total = sum(conns.values())
            # a few frames (a warm-up, a late ACK) are not a job sending
            if total - self.last_bytes.get(job, 0.0) >= SILENT_BYTES:
                self.last_moved[job] = t
                if job not in self.running:
                    self._arrived(job)
            self.last_bytes[job] = max(total, self.last_bytes.get(job, 0.0))
        for job in sorted(self.running):
            if t - self.last_moved[job] >= self.idle_s:
                self._ended(t, job)
        if self.profiling is not None:
            job, since, samples = self.profiling
            samples.add(t, counters.get(job, {}))
            if t - since >= self.window_s:
                self._profiled(job, samples)
        if self.profiling is None and self.waiting:
            self._start_profiling(t, self.waiting.pop(0), counters)
        elif self.profiling is None and (self.replan_due or self.levels != self.planned):
            self._settle(t)
        return self.levels != before

    def _arrived(self, job: str) -> None:
        self.running.add(job)
        self.waiting.append(job)

    def _ended(self, t: float, job: str) -> None:
        self.running.discard(job)
        if job in self.waiting:
            self.waiting.remove(job)
        if self.profiling is not None and self.profiling[0] == job:
            self.profiling = None
        self.planned = self._plan(sorted(self.running), measured=True)
        if self.profiling is None:
            self.levels = dict(self.planned)
            self.decisions.append(Decision(t, f"{job} stopped sending", dict(self.levels)))

    def _start_profiling(self, t: float, job: str, counters: Mapping) -> None:
        samples = _Samples()
        samples.add(t, counters.get(job, {}))
        self.profiling = (job, t, samples)
        others = {j: min(self.level_count - 1, level + 1) for j, level in self.planned.items() if j != job}
        self.levels = {**others, job: 0}
        self.decisions.append(Decision(t, f"profiling {job} alone at the top level", dict(self.levels)))

    def _profiled(self, job: str, samples: _Samples) -> None:
        self.profiling = None
        p = profile(samples.times, samples.counters) if len(samples.times) >= 2 else None
        self.profiles[job] = p
        if p is not None:
            self.compared[job] = declared_and_measured(self.declared[job], p)
        self.planned = self._plan(sorted(self.running), measured=True)
        self.replan_due = True

    def _settle(self, t: float) -> None:
        self.replan_due = False
        self.levels = dict(self.planned)
        measured = sorted(j for j in self.running if self.profiles.get(j) is not None)
        why = f"planned from measurements ({', '.join(measured) or 'none'})"
        self.decisions.append(Decision(t, why, dict(self.levels)))

    # --- planning ------------------------------------------------------------
    def job(self, name: str) -> Job:
        """The job as the plan sees it: measured where a profile exists."""
        p = self.profiles.get(name)
        declared = self.declared[name]
        return declared if p is None else measured_job(declared, p, MIN_COMPUTE_S)

    def _plan(self, names: Sequence[str], measured: bool) -> dict:
        jobs = [self.job(n) if measured else self.declared[n] for n in names]
        if not jobs:
            return {}
        return dict(crux_plan(jobs, self.bandwidth, self.level_count).levels)

    def report(self) -> dict:
        """What was measured and decided, JSON-ready."""
        return {
            "window_s": self.window_s,
            "idle_s": self.idle_s,
            "levels": self.level_count,
            "decisions": [d.as_dict() for d in self.decisions],
            "jobs": {
                name: self.compared.get(name) or {"measured": None, "why": "no period seen or not profiled"}
                for name in sorted(self.declared)
            },
        }
