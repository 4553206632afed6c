"""Report files: results.json, summary.md, throughput.png, side-by-side text."""
import json
import math
import os

import pytest

from testbed.expectations import evaluate
from testbed.metrics import compute_metrics
from testbed.report import (fmt, jsonable, load_results, plot_throughput,
                            render_side_by_side, write_results)

DT = 0.1
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def drill(scenario="dual-tor-failover", achieved=39.0):
    """A complete results dict as the runner would assemble it."""
    t = [round((i + 1) * DT, 6) for i in range(150)]
    flows = {"h0->h2#1": [20.0] * 150,
             "h0->h3#1": [0.0 if 5 < ti <= 9.2 else 20.0 for ti in t],
             "h1->h2#1": [None] * 20 + [40.0] * 130}
    info = {"h0->h2#1": {"src": "h0", "dst": "h2"},
            "h0->h3#1": {"src": "h0", "dst": "h3"},
            "h1->h2#1": {"src": "h1", "dst": "h2"}}
    faults = [{"at": 5.0, "applied_at": 5.013, "action": "link-down", "link": ["h0", "t0a"]},
              {"at": 9.0, "applied_at": 9.021, "action": "link-up", "link": ["h0", "t0a"]}]
    series = {"interval_s": DT, "t": t, "flows": flows, "flow_info": info}
    fidelity = {"t0a~a0": {"configured_mbit": 40.0, "achieved_mbit": achieved}}
    metrics = compute_metrics(series, info, faults, 15, fidelity)
    trustworthy = metrics["fidelity"]["min"] >= 0.9
    expectations = evaluate([
        {"name": "h0 keeps half", "metric": "fault_throughput_ratio", "host": "h0", "min": 0.45},
        {"name": "h1 never stalls", "metric": "max_silence_s", "host": "h1", "max": 1.0},
    ], metrics, trustworthy)
    return {"scenario": scenario, "description": "Fail one uplink of a dual-homed host.",
            "scenario_file": "scenarios/dual-tor-failover.yaml",
            "started": "2025-01-01T12:00:00+00:00", "duration_s": 15,
            "passed": trustworthy and all(e["passed"] for e in expectations),
            "trustworthy": trustworthy,
            "fabric": {"kind": "hpn", "datapath": "kernel", "hosts": 4, "switches": 6,
                       "links": 16},
            "expectations": expectations, "metrics": metrics, "faults": faults,
            "series": series, "files": {"summary": "summary.md", "plot": "throughput.png"}}


def test_results_json_round_trips(tmp_path):
    paths = write_results(str(tmp_path), drill())
    data = json.loads((tmp_path / "results.json").read_text())
    for key in ("passed", "expectations", "metrics", "faults", "series"):
        assert key in data
    assert data["passed"] is True
    assert data["metrics"]["hosts"]["h0"]["fault_throughput_ratio"] == pytest.approx(0.5)
    assert load_results(str(tmp_path)) == data
    assert paths == {"results": str(tmp_path / "results.json"),
                     "summary": str(tmp_path / "summary.md")}
    # the atomic write leaves no temporary files behind
    assert sorted(os.listdir(tmp_path)) == ["results.json", "summary.md"]


def test_summary_of_a_passing_run(tmp_path):
    write_results(str(tmp_path), drill())
    text = (tmp_path / "summary.md").read_text()
    assert text.startswith("# Drill: dual-tor-failover")
    assert "## Result: PASSED - 2/2 expectations met" in text
    assert "Fail one uplink of a dual-homed host." in text
    assert "| h0 keeps half | fault_throughput_ratio | h0 | >= 0.45 | 0.5 | PASSED |" in text
    assert "| link-down | h0 - t0a | 5 | 5.01 | 13 |" in text      # scheduled, applied, lag
    assert "h1->h2#1" in text and "WARNING" not in text
    assert "| kind | hpn |" in text and "| datapath | kernel |" in text
    assert "![throughput](throughput.png)" in text


def test_summary_warns_loudly_when_untrustworthy(tmp_path):
    write_results(str(tmp_path), drill(achieved=28.0))
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["passed"] is False
    assert all(e["status"] == "untrustworthy" for e in data["expectations"])
    text = (tmp_path / "summary.md").read_text()
    assert "## Result: FAILED (untrustworthy run)" in text
    assert "WARNING: LOW EMULATION FIDELITY" in text
    assert "NOT TRUSTWORTHY" in text
    assert "0.7" in text


def test_write_results_survives_sparse_results(tmp_path):
    results = {"scenario": None, "passed": False, "trustworthy": None,
               "expectations": [{"name": "x", "metric": "max_silence_s", "host": None,
                                 "expected": "<= 1", "measured": None, "passed": False,
                                 "status": "failed", "reason": "not measured"}],
               "metrics": {"hosts": {"h0": {"flows": [], "before_mbit": None}},
                           "overall": {}, "fidelity": {"links": {}, "min": None}},
               "faults": [{"at": 1, "applied_at": None, "action": "link-down",
                           "link": ["a", "b"]}],
               "fabric": None, "series": None, "bad": float("nan")}
    write_results(str(tmp_path / "new" / "dir"), results)
    data = json.loads((tmp_path / "new" / "dir" / "results.json").read_text())
    assert data["bad"] is None
    text = (tmp_path / "new" / "dir" / "summary.md").read_text()
    assert "FAILED" in text and "| x |" in text


def test_plot_is_a_real_png(tmp_path):
    results = drill()
    path = plot_throughput(str(tmp_path), results["series"], results["faults"],
                           "dual-tor-failover")
    assert path == str(tmp_path / "throughput.png")
    data = (tmp_path / "throughput.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 5 * 1024


def test_plot_without_faults_and_with_open_outage(tmp_path):
    series = {"interval_s": DT, "t": [0.1, 0.2, 0.3], "flows": {"a->b#1": [1.0, None, 3.0]}}
    assert os.path.exists(plot_throughput(str(tmp_path / "p1"), series, [], "no faults"))
    down = [{"at": 0.15, "applied_at": 0.16, "action": "link-down", "link": ["a", "t0"]}]
    assert os.path.exists(plot_throughput(str(tmp_path / "p2"), series, down, "open"))


def test_side_by_side_lists_every_run_and_host():
    text = render_side_by_side([drill("dual-tor"), drill("single-tor", achieved=28.0)])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["scenario", "result", "host"]
    assert any(line.startswith("dual-tor ") and "PASSED" in line for line in lines)
    assert any(line.startswith("single-tor ") and "UNTRUSTWORTHY" in line for line in lines)
    assert sum(1 for line in lines if " h0 " in line) == 2
    assert sum(1 for line in lines if "(all)" in line) == 2


def test_fmt_and_jsonable():
    assert fmt(None) == "-"
    assert fmt(0.52345) == "0.523"
    assert fmt(39.87) == "39.9"
    assert fmt(1234.6) == "1235"
    assert fmt(float("inf")) == "-"
    assert jsonable({"x": (1, math.nan), 2: {"y": float("-inf")}}) == {"x": [1, None],
                                                                       "2": {"y": None}}
