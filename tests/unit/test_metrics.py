"""Metrics on synthetic series: silence, outage windows, before/during/after."""

import pytest
from entries import evaluate

from testbed.results.flow_inputs import Fault, Flow, Series
from testbed.results.flows import (
    aggregate,
    compute_metrics,
    fault_periods,
    fault_windows,
    link_outages,
    max_silence_s,
    window_mean,
)

DT = 0.1


def times(seconds, dt=DT):
    """Sample end times 0.1, 0.2, ... up to `seconds`."""
    return [round((i + 1) * dt, 6) for i in range(round(seconds / dt))]


def rate(t, mbit, silent=(), dt=DT):
    """`mbit` everywhere except samples lying inside a (start, end) in `silent`."""

    def quiet(ti):
        return any(ti - dt >= s - 1e-9 and ti <= e + 1e-9 for s, e in silent)

    return [0.0 if quiet(ti) else float(mbit) for ti in t]


def down(link, at, applied=None):
    return {
        "at": at,
        "applied_at": at if applied is None else applied,
        "action": "link-down",
        "link": list(link),
    }


def up(link, at, applied=None):
    return {
        "at": at,
        "applied_at": at if applied is None else applied,
        "action": "link-up",
        "link": list(link),
    }


# ---------------------------------------------------------------- silence


def test_silence_of_a_drop_to_zero():
    t = times(10)
    assert max_silence_s(rate(t, 40, silent=[(5, 7.5)]), DT) == pytest.approx(2.5)


def test_silence_is_zero_for_a_steady_flow():
    assert max_silence_s(rate(times(5), 40), DT) == 0


def test_silence_ignores_none_before_start_and_after_end():
    values = [None] * 20 + [40.0] * 30 + [None] * 10
    assert max_silence_s(values, DT) == 0


def test_silence_counts_none_inside_the_flow_life():
    values = [40.0] * 10 + [None] * 5 + [40.0] * 10
    assert max_silence_s(values, DT) == pytest.approx(0.5)


def test_trickle_of_retransmissions_counts_as_silent():
    # 0.12 Mbit/s is one 1500-byte packet per 100 ms: not a live 40 Mbit/s flow.
    values = [40.0] * 20 + [0.12] * 15 + [40.0] * 20
    assert max_silence_s(values, DT) == pytest.approx(1.5)


def test_flow_that_never_sends_is_silent_for_its_whole_life():
    assert max_silence_s([0.0] * 30, DT) == pytest.approx(3.0)


def test_flow_without_any_sample_has_no_silence_value():
    assert max_silence_s([None] * 30, DT) is None
    assert max_silence_s([], DT) is None


# ------------------------------------------------------------ fault windows


def test_windows_pair_down_and_up_of_the_same_link_in_either_order():
    faults = [down(("s0", "t0"), 5, 5.02), up(("t0", "s0"), 10, 10.03)]
    assert fault_windows(faults, 20) == [(5.02, 10.03)]


def test_windows_use_scheduled_time_when_applied_time_is_missing():
    faults = [{"at": 3, "applied_at": None, "action": "link-down", "link": ["a", "b"]}]
    assert fault_windows(faults, 8) == [(3, 8)]


def test_link_down_without_link_up_lasts_to_the_end():
    windows = link_outages([down(("a", "b"), 4)], 12)
    assert windows == [{"link": ["a", "b"], "start": 4, "end": 12.0, "restored": False, "kind": "down"}]


def test_a_degraded_link_is_a_window_of_its_own_kind_until_restored():
    from testbed.results.flow_inputs import Fault

    def edge(action, t, rate=None):
        return Fault(at=t, applied_at=t, action=action, link=("a", "b"), rate=rate)

    faults = [
        edge("link-degrade", 2, 0.5),
        edge("link-degrade", 3, 0.25),
        edge("link-down", 4),
        edge("link-up", 5),
    ]
    faults.append(edge("link-restore", 9))
    assert [(w["kind"], w["start"], w["end"]) for w in link_outages(faults, 12)] == [
        ("degraded", 2, 9),  # the second degrade only changed the rate
        ("down", 4, 5),
    ]


def test_windows_of_several_links_and_repeated_edges():
    faults = [
        down(("a", "b"), 2),
        down(("a", "b"), 3),  # second down: no-op
        down(("c", "d"), 4),
        up(("a", "b"), 6),
        up(("x", "y"), 7),  # never down: no-op
        up(("c", "d"), 8),
    ]
    assert fault_windows(faults, 20) == [(2, 6), (4, 8)]


