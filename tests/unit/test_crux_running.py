"""Crux as it runs, driven by synthetic counters: jobs are profiled one at
a time at the top level, planned again from what was measured, and planned
again when one stops or starts."""

import pytest

from testbed.schedule import crux
from testbed.schedule.crux.model import Flow, Job
from testbed.schedule.crux.running import RunningCrux

BANDWIDTH = {"up": 5e6, "down": 5e6}  # bytes/s, one shared path


def job(name, compute_s, nbytes):
    return Job(name, compute_s, (Flow(f"{name}-c", nbytes, (("up", "down"),)),))


class Traffic:
    """Each job computes, then sends its bytes at the link's rate: cumulative
    bytes of its one connection at any time (0 before it starts, frozen
    after it stops)."""

    def __init__(self, **jobs):
        self.jobs = jobs  # name -> (compute_s, bytes, start, stop)

    def counters(self, t):
        out = {}
        for name, (compute, nbytes, start, stop) in self.jobs.items():
            if t < start:
                continue
            comm = nbytes / BANDWIDTH["up"]
            period = compute + comm
            k, into = divmod(min(t, stop) - start, period)
            out[name] = {f"{name}-c": nbytes * (k + min(max(into - compute, 0.0), comm) / comm)}
        return out


def run(rc, traffic, until, dt=0.02):
    t, changes = 0.0, 0
    while t <= until:
        changes += rc.observe(t, traffic.counters(t))
        t = round(t + dt, 6)
    return changes


def test_declared_values_seed_the_plan_and_measured_ones_replace_them():
    # declared the wrong way round: "light" claims heavy computation
    declared = [job("heavy", 0.05, 400_000), job("light", 0.5, 400_000), job("mid", 0.2, 400_000)]
    truth = {"heavy": 0.5, "light": 0.05, "mid": 0.2}
    rc = RunningCrux(declared, BANDWIDTH, levels=3, window_s=2.0, idle_s=1.0)
    assert rc.levels["light"] == 0  # the declaration ranks it first
    traffic = Traffic(**{n: (c, 400_000, 0.0, 99.0) for n, c in truth.items()})
    run(rc, traffic, until=8.0)
    whys = [d.why for d in rc.decisions]
    assert whys[0] == "planned from the declared jobs"
    # in the order they began to send: the least computation first
    assert [w for w in whys if w.startswith("profiling")] == [
        "profiling light alone at the top level",
        "profiling mid alone at the top level",
        "profiling heavy alone at the top level",
    ]
    assert whys[-1] == "planned from measurements (heavy, light, mid)"
    for name, compute in truth.items():
        assert rc.profiles[name].compute_s == pytest.approx(compute, abs=0.03)
        assert rc.compared[name]["ratio"]["bytes"] == pytest.approx(1.0, abs=0.05)
    # what the truth would have planned
    expected = crux.plan([job(n, c, 400_000) for n, c in truth.items()], BANDWIDTH, 3).levels
    assert rc.levels == expected and expected["light"] == 2
    assert rc.decisions[0].levels["light"] == 0  # what the declaration would have kept


def test_the_profiled_job_is_alone_at_the_top():
    rc = RunningCrux([job("a", 0.3, 200_000), job("b", 0.3, 200_000)], BANDWIDTH, 2, 1.0, 1.0)
    run(rc, Traffic(a=(0.3, 200_000, 0.0, 99.0), b=(0.3, 200_000, 0.0, 99.0)), until=0.5)
    first = next(d for d in rc.decisions if d.why.startswith("profiling"))
    profiled = first.why.split()[1]
    assert first.levels[profiled] == 0
    assert all(level > 0 for name, level in first.levels.items() if name != profiled)


def test_a_job_that_stops_frees_its_level_and_one_that_starts_is_profiled():
    declared = [job("a", 0.4, 300_000), job("b", 0.1, 300_000), job("late", 0.2, 300_000)]
    traffic = Traffic(a=(0.4, 300_000, 0.0, 99.0), b=(0.1, 300_000, 0.0, 6.0), late=(0.2, 300_000, 9.0, 99.0))
    rc = RunningCrux(declared, BANDWIDTH, levels=3, window_s=1.5, idle_s=1.0)
    run(rc, traffic, until=14.0)
    whys = [(d.t, d.why) for d in rc.decisions]
    stopped = [t for t, w in whys if w == "b stopped sending"]
    assert stopped and 6.9 <= stopped[0] <= 7.2  # idle_s after its last byte
    after_stop = next(d for d in rc.decisions if d.why == "b stopped sending")
    assert "b" not in after_stop.levels
    late = [d for d in rc.decisions if d.why == "profiling late alone at the top level"]
    assert late and late[0].t >= 9.0
    assert set(rc.decisions[-1].levels) == {"a", "late"}
    report = rc.report()
    assert report["jobs"]["late"]["measured"]["compute_s"] == pytest.approx(0.2, abs=0.03)
    assert [d["why"] for d in report["decisions"]] == [w for _, w in whys]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        RunningCrux([job("a", 0.1, 1)], BANDWIDTH, 2, window_s=0, idle_s=1)
