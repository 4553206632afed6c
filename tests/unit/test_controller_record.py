"""The controller's record of a drill (testbed/results/controller.py) and
the scenario's controller_timeline checks."""

import pytest

from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario
from testbed.results import controller, expectations

T0 = 100.0


def test_a_planned_restart_is_timed_from_its_start_to_the_next_routes():
    events = [
        {"event": "routes", "t": 99.0, "version": 1, "changes": 40},
        {"event": "exit", "t": 101.01, "code": -15, "asked": True},
        {"event": "start", "t": 102.5},
        {"event": "switch", "t": 103.2, "name": "t0"},
        {"event": "adopted", "t": 103.21, "switch": "t0", "routes": 8, "groups": 1, "removed": 0},
        {"event": "adopted", "t": 103.22, "switch": "t1", "routes": 8, "groups": 1, "removed": 1},
        {"event": "routes", "t": 103.3, "version": 1, "changes": 0},
        {"event": "routes", "t": 104.0, "version": 2, "changes": 3},
    ]
    actions = [
        {"at": 1.0, "applied_at": 1.0, "action": "stop"},
        {"at": 2.5, "applied_at": 2.5, "action": "start"},
    ]
    rec = controller.record(events, T0, actions, ran_s=6.0)
    assert rec["exits"] == [{"at": 1.01, "code": -15, "asked": True}]
    (r,) = rec["restarts"]
    assert r == {"at": 2.5, "s": 0.8, "changes": 0, "adopted_routes": 16, "removed": 1}
    assert rec["without_s"] == pytest.approx(1.49)
    assert rec["unplanned"] == [] and controller.problems(rec) == []
    assert rec["host_routes_at_end"] == {}  # the last routes version narrowed no host
    metrics = {"controller": rec}
    assert expectations.lookup(metrics, "controller_restart_changes", None) == (0, None)
    assert expectations.lookup(metrics, "controller_restart_s", None) == (0.8, None)


def test_the_record_keeps_the_host_routes_of_the_last_version_within_the_run():
    held = {"s1h0": {"10.0.0.1": ["s1h0-n0p1"]}}
    events = [
        {"event": "routes", "t": 99.0, "version": 1, "host_overrides": {}},
        {"event": "routes", "t": 105.0, "version": 2, "host_overrides": held},  # a fault
        {"event": "routes", "t": 111.0, "version": 3, "host_overrides": {}},  # after the run
    ]
    assert controller.record(events, T0, [], ran_s=10.0)["host_routes_at_end"] == held
    assert controller.record(events[1:2], T0, [], ran_s=10.0, dilation=2.0)["host_routes_at_end"] == held
    assert controller.record([], T0, [], ran_s=10.0)["host_routes_at_end"] is None  # no routes came


def test_an_unasked_exit_is_a_problem_and_counts_until_the_end():
    events = [
        {"event": "exit", "t": 102.0, "code": -9, "asked": False},
        {"event": "exit", "t": 120.0, "code": 0, "asked": True},
    ]  # teardown, after the run
    rec = controller.record(events, T0, [], ran_s=10.0, dilation=2.0)
    assert rec["exits"] == [{"at": 1.0, "code": -9, "asked": False}]
    assert rec["without_s"] == 4.0  # emulated: (10 - 2) / 2
    (p,) = controller.problems(rec)
    assert "exited at 1.00 s" in p and "without the scenario asking" in p
    value, why = expectations.lookup({"controller": rec}, "controller_restart_changes", None)
    assert value is None and "not restarted" in why


def test_a_restart_whose_routes_never_stood_has_no_figures():
    actions = [
        {"at": 1.0, "applied_at": 1.0, "action": "stop"},
        {"at": 2.0, "applied_at": 2.0, "action": "start"},
    ]
    rec = controller.record([{"event": "start", "t": 102.0}], T0, actions, ran_s=5.0)
    assert rec["restarts"][0]["s"] is None and rec["restarts"][0]["changes"] is None
    value, why = expectations.lookup({"controller": rec}, "controller_restart_s", None)
    assert value is None and "never" in why


def write(tmp_path, timeline):
    (tmp_path / "s.yaml").write_text(
        "name: s\ntopology: {kind: hpn}\nduration: 10\n"
        "traffic:\n  - {src: s0h0, dst: s1h0}\n"
        f"controller_timeline: {timeline}\n"
    )
    return tmp_path / "s.yaml"


def test_the_timeline_loads_sorted_and_in_seconds(tmp_path):
    sc = load_scenario(write(tmp_path, "[{at: 4s, action: start}, {at: 500ms, action: stop}]"))
    assert sc.controller_timeline == [{"at": 0.5, "action": "stop"}, {"at": 4.0, "action": "start"}]


@pytest.mark.parametrize(
    "timeline, field, words",
    [
        ("[{at: 1s, action: start}]", "controller_timeline[0].action", "already running"),
        (
            "[{at: 1s, action: stop}, {at: 2s, action: stop}]",
            "controller_timeline[1].action",
            "already stopped",
        ),
        ("[{at: 11s, action: stop}]", "controller_timeline[0].at", "before the end of the run"),
        ("[{at: 1s, action: restart}]", "controller_timeline[0].action", ""),
    ],
)
def test_bad_timelines_are_refused_naming_the_entry(tmp_path, timeline, field, words):
    with pytest.raises(ConfigError) as err:
        load_scenario(write(tmp_path, timeline))
    (p,) = err.value.problems
    assert p.field == field and words in p.message
