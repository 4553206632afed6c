"""One rank of one training job, as a traffic agent plays it: its schedule,
iterations and counters, and what comes next (`Job.advance`): the warm-up
before its start, each iteration's compute phase, and the collective's
steps as their dependencies finish. The transfers themselves are the
agent's to carry out (`StepDriver`)."""

from __future__ import annotations

import functools
import os
from typing import Protocol

from . import collectives
from .collectives import Step
from .transfers import qp_number

IDLE = float("inf")
TRACE = bool(os.environ.get("HPNLAB_TRACE"))  # each step's end in the results (read once)


@functools.cache
def shared_schedule(
    collective: str, n: int, size: int, groups: tuple | None, port: int | None, microbatches: int
) -> tuple[collectives.Schedule, dict[str, int]]:
    """A job's whole schedule and its tags' numbers, built once per agent
    process: the hosts a process plays share them (both are only read).
    Building one costs time in the ranks times their steps (1.3 s at 128
    ranks), which a process playing 64 of those ranks paid 64 times over
    before it could start."""
    schedule = collectives.for_job(
        collective,
        n,
        size,
        groups=None if groups is None else [list(g) for g in groups],
        port=port,
        microbatches=microbatches,
    )
    tags = sorted({s.tag for steps in schedule.steps.values() for s in steps})
    return schedule, {t: i for i, t in enumerate(tags)}


class StepDriver(Protocol):
    """What a job needs of the agent to make progress."""

    def warm(self, job: Job) -> None:
        """Set up the switches' entries for every path of the job."""

    def start_send(self, job: Job, step: Step, now: float) -> None:
        """Begin the transfer of a send step of the current iteration."""

    def step_done(self, job: Job, step: Step) -> bool:
        """Whether a started step's transfer has finished (it is then
        accounted to the job and forgotten). Asked of a step when it starts
        and after the driver reported its transfer ended
        (Job.transfer_ended), not otherwise."""

    def progress(self, record: dict) -> None:
        """An iteration ended: its record."""


