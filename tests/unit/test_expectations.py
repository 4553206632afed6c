"""Expectations: bounds, missing measurements, untrustworthy runs."""

import pytest
from entries import evaluate

from testbed.results.expectations import all_passed, expected_text
from testbed.results.trust import is_trustworthy

METRICS = {
    "flows": {},
    "hosts": {
        "h0": {
            "flows": ["h0->h2#1"],
            "mean_mbit": 39.5,
            "max_silence_s": 0.3,
            "fault_throughput_ratio": 0.52,
        },
        "h1": {
            "flows": ["h1->h2#1"],
            "mean_mbit": 20.0,
            "max_silence_s": 5.3,
            "fault_throughput_ratio": None,
        },
    },
    "overall": {"mean_mbit": 59.5, "max_silence_s": 5.3, "fault_throughput_ratio": 0.75},
    "fidelity": {"links": {}, "min": 0.97},
}


def one(item, metrics=METRICS, trustworthy=True):
    [result] = evaluate([item], metrics, trustworthy)
    return result


def test_expected_text():
    assert expected_text(0.45, None) == ">= 0.45"
    assert expected_text(None, 1.0) == "<= 1"
    assert expected_text(9, 11) == "in [9, 11]"
    assert expected_text(None, None) == "any value"


def test_min_bound_passes():
    r = one({"name": "keeps half", "metric": "fault_throughput_ratio", "host": "h0", "min": 0.45})
    assert r["passed"] is True and r["status"] == "passed"
    assert r["measured"] == pytest.approx(0.52)
    assert r["expected"] == ">= 0.45"
    assert r["trustworthy"] is True and r["reason"] is None
    assert (r["name"], r["metric"], r["host"]) == ("keeps half", "fault_throughput_ratio", "h0")


def test_max_bound_fails_with_reason():
    r = one({"name": "no long stall", "metric": "max_silence_s", "host": "h1", "max": 1.0})
    assert r["passed"] is False and r["status"] == "failed"
    assert r["measured"] == pytest.approx(5.3)
    assert "above" in r["reason"]


def test_range_and_inclusive_bounds():
    assert one({"name": "m", "metric": "mean_throughput_mbit", "host": "h1", "min": 20, "max": 20})["passed"]
    r = one({"name": "m", "metric": "mean_throughput_mbit", "min": 9, "max": 11})
    assert r["expected"] == "in [9, 11]" and not r["passed"]
    assert r["measured"] == pytest.approx(59.5)  # no host: overall value


def test_overall_ratio_without_host():
    r = one({"name": "fabric keeps 3/4", "metric": "fault_throughput_ratio", "min": 0.7})
    assert r["host"] is None and r["passed"]
    assert r["measured"] == pytest.approx(0.75)


def test_missing_measurement_fails_with_reason():
    r = one({"name": "ratio", "metric": "fault_throughput_ratio", "host": "h1", "min": 0.1})
    assert r["measured"] is None and not r["passed"] and r["status"] == "failed"
    assert "not measured" in r["reason"]


def test_unknown_host_and_unknown_metric_fail():
    r = one({"name": "x", "metric": "max_silence_s", "host": "nobody", "max": 1})
    assert not r["passed"] and "nobody" in r["reason"]
    r = one({"name": "y", "metric": "jitter_ms", "max": 1})
    assert not r["passed"] and "unknown metric" in r["reason"]


def test_fidelity_metric():
    assert one({"name": "faithful", "metric": "fidelity", "min": 0.9})["passed"]
    r = one({"name": "faithful", "metric": "fidelity", "host": "h0", "min": 0.9})
    assert not r["passed"] and "per link" in r["reason"]
    no_links = dict(METRICS, fidelity={"links": {}, "min": None})
    assert not one({"name": "f", "metric": "fidelity", "min": 0.9}, no_links)["passed"]


def test_untrustworthy_run_never_passes():
    results = evaluate(
        [
            {"name": "good", "metric": "fault_throughput_ratio", "host": "h0", "min": 0.45},
            {"name": "bad", "metric": "max_silence_s", "host": "h1", "max": 1.0},
        ],
        METRICS,
        trustworthy=False,
    )
    assert [r["status"] for r in results] == ["untrustworthy", "untrustworthy"]
    assert all(r["passed"] is False and r["trustworthy"] is False for r in results)
    assert "would pass" in results[0]["reason"]
    assert results[0]["measured"] == pytest.approx(0.52)  # still reported
    assert not all_passed(results)


def test_all_passed_and_trust():
    assert all_passed([{"passed": True}, {"passed": True}])
    assert not all_passed([{"passed": True}, {"passed": False}])
    assert all_passed([])  # nothing expected: nothing failed
    assert evaluate([], METRICS, True) == []
    assert is_trustworthy(0.95) and is_trustworthy(0.9)
    assert not is_trustworthy(0.89) and not is_trustworthy(None)


def test_name_defaults_to_what_is_bounded():
    assert one({"metric": "max_silence_s", "max": 10})["name"] == "max_silence_s <= 10"
