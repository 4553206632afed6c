"""Crux's inputs read from a job's traffic: synthetic counter samples of a
job whose period, computation and bytes are known, measured back."""

import math
import random

import pytest

from testbed.schedule.crux.profile import SILENT_BYTES, profile


def counters_of(
    period, compute, flow_bytes, dt, duration, phase=0.0, jitter=0.0, seed=1, refresh=None, refresh_phase=0.0
):
    """Sample times and cumulative byte counters of a job that computes for
    `compute` s, then sends `flow_bytes` (per connection) evenly over the
    rest of its `period`, starting `phase` s into the window (before it,
    when negative). With `refresh`, a sample reads the counters as the
    switch last refreshed them, every `refresh` s from `refresh_phase`."""
    rng = random.Random(seed)
    comm = period - compute

    def sent_by(t, nbytes):
        if refresh is not None:
            t = math.floor((t - refresh_phase) / refresh) * refresh + refresh_phase
        if t < phase:
            return 0.0
        k, into = divmod(t - phase, period)
        return nbytes * (k + min(max(into - compute, 0.0), comm) / comm)

    times, t = [], 0.0
    while t <= duration:
        times.append(t)
        t += dt * (1 + rng.uniform(-jitter, jitter))
    return times, {name: [sent_by(t, b) for t in times] for name, b in flow_bytes.items()}


@pytest.mark.parametrize(
    "period, compute, dt",
    [(0.8, 0.5, 0.02), (0.3, 0.15, 0.02), (0.2, 0.04, 0.01), (1.2, 0.9, 0.05)],
)
def test_period_compute_and_bytes_come_back_within_a_sample(period, compute, dt):
    flows = {"r0->r1": 400_000, "r1->r0": 250_000}
    times, counters = counters_of(period, compute, flows, dt, duration=6 * period, phase=0.13, jitter=0.2)
    p = profile(times, counters)
    assert p is not None
    assert p.period_s == pytest.approx(period, abs=1.5 * dt)
    assert p.compute_s == pytest.approx(compute, abs=1.5 * dt)
    assert p.comm_s == pytest.approx(period - compute, abs=3 * dt)
    assert p.iterations >= 4
    for name, b in flows.items():
        assert p.bytes[name] == pytest.approx(b, rel=0.05)


def test_a_burst_under_way_when_the_window_opens_is_not_counted():
    # 0.15 s into its 0.3 s of sending when the first sample is taken
    times, counters = counters_of(0.8, 0.5, {"r0->r1": 400_000}, 0.02, duration=3.0, phase=-0.65)
    p = profile(times, counters)
    assert p.bytes["r0->r1"] == pytest.approx(400_000, rel=0.05)
    assert p.period_s == pytest.approx(0.8, abs=0.03)
    assert p.compute_s == pytest.approx(0.5, abs=0.03)


@pytest.mark.parametrize("seed", range(8))
def test_a_computation_a_few_samples_long_is_measured_to_a_fraction_of_one(seed):
    # Sampled every 100 ms from counters the switch refreshes every 100 ms
    # on a clock of its own: the silent intervals alone lose about one
    # interval per silence; their busy neighbours' bytes give it back.
    rng = random.Random(seed)
    times, counters = counters_of(
        0.78,
        0.5,
        {"r0->r1": 700_000, "r1->r0": 700_000},
        0.1,
        duration=3.0,
        phase=-rng.uniform(0, 0.78),
        jitter=0.05,
        seed=seed,
        refresh=0.1,
        refresh_phase=rng.uniform(0, 0.1),
    )
    p = profile(times, counters)
    assert p.compute_s == pytest.approx(0.5, abs=0.03)
    assert p.bytes["r0->r1"] == pytest.approx(700_000, rel=0.05)


def test_a_job_whose_bursts_are_too_short_to_have_a_middle_keeps_whole_intervals():
    # 60 ms of sending sampled every 50 ms: no interval with busy
    # neighbours on both sides, so no rate to share out the edges with
    times, counters = counters_of(0.36, 0.3, {"a": 200_000}, 0.05, duration=3.0, phase=0.13)
    p = profile(times, counters)
    assert 0.3 - 0.05 - 1e-9 <= p.compute_s <= 0.3 + 1e-9