def test_no_faults_no_windows():
    assert fault_windows([], 10) == []


def test_fault_dataclasses_are_accepted_too():
    faults = [
        Fault(at=1, applied_at=1.1, action="link-down", link=("a", "b")),
        Fault(at=2, applied_at=2.2, action="link-up", link=("b", "a")),
    ]
    assert fault_windows(faults, 5) == [(1.1, 2.2)]


def test_periods_have_no_after_while_a_link_is_still_down():
    periods = fault_periods([down(("a", "b"), 2), up(("a", "b"), 4), down(("c", "d"), 6)], 10)
    assert periods.after is None and periods.last_up is None


# ------------------------------------------------------------ series helpers


def test_window_mean_takes_only_samples_fully_inside():
    t = times(3)
    values = [10.0] * 10 + [20.0] * 10 + [30.0] * 10
    assert window_mean(t, values, 1.0, 2.0) == pytest.approx(20.0)
    assert window_mean(t, values, 0.95, 2.0) == pytest.approx(20.0)  # (0.9, 1.0] sticks out


def test_window_mean_ignores_none_and_is_none_when_empty():
    t = times(2)
    values = [None] * 10 + [8.0] * 10
    assert window_mean(t, values, 0, 2) == pytest.approx(8.0)
    assert window_mean(t, values, 0, 1) is None
    assert window_mean(t, values, 5, 6) is None


def test_aggregate_sums_present_values_only():
    assert aggregate([[1.0, None, None], [2.0, 3.0]], 3) == [3.0, 3.0, None]


# ------------------------------------------------------------ compute_metrics


def two_host_drill():
    """h0 sends two 20 Mbit/s flows; the link under flow B fails 5 s..10 s.

    Flow B is silent from 5.0 to 10.3 (it needs 0.3 s after the link-up);
    h1 sends one 40 Mbit/s flow that the fault does not touch.
    """
    t = times(20)
    series = {
        "interval_s": DT,
        "t": t,
        "flows": {
            "h0->h2#1": rate(t, 20),
            "h0->h3#1": rate(t, 20, silent=[(5.0, 10.3)]),
            "h1->h2#1": rate(t, 40),
        },
    }
    flows = {
        "h0->h2#1": {"src": "h0", "dst": "h2"},
        "h0->h3#1": {"src": "h0", "dst": "h3"},
        "h1->h2#1": {"src": "h1", "dst": "h2"},
    }
    faults = [down(("t0", "a0"), 5.0), up(("t0", "a0"), 10.0)]
    fidelity = {
        "t0-a0": {"configured_mbit": 40, "achieved_mbit": 38},
        "t1-a0": {"configured_mbit": 40, "achieved_mbit": 39.6},
    }
    return compute_metrics(series, flows, faults, 20, fidelity)


def test_top_level_keys():
    m = two_host_drill()
    assert set(m) == {"flows", "hosts", "overall", "fidelity", "outages", "settings"}


def test_per_flow_metrics():
    m = two_host_drill()
    b = m["flows"]["h0->h3#1"]
    assert (b["src"], b["dst"]) == ("h0", "h3")
    assert b["max_silence_s"] == pytest.approx(5.3)
    assert b["mean_mbit"] == pytest.approx(20 * (200 - 53) / 200)
    assert m["flows"]["h0->h2#1"]["max_silence_s"] == 0


def test_host_with_one_of_two_flows_silent_halves_its_throughput():
    h0 = two_host_drill()["hosts"]["h0"]
    assert h0["flows"] == ["h0->h2#1", "h0->h3#1"]
    assert h0["before_mbit"] == pytest.approx(40)
    assert h0["during_mbit"] == pytest.approx(20)
    assert h0["after_mbit"] == pytest.approx(40)
    assert h0["fault_throughput_ratio"] == pytest.approx(0.5)
    assert h0["max_silence_s"] == pytest.approx(5.3)
    assert h0["recovery_s"] == pytest.approx(0.4)  # first full sample: (10.3, 10.4]


