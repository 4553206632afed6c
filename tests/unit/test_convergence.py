"""Convergence is counted to the first routes version that includes the fault."""

from testbed.drill.faults import convergence_s

T0 = 100.0
ENDS = [("t0", 3)]


def routes(t, down, applied=None):
    ev = {"event": "routes", "t": T0 + t, "down": [list(p) for p in down]}
    if applied is not None:
        ev["applied_t"] = T0 + applied
    return ev


def fault(action, issued=10.0, applied=10.02):
    return {"action": action, "issued_at": issued, "applied_at": applied, "link": ["a", "b"]}


def test_a_version_acknowledged_before_set_link_returned_counts_for_a_link_up():
    # The switch saw the port come up and the controller answered while the
    # runner was still resetting queues: that version includes the fault.
    events = [routes(5.0, ENDS), routes(10.01, [])]
    assert convergence_s(events, T0, fault("link-up"), ENDS) == 0.01


def test_a_version_that_predates_the_fault_does_not_count():
    # Acknowledged after the fault was issued but still computed with the
    # link up (the port status had not arrived): not the fault's version.
    events = [routes(10.005, []), routes(10.04, ENDS, applied=10.05)]
    assert convergence_s(events, T0, fault("link-down"), ENDS) == 0.05


def test_no_version_including_the_fault_gives_none():
    events = [routes(10.5, []), routes(11.0, [("t1", 2)])]
    assert convergence_s(events, T0, fault("link-down"), ENDS) is None


def test_other_events_and_earlier_versions_are_ignored():
    events = [routes(9.0, ENDS), {"event": "port", "t": T0 + 10.01}, routes(10.2, ENDS)]
    assert convergence_s(events, T0, fault("link-down"), ENDS) == 0.2


def test_results_without_an_issue_time_count_from_when_the_fault_was_applied():
    f = {"action": "link-down", "applied_at": 10.0, "link": ["a", "b"]}
    assert convergence_s([routes(10.1, ENDS)], T0, f, ENDS) == 0.1