class Job:
    """One rank of one job: its schedule, iterations and counters.

    Times are on the agent's monotonic clock once `set_clock` has been
    called; `wake_at` is when the job next needs the clock (IDLE: only a
    transfer's end moves it on)."""

    def __init__(self, spec: dict, start_mono: float, warm_lead_s: float = 0.0) -> None:
        self.id = spec["id"]
        self.name = spec["name"]
        self.rank = spec["rank"]
        self.peers = spec["peers"]
        self.dscp = spec["dscp"]
        self.port = spec.get("port")
        # {peer rank: NIC port}: where the controller pinned this rank's
        # connection to a peer (precise path selection); the rest spread
        self.pins = {int(peer): port for peer, port in (spec.get("pins") or {}).items()}
        self.compute_s = spec["compute_s"]
        self.overlap = spec["overlap"]
        self.iterations = spec["iterations"]
        groups = spec.get("groups")
        self.schedule, self.tag_index = shared_schedule(
            spec["collective"],
            len(self.peers),
            spec["bytes"],
            None if groups is None else tuple(tuple(g) for g in groups),
            self.port,
            spec.get("microbatches", 1),
        )
        self.steps = self.schedule.steps[self.rank]
        self.warmed = False  # its paths set up just before its start (StepDriver.warm)
        self.warm_lead_s = warm_lead_s  # how long before its start it warms them again
        self.start_mono = start_mono + spec.get("start", 0.0)
        self.wake_at = 0.0
        self.iter = -1
        self.records: list[dict] = []
        self.trace: list[tuple] = []
        self.done = False
        self.status: dict[int, str] = {}
        self.keys: dict[int, tuple[str, int]] = {}  # this iteration's transfer_key of each step
        # Each step's dependents, and per iteration the steps whose
        # dependencies are done but which have not started (`ready`), those
        # whose transfers the driver saw end (`ended`) and how many
        # dependencies each step still waits for: a finished transfer then
        # touches only the steps it concerns, not the whole schedule nor
        # every step under way (a 64-rank ring has 63 receives open at once,
        # and asking each of them after every transfer took most of an
        # agent's CPU).
        self.dependents: dict[int, list[int]] = {s.index: [] for s in self.steps}
        for s in self.steps:
            for d in s.deps:
                self.dependents[d].append(s.index)
        self.unmet: dict[int, int] = {}
        self.ready: list[Step] = []
        self.ended: list[Step] = []
        self.open = 0  # steps of this iteration not done yet
        self.first_comm: float | None = None  # when the iteration's first step started
        self.counters = {
            "bytes_sent": 0,
            "bytes_received": 0,
            "packets_sent": 0,
            "retransmitted": 0,
            "timeouts": 0,
            "naks_received": 0,
            "cnps_received": 0,
            "cnps_sent": 0,
            "ce_marks": 0,
            "gaps_seen": 0,
        }
        self.gap_events: list[dict] = []  # the first few gaps this rank saw: where loss showed up

    def set_clock(self, start_mono: float) -> None:
        """Put the job's start on the monotonic clock whose origin is
        `start_mono`; it first wakes one warm-up lead before it."""
        self.start_mono += start_mono
        self.wake_at = self.start_mono - self.warm_lead_s  # see advance: warm, then start

    def transfer_key(self, step: Step) -> tuple[str, int]:
        """(peer ip, QP number) of a step's transfer in the current iteration."""
        # Kept for the iteration: every transfer that ends has the job ask
        # again after each started step (see _run_steps).
        key = self.keys.get(step.index)
        if key is None:
            key = (self.peers[step.peer]["ip"], qp_number(self.id, self.iter, self.tag_index[step.tag]))
            self.keys[step.index] = key
        return key

    def transfer_ended(self, step: Step) -> None:
        """The driver saw the transfer of `step` end (its last data frame in,
        or its last ACK): the next advance asks whether the step is done.
        A transfer of the next iteration may end early (its data came
        before this rank got there): asked then, the step is not done, and
        it is asked again when it starts."""
        self.ended.append(step)

    def advance(self, now: float, driver: StepDriver) -> None:
        """Start what may start and finish what is done; set when the job
        next needs the clock (its start, a compute phase ending)."""
        if self.done:
            self.wake_at = IDLE
            return
        if now < self.start_mono:
            warm_at = self.start_mono - self.warm_lead_s
            if not self.warmed and now >= warm_at:
                driver.warm(self)
                self.warmed = True
            self.wake_at = self.start_mono if self.warmed else warm_at
            return
        if self.iter < 0:
            self.begin_iteration(now)
        while True:
            self._run_steps(now, driver)
            if now >= self.compute_end and not self.open:
                driver.progress(self.end_iteration(now))
                if self.done:
                    self.wake_at = IDLE
                    return
                continue
            break
        if now < self.comm_start:
            self.wake_at = self.comm_start
        elif now < self.compute_end and not self.open:
            self.wake_at = self.compute_end
        else:
            self.wake_at = IDLE  # waits for transfers: their events advance it

    def _run_steps(self, now: float, driver: StepDriver) -> None:
        """Start the steps whose dependencies are done and close the ones
        whose transfers are, until nothing more changes."""
        if now < self.comm_start:
            return  # the compute phase before communication: nothing starts
        status, steps = self.status, self.steps
        while True:
            # What may have finished: the steps starting now (a receive's
            # data may have come before it) and those whose transfer ended.
            asked = self.ended
            self.ended = []
            if self.ready:
                self.first_comm = self.first_comm or now
                for s in sorted(self.ready, key=lambda s: s.index):
                    if s.kind == "send":
                        driver.start_send(self, s, now)
                    status[s.index] = "active"
                    asked.append(s)
                self.ready = []
            for s in asked:
                if status.get(s.index) != "active" or not driver.step_done(self, s):
                    continue
                # Only a step that ends can let a waiting one start.
                status[s.index] = "done"
                self.open -= 1
                if TRACE:
                    self.trace.append((self.iter, s.index, s.kind, round(now - self.start_mono, 4)))
                for d in self.dependents[s.index]:
                    self.unmet[d] -= 1
                    if self.unmet[d] == 0:
                        self.ready.append(steps[d])
            if not self.ready:
                return

    @property
    def pending(self) -> list[Step]:
        """This iteration's steps not done yet, in schedule order."""
        return [s for s in self.steps if self.status.get(s.index) != "done"]

    def begin_iteration(self, now: float) -> None:
        self.iter += 1
        self.t_start = now
        self.comm_start = now + (1.0 - self.overlap) * self.compute_s
        self.compute_end = now + self.compute_s
        self.status = {s.index: "wait" for s in self.steps}
        self.keys = {}
        self.unmet = {s.index: len(s.deps) for s in self.steps}
        self.ready = [s for s in self.steps if not s.deps]
        self.ended = []
        self.open = len(self.steps)
        self.iter_bytes = {"sent": 0, "received": 0}
        self.first_comm = None

    def end_iteration(self, now: float) -> dict:
        """Record the iteration that ends now and begin the next one (or
        finish). Returns the record."""
        comm = now - self.first_comm if self.first_comm else 0.0
        rec = {
            "job": self.name,
            "rank": self.rank,
            "iter": self.iter,
            "start": self.t_start - self.start_mono,
            "end": now - self.start_mono,
            "compute_s": self.compute_s,
            "comm_s": comm,
            "iter_s": now - self.t_start,
            "bytes_sent": self.iter_bytes["sent"],
            "bytes_received": self.iter_bytes["received"],
        }
        self.records.append(rec)
        if self.iter + 1 >= self.iterations:
            self.done = True
        else:
            self.begin_iteration(now)
        return rec

    def results(self) -> dict:
        """What this rank measured, for the agent's results file."""
        return {
            "name": self.name,
            "rank": self.rank,
            "iterations_planned": self.iterations,
            "iterations": self.records,
            **self.counters,
            "bytes_per_iteration_planned": self.schedule.bytes_sent(self.rank),
            "gap_events": self.gap_events,
            "trace": self.trace,
        }