def test_unaffected_host_and_overall():
    m = two_host_drill()
    h1 = m["hosts"]["h1"]
    assert h1["fault_throughput_ratio"] == pytest.approx(1.0)
    assert h1["recovery_s"] == pytest.approx(0.1)  # already fine in the first sample
    overall = m["overall"]
    assert overall["before_mbit"] == pytest.approx(80)
    assert overall["during_mbit"] == pytest.approx(60)
    assert overall["fault_throughput_ratio"] == pytest.approx(0.75)
    assert overall["max_silence_s"] == pytest.approx(5.3)


def test_fidelity_is_min_over_links():
    fid = two_host_drill()["fidelity"]
    assert fid["links"]["t0-a0"]["fidelity"] == pytest.approx(0.95)
    assert fid["min"] == pytest.approx(0.95)


def test_fidelity_without_loaded_links_is_none():
    t = times(3)
    m = compute_metrics(
        {"interval_s": DT, "t": t, "flows": {"f": rate(t, 5)}}, {"f": {"src": "a", "dst": "b"}}, [], 3, {}
    )
    assert m["fidelity"] == {"links": {}, "min": None}
    m = compute_metrics(
        {"interval_s": DT, "t": t, "flows": {}},
        {},
        [],
        3,
        {"x": {"configured_mbit": 10, "achieved_mbit": None}},
    )
    assert m["fidelity"]["min"] is None


def test_no_faults_leaves_fault_metrics_empty():
    t = times(6)
    series = Series(DT, t, {"f": [5.0] * 10 + [40.0] * 50})  # slow first second
    m = compute_metrics(series, [Flow("f", "a", "b")], [], 6, {})
    host = m["hosts"]["a"]
    assert host["before_mbit"] == pytest.approx(40)  # warmup skipped
    assert host["during_mbit"] is None and host["after_mbit"] is None
    assert host["fault_throughput_ratio"] is None and host["recovery_s"] is None
    assert m["outages"] == []


def test_link_down_without_link_up():
    t = times(10)
    series = {"interval_s": DT, "t": t, "flows": {"f": rate(t, 40, silent=[(4, 10)])}}
    m = compute_metrics(series, [{"id": "f", "src": "a", "dst": "b"}], [down(("a", "t0"), 4)], 10, {})
    host = m["hosts"]["a"]
    assert host["during_mbit"] == pytest.approx(0)
    assert host["fault_throughput_ratio"] == pytest.approx(0)
    assert host["after_mbit"] is None and host["recovery_s"] is None
    assert host["max_silence_s"] == pytest.approx(6.0)


def test_settle_margin_hides_the_rerouting_transient():
    t = times(12)
    # A 0.5 s dip right after each edge; steady 30 Mbit/s on the backup path.
    values = [40.0 if ti <= 4 or ti > 9 else 30.0 for ti in t]
    values = [0.0 if (4 < ti <= 4.5) or (8 < ti <= 8.5) else v for ti, v in zip(t, values)]
    m = compute_metrics(
        {"interval_s": DT, "t": t, "flows": {"f": values}},
        {"f": {"src": "a", "dst": "b"}},
        [down(("a", "b"), 4), up(("a", "b"), 8)],
        12,
        {},
    )
    host = m["hosts"]["a"]
    assert host["during_mbit"] == pytest.approx(30)
    assert host["fault_throughput_ratio"] == pytest.approx(0.75)
    assert host["after_mbit"] == pytest.approx(40)  # samples (9, 12]
    assert host["recovery_s"] == pytest.approx(1.1)  # 40 again in (9.0, 9.1]


def test_late_and_short_flows_are_padded_with_none():
    t = times(10)
    series = {
        "interval_s": DT,
        "t": t,
        "flows": {"early": [10.0] * 100, "late": [None] * 30 + [10.0] * 40},
    }  # starts at 3 s, ends at 7 s
    m = compute_metrics(
        series, {"early": {"src": "a", "dst": "b"}, "late": {"src": "a", "dst": "c"}}, [], 10, {}
    )
    assert m["flows"]["late"]["mean_mbit"] == pytest.approx(10)
    assert m["flows"]["late"]["max_silence_s"] == 0
    assert m["hosts"]["a"]["mean_mbit"] == pytest.approx((10 * 60 + 20 * 40) / 100)