def test_a_job_that_never_falls_silent_is_pure_communication():
    times = [k * 0.05 for k in range(41)]
    counters = {"a": [k * 10_000.0 for k in range(41)], "b": [k * 30_000.0 for k in range(41)]}
    p = profile(times, counters)
    assert p.compute_s == 0.0 and p.period_s == pytest.approx(0.05)
    assert p.bytes == pytest.approx({"a": 10_000, "b": 30_000})


def test_a_late_starter_is_measured_from_its_first_bytes():
    times = [k * 0.05 for k in range(41)]
    counters = {"a": [max(0, k - 20) * 10_000.0 for k in range(41)]}
    p = profile(times, counters)
    assert p.compute_s == 0.0 and p.bytes["a"] == pytest.approx(10_000)


def test_no_traffic_or_a_window_shorter_than_two_periods_gives_nothing():
    times, counters = counters_of(1.0, 0.6, {"a": 1e6}, 0.02, duration=1.7, phase=0.1)
    assert profile(times, counters) is None
    assert profile([0.0, 0.1, 0.2], {"a": [5.0, 5.0, 5.0]}) is None


def test_acks_alone_do_not_make_a_burst():
    times, counters = counters_of(0.5, 0.3, {"data": 500_000}, 0.02, duration=3.0)
    # a trickle of control frames in every interval, below the threshold
    counters["acks"] = [k * (SILENT_BYTES / 4) for k in range(len(times))]
    p = profile(times, counters)
    assert p.compute_s == pytest.approx(0.3, abs=0.03)


def test_bad_samples_are_refused():
    with pytest.raises(ValueError, match="one counter value per sample"):
        profile([0.0, 1.0], {"a": [0.0]})
    with pytest.raises(ValueError, match="increase"):
        profile([0.0, 0.0], {"a": [0.0, 1.0]})


def test_a_measured_job_replaces_what_was_declared_and_says_how_far_apart():
    from testbed.schedule.crux.model import Flow, Job
    from testbed.schedule.crux.profile import declared_and_measured, measured_job

    declared = Job("big", 0.5, (Flow("a", 1e6, (("l1",),)), Flow("b", 1e6, (("l2",),))))
    times, counters = counters_of(0.8, 0.6, {"a": 500_000}, 0.02, duration=5.0)
    p = profile(times, counters)
    job = measured_job(declared, p, min_compute_s=1e-6)
    assert job.compute_s == pytest.approx(0.6, abs=0.03)
    assert [f.bytes for f in job.flows] == [pytest.approx(500_000, rel=0.05), 1e6]  # b unseen: declared
    said = declared_and_measured(declared, p)
    assert said["unseen"] == ["b"]
    assert said["ratio"]["compute"] == pytest.approx(1.2, abs=0.07)
    assert said["ratio"]["bytes"] == pytest.approx(0.75, abs=0.02)
    silent = profile([0.0, 0.1, 0.2, 0.3], {"a": [0.0, 1e5, 2e5, 3e5]})
    assert measured_job(declared, silent, min_compute_s=1e-6).compute_s == 1e-6


def test_a_silence_shorter_than_the_sampling_is_missed_and_the_job_ranks_lighter():
    # 50 ms of computation read every 50 ms: most silences fall inside an
    # interval that also carried bytes, so computation is underestimated
    # (never overestimated): the job looks more communication-bound
    times, counters = counters_of(0.09, 0.05, {"a": 200_000}, 0.05, duration=4.0, phase=0.01)
    p = profile(times, counters)
    assert p is not None
    measured, true = p.compute_s / p.bytes["a"], 0.05 / 200_000
    assert measured < 0.5 * true
    fine = profile(*counters_of(0.09, 0.05, {"a": 200_000}, 0.01, duration=4.0, phase=0.01))
    assert fine.compute_s / fine.bytes["a"] == pytest.approx(true, rel=0.25)