def test_flow_that_never_sends():
    t = times(5)
    series = {"interval_s": DT, "t": t, "flows": {"dead": [0.0] * 50, "none": []}}
    m = compute_metrics(
        series, {"dead": {"src": "a", "dst": "b"}, "none": {"src": "c", "dst": "d"}}, [], 5, {}
    )
    assert m["flows"]["dead"]["max_silence_s"] == pytest.approx(5.0)
    assert m["flows"]["dead"]["mean_mbit"] == 0
    assert m["flows"]["none"]["max_silence_s"] is None
    assert m["flows"]["none"]["mean_mbit"] is None
    assert m["hosts"]["c"]["max_silence_s"] is None
    assert m["hosts"]["a"]["before_mbit"] == 0


def test_flows_missing_from_the_flow_list_still_count_overall():
    t = times(3)
    m = compute_metrics({"interval_s": DT, "t": t, "flows": {"x": rate(t, 7)}}, [], [], 3, {})
    assert m["flows"]["x"]["src"] is None
    assert m["hosts"] == {}
    assert m["overall"]["mean_mbit"] == pytest.approx(7)


def test_parallel_links_have_their_own_outages():
    from testbed.results.flows import fault_windows

    faults = [
        {"at": 2, "applied_at": 2.0, "action": "link-down", "link": ["d0b0", "d1b0"], "index": 0},
        {"at": 4, "applied_at": 4.0, "action": "link-down", "link": ["d0b0", "d1b0"], "index": 1},
        {"at": 6, "applied_at": 6.0, "action": "link-up", "link": ["d1b0", "d0b0"], "index": 0},
        {"at": 8, "applied_at": 8.0, "action": "link-up", "link": ["d0b0", "d1b0"], "index": 1},
    ]
    assert sorted(fault_windows(faults, 10)) == [(2.0, 6.0), (4.0, 8.0)]


# ------------------------------------------------------------ recovery


def single_tor_drill(resume_at):
    """s0h0's one 40 Mbit/s flow over a 30 s run; its only link is down from
    5 s to 15 s and the flow is silent until `resume_at` (None: never)."""
    t = times(30)
    silent_until = 30 if resume_at is None else resume_at
    series = {"interval_s": DT, "t": t, "flows": {"f": rate(t, 40, silent=[(5, silent_until)])}}
    return compute_metrics(
        series,
        {"f": {"src": "s0h0", "dst": "s1h0"}},
        [down(("s0h0", "t0"), 5), up(("s0h0", "t0"), 15)],
        30,
        {},
    )


def test_traffic_back_after_the_back_off_has_recovered():
    host = single_tor_drill(resume_at=24.2)["hosts"]["s0h0"]
    assert host["recovered_throughput_ratio"] == pytest.approx(1.0)  # last 5 s: (25, 30]
    assert host["max_silence_s"] == pytest.approx(19.2)


def test_a_host_never_routed_back_has_not_recovered():
    m = single_tor_drill(resume_at=None)
    host = m["hosts"]["s0h0"]
    assert host["recovered_throughput_ratio"] == 0
    # a stall-only check would have passed this run
    assert host["max_silence_s"] >= 9 and host["fault_throughput_ratio"] == 0
    [r] = evaluate([{"metric": "recovered_throughput_ratio", "host": "s0h0", "min": 0.5}], m, True)
    assert r["status"] == "failed" and "below 0.5" in r["reason"]


def test_a_late_resume_counts_only_the_share_of_the_window_it_delivered():
    host = single_tor_drill(resume_at=27.0)["hosts"]["s0h0"]
    assert host["recovered_throughput_ratio"] == pytest.approx(3 / 5)


def test_no_recovery_ratio_without_a_link_up_or_a_baseline():
    t = times(10)
    series = {"interval_s": DT, "t": t, "flows": {"f": rate(t, 40, silent=[(4, 10)])}}
    m = compute_metrics(series, [{"id": "f", "src": "a", "dst": "b"}], [down(("a", "t0"), 4)], 10, {})
    assert m["hosts"]["a"]["recovered_throughput_ratio"] is None
    # the window never reaches back into the settle margin after the link-up
    t = times(16)
    series = {"interval_s": DT, "t": t, "flows": {"f": rate(t, 40, silent=[(5, 15.5)])}}
    m = compute_metrics(
        series, [{"id": "f", "src": "a", "dst": "b"}], [down(("a", "t0"), 5), up(("a", "t0"), 15)], 16, {}
    )
    assert m["hosts"]["a"]["recovered_throughput_ratio"] is None
