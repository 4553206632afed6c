"""Report files: results.json, summary.md, throughput.png, side-by-side text."""

import json
import math
import os

import pytest

from testbed.fabric.records import Expectation
from testbed.results.compare import render_side_by_side, side_by_side_data
from testbed.results.emulator import fold_generators, generator_metrics
from testbed.results.findings import findings
from testbed.results.flows import compute_metrics
from testbed.results.judge import judge
from testbed.results.plots import plot_iterations, plot_throughput
from testbed.results.store import jsonable, load_results, write_results
from testbed.results.text import fmt, listed
from testbed.results.verdicts import verdict

DT = 0.1
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def drill(scenario="dual-tor-failover", achieved=39.0):
    """A complete results dict as the runner would assemble it."""
    t = [round((i + 1) * DT, 6) for i in range(150)]
    flows = {
        "h0->h2#1": [20.0] * 150,
        "h0->h3#1": [0.0 if 5 < ti <= 9.2 else 20.0 for ti in t],
        "h1->h2#1": [None] * 20 + [40.0] * 130,
    }
    info = {
        "h0->h2#1": {"src": "h0", "dst": "h2"},
        "h0->h3#1": {"src": "h0", "dst": "h3"},
        "h1->h2#1": {"src": "h1", "dst": "h2"},
    }
    faults = [
        {"at": 5.0, "applied_at": 5.013, "action": "link-down", "link": ["h0", "t0a"]},
        {"at": 9.0, "applied_at": 9.021, "action": "link-up", "link": ["h0", "t0a"]},
    ]
    series = {"interval_s": DT, "t": t, "flows": flows, "flow_info": info}
    fidelity = {"t0a~a0": {"configured_mbit": 40.0, "achieved_mbit": achieved}}
    metrics = compute_metrics(series, info, faults, 15, fidelity)
    return judged(results_of(scenario, metrics, faults, series))


def results_of(scenario, metrics, faults, series):
    return {
        "scenario": scenario,
        "description": "Fail one uplink of a dual-homed host.",
        "scenario_file": "scenarios/dual-tor-failover.yaml",
        "started": "2025-01-01T12:00:00+00:00",
        "duration_s": 15,
        "fabric": {"kind": "hpn", "datapath": "kernel", "hosts": 4, "switches": 6, "links": 16},
        "metrics": metrics,
        "faults": faults,
        "series": series,
        "files": {"summary": "summary.md", "plot": "throughput.png"},
    }


def judged(results):
    """Judge the drill with the runner's own verdict step."""
    expect = [
        Expectation.from_entry(e)
        for e in (
            {"name": "h0 keeps half", "metric": "fault_throughput_ratio", "host": "h0", "min": 0.45},
            {"name": "h1 never stalls", "metric": "max_silence_s", "host": "h1", "max": 1.0},
        )
    ]
    return dict(results, **judge(results["metrics"], results["faults"], expect, problems=[]))


def test_results_json_round_trips(tmp_path):
    paths = write_results(str(tmp_path), drill())
    data = json.loads((tmp_path / "results.json").read_text())
    for key in ("passed", "expectations", "metrics", "faults", "series"):
        assert key in data
    assert data["passed"] is True
    assert data["metrics"]["hosts"]["h0"]["fault_throughput_ratio"] == pytest.approx(0.5)
    assert load_results(str(tmp_path)) == data
    assert paths == {"results": str(tmp_path / "results.json"), "summary": str(tmp_path / "summary.md")}
    # the atomic write leaves no temporary files behind
    assert sorted(os.listdir(tmp_path)) == ["results.json", "summary.md"]


def test_summary_of_a_passing_run(tmp_path):
    write_results(str(tmp_path), drill())
    text = (tmp_path / "summary.md").read_text()
    assert text.startswith("# Drill: dual-tor-failover")
    assert "## Result: PASSED - 2/2 expectations met" in text
    assert "Fail one uplink of a dual-homed host." in text
    assert "| h0 keeps half | fault_throughput_ratio | h0 | >= 0.45 | 0.5 | PASSED |" in text
    assert "| link-down | h0 - t0a | 5 | 5.01 | 13 |" in text  # scheduled, applied, lag
    assert "h1->h2#1" in text and "WARNING" not in text
    assert "| kind | hpn |" in text and "| datapath | kernel |" in text
    assert "![throughput](throughput.png)" in text


def test_summary_warns_loudly_when_untrustworthy(tmp_path):
    write_results(str(tmp_path), drill(achieved=28.0))
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["passed"] is False
    assert all(e["status"] == "untrustworthy" for e in data["expectations"])
    text = (tmp_path / "summary.md").read_text()
    assert "## Result: UNTRUSTWORTHY - none of the 2 expectations judged" in text
    headline = next(line for line in text.splitlines() if line.startswith("## Result"))
    assert "FAILED" not in headline  # as the terminal and the exit status say: not judged
    assert "WARNING: THE EMULATION DID NOT HOLD" in text
    assert "NOT TRUSTWORTHY" in text
    # the failed measurement is named, with the egress that broke its promise
    assert (
        "> - link_fidelity: egress t0a~a0 delivered 0.7 of the bytes it owed while packets waited"
    ) in text
    assert "| link_fidelity |" in text and "| FAILED |" in text


def test_write_results_survives_sparse_results(tmp_path):
    results = {
        "scenario": None,
        "passed": False,
        "trustworthy": None,
        "expectations": [
            {
                "name": "x",
                "metric": "max_silence_s",
                "host": None,
                "expected": "<= 1",
                "measured": None,
                "passed": False,
                "status": "failed",
                "reason": "not measured",
            }
        ],
        "metrics": {
            "hosts": {"h0": {"flows": [], "before_mbit": None}},
            "overall": {},
            "fidelity": {"links": {}, "min": None},
        },
        "faults": [{"at": 1, "applied_at": None, "action": "link-down", "link": ["a", "b"]}],
        "fabric": None,
        "series": None,
        "bad": float("nan"),
    }
    write_results(str(tmp_path / "new" / "dir"), results)
    data = json.loads((tmp_path / "new" / "dir" / "results.json").read_text())
    assert data["bad"] is None
    text = (tmp_path / "new" / "dir" / "summary.md").read_text()
    assert "FAILED" in text and "| x |" in text


def test_plot_is_a_real_png(tmp_path):
    results = drill()
    path = plot_throughput(str(tmp_path), results["series"], results["faults"], "dual-tor-failover")
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
    assert jsonable({"x": (1, math.nan), 2: {"y": float("-inf")}}) == {"x": [1, None], "2": {"y": None}}


def agent_results(on_time=0.98, missing=()):
    """Four agents with two NIC ports each; port h2-p1 was on time `on_time`
    of the time it had packets ready, every other port all of it."""
    out = {}
    for h in ("h0", "h1", "h2", "h3"):
        ports = {f"{h}-p{k}": {"tx_s": 2.0, "lost_s": 0.0, "packets": 3472} for k in (0, 1)}
        if h == "h2":
            ports["h2-p1"]["lost_s"] = 2.0 * (1 / on_time - 1)
        out[h] = (
            None
            if h in missing
            else {
                "host": h,
                "jobs": [{"packets_sent": 6944}],
                "pacing": {
                    "late_packets": 1739 if h == "h0" else 0,
                    "max_lag_s": 0.0238 if h == "h0" else 0.001,
                    "lost_s": sum(p["lost_s"] for p in ports.values()),
                    "tx_s": 4.0,
                    "ports": ports,
                },
            }
        )
    return out


def job_drill(flows=True, on_time=0.98, missing=()):
    """drill() plus one ring job that slowed down while h0's uplink was down,
    as the runner adds it; flows=False: a drill with jobs and no iperf3."""
    results = drill("ring-failover")
    if not flows:
        series = {**results["series"], "flows": {}, "flow_info": {}}
        fidelity = {"t0a~a0": {"configured_mbit": 40.0, "achieved_mbit": 39.0}}
        results["metrics"] = compute_metrics(series, {}, results["faults"], 15, fidelity)
        results["series"] = series
    times = [0.9] + [0.6] * 6 + [1.5] * 3 + [0.6] * 5
    ends = [round(sum(times[: i + 1]), 4) for i in range(len(times))]
    metrics = results["metrics"]
    metrics["jobs"] = {
        "ring4": {
            "ranks": 4,
            "collective": "ring",
            "bytes_per_iteration": 1000000,
            "iterations_planned": 15,
            "iterations_completed": 15,
            "iteration_times_s": times,
            "iteration_ends_s": ends,
            "iteration_time_s": 0.8429,
            "iteration_time_p50_s": 0.6,
            "iteration_time_p99_s": 1.5,
            "job_completion_s": ends[-1],
            "analytical_iteration_s": 0.5549,
            "iteration_time_vs_analytical": 1.519,
            "bytes_sent": 45000000,
            "bytes_received": 44990000,
            "bytes_per_rank_expected": 750000,
            "bytes_per_rank_ratio": 0.9987,
            "retransmissions": 12,
            "timeouts": 1,
            "cnps": 3,
            "ce_marks": 5,
            "gpu_utilization": 0.3172,
            "stalled_iterations": 0,
            "iteration_before_s": 0.6,
            "iteration_during_s": 1.5,
            "iteration_after_s": 0.6,
        }
    }
    metrics["gpu_utilization"] = 0.3172
    metrics["generators"] = generator_metrics(agent_results(on_time, missing))
    fold_generators(metrics["fidelity"], metrics["generators"])
    metrics["host_cpu"] = {"mean_busy": 0.137, "saturated_share": 0.05}
    metrics["dci_bytes"] = 0
    results["files"]["iterations"] = "iterations.png"
    return judged(results)


def headings(text):
    return [line for line in text.splitlines() if line.startswith("## ")]


def test_summary_shows_training_jobs(tmp_path):
    write_results(str(tmp_path), job_drill())
    text = (tmp_path / "summary.md").read_text()
    assert "## Training jobs" in text
    # collective, ranks, done/planned, mean, p50, p99, analytical, ratio, completion,
    # bytes expected and worst ratio, retransmissions, timeouts, GPU util, stalled
    assert (
        "| ring4 | ring | 4 | 15/15 | 0.843 | 0.6 | 1.5 | 0.555 | 1.52 | 12 | 750000 "
        "| 0.999 | 12 | 1 | 32% | 0 |"
    ) in text
    assert "| ring4 | 0.6 | 1.5 | 0.6 | 2.5 |" in text  # before, during, after
    assert "weighted by GPUs): **32%**" in text
    assert "DC interconnect: 0." in text
    assert "![iterations](iterations.png)" in text
    # the job section sits between the fault timeline and the flow tables
    assert headings(text).index("## Training jobs") == headings(text).index("## Fault timeline") + 1
    trust = text.split("## Trust")[1]
    assert "27776 packets sent, 1739 late, max lag 0.0238 s" in trust
    assert "the worst port was on time **0.98** of the time it had packets ready (h2 h2-p1)" in trust
    assert "| h2 | h2-p1 | 2 | 0.0408 | 0.98 | yes |" in trust
    assert "Host CPU: 14% busy on average" in trust and "5% of the samples" in trust
    assert "| generator_fidelity |" in trust and "| emulator_loss |" in trust
    assert "FAILED" not in trust
    assert "WARNING" not in text
    assert "h1->h2#1" in text  # the iperf3 flows are still reported


def test_summary_warns_when_generators_fall_behind(tmp_path):
    results = job_drill(on_time=0.7, missing=["h3"])
    write_results(str(tmp_path), results)
    text = (tmp_path / "summary.md").read_text()
    assert "WARNING: THE EMULATION DID NOT HOLD" in text
    assert (
        "> - generator_fidelity: the agent on h2, port h2-p1, kept to its line-rate pacing "
        "only 0.7 of the time it had packets ready"
    ) in text
    assert "> - agent_results: no results from the traffic agents on h3" in text
    assert "no results from h3" in text.split("## Trust")[1]


def test_summary_of_jobs_without_iperf3_flows(tmp_path):
    results = job_drill(flows=False)
    del results["metrics"]["jobs"]["ring4"]["iteration_before_s"]
    write_results(str(tmp_path), results)
    text = (tmp_path / "summary.md").read_text()
    hosts = text.split("## Per-host throughput")[1].split("## ")[0]
    flows = text.split("## Per-flow")[1].split("## ")[0]
    assert hosts.strip() == flows.strip() == "No iperf3 flows in this drill."
    assert "| ring4 | ring | 4 | 15/15 |" in text


def test_iterations_plot(tmp_path):
    path = plot_iterations(str(tmp_path), job_drill())
    assert path == str(tmp_path / "iterations.png")
    data = (tmp_path / "iterations.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 5 * 1024
    # a job that completed nothing still gets its analytical line, and no crash
    results = job_drill(flows=False)
    job = results["metrics"]["jobs"]["ring4"]
    job.update(iteration_times_s=[], iteration_ends_s=[], iterations_completed=0)
    results["faults"] = []
    assert os.path.exists(plot_iterations(str(tmp_path / "empty"), results))


def test_no_jobs_no_iterations_plot_and_same_sections(tmp_path):
    results = drill()
    assert plot_iterations(str(tmp_path), results) is None
    assert not (tmp_path / "iterations.png").exists()
    write_results(str(tmp_path), results)
    text = (tmp_path / "summary.md").read_text()
    assert headings(text) == [
        "## Result: PASSED - 2/2 expectations met",
        "## Expectations",
        "## Fault timeline",
        "## Per-host throughput",
        "## Per-flow",
        "## Trust",
        "## Fabric",
    ]
    assert "iperf3" not in text and "generators" not in text and "Host CPU" not in text
    assert "| source host | flows |" in text


def test_side_by_side_lists_jobs():
    text = render_side_by_side([job_drill(), drill("dual-tor")])
    lines = text.splitlines()
    assert sum(1 for line in lines if "(all)" in line) == 2  # the flow table stays
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["scenario", "job"])
    header = ["scenario", "job", "iters", "iter_s", "p99_s", "jct_s", "gpu_util", "retx", "stalled"]
    assert lines[head].split() == header
    assert lines[head + 2].split() == ["ring-failover", "ring4", "15", "0.843", "1.5", "12", "32%", "12", "0"]
    assert "(all GPUs)" not in text  # one job: its utilization is the aggregate
    assert "iter_s" not in render_side_by_side([drill("dual-tor")])


def test_side_by_side_sets_policies_against_the_first():
    """Several jobs per run: an aggregate row each, the completion time a
    drill did not reach projected with "~", and each later run's aggregate
    utilization as a change against the first run's."""
    runs = []
    for name, util, done in (("shared", 0.35, None), ("crux", 0.434, 12.0)):
        results = job_drill()
        results["scenario"] = name
        ring = results["metrics"]["jobs"]["ring4"]
        ring["job_completion_s"] = done
        results["metrics"]["jobs"]["other"] = {**ring, "iterations_planned": 100, "job_completion_s": None}
        results["metrics"]["gpu_utilization"] = util
        runs.append(results)
    lines = render_side_by_side(runs).splitlines()
    assert [line.split()[-1] for line in lines if "(all GPUs)" in line] == ["35%", "43%"]
    # the job column and the completion time, counted from the row's end
    jct = [
        line.split()[-4]
        for line in lines
        if len(line.split()) >= 8 and line.split()[-8] in ("ring4", "other")
    ]
    assert jct == ["~12.6", "~84.3", "12", "~84.3"]
    assert lines[-1] == "crux: aggregate GPU utilization +24.0% against shared"
    data = side_by_side_data(runs)
    assert [d["scenario"] for d in data] == ["shared", "crux"]
    assert data[1]["gpu_utilization_vs_first"] == pytest.approx(0.434 / 0.35 - 1)
    assert data[1]["jobs"]["ring4"]["job_completion_s"] == 12.0
    assert data[0]["jobs"]["other"]["job_completion_s"] is None


def test_summary_locates_loss_and_names_what_the_emulator_lost(tmp_path):
    results = job_drill()
    job = results["metrics"]["jobs"]["ring4"]
    job["gaps_seen"] = 2
    job["gap_events"] = [
        {"t": 1.2345, "from": "h1", "to": "h2", "iter": 1, "expected_psn": 17, "got_psn": 19}
    ]
    results["metrics"]["queue_drops"] = {"t0a~a0 (t0a-e2 egress)": 6}
    results["metrics"]["fidelity"]["unexplained_loss"] = {
        "gaps_seen": {"ring4": 2},
        "note": "the emulator lost them",
    }
    write_results(str(tmp_path), results)
    text = (tmp_path / "summary.md").read_text()
    assert "Packet gaps seen by the receivers of ring4 (2 in all; first 1)" in text
    assert "- 1.23 s: h1 -> h2, iteration 1, expected PSN 17, got 19" in text
    trust = text.split("## Trust")[1]
    assert "Packets dropped by modeled queues: t0a~a0 (t0a-e2 egress) 6." in trust
    assert "**Loss outside the modeled network:** the emulator lost them (ring4: 2 gaps)." in trust


def test_summary_of_a_clean_run_mentions_no_gaps_or_drops(tmp_path):
    write_results(str(tmp_path), job_drill())
    text = (tmp_path / "summary.md").read_text()
    assert "Packet gaps" not in text and "dropped by modeled queues" not in text
    assert "Loss outside" not in text


def test_summary_says_when_a_drill_ended_with_its_last_job(tmp_path):
    results = job_drill(flows=False)
    results["duration_s"], results["duration_planned_s"] = 5.2, 30
    write_results(str(tmp_path), results)
    text = (tmp_path / "summary.md").read_text()
    assert "| traffic duration (s) | 5.2 (of 30 planned: every job had finished) |" in text


def test_run_json_gives_the_verdict_and_what_was_found():
    from testbed.cli.drill import outcome_data

    data = outcome_data(drill("dual-tor"), "results/x")
    assert data["verdict"] == verdict(drill("dual-tor")) and data["report"] == "results/x"
    assert data["findings"] == findings(drill("dual-tor"))
    assert [e["name"] for e in data["expectations"]] == [e["name"] for e in drill("dual-tor")["expectations"]]
    json.dumps(data)  # what a script reads


def test_trust_checks_with_nothing_to_judge_go_on_one_line():
    from testbed.results.markdown import section_trust

    results = drill("dual-tor")
    results["trust"] = {
        "checks": [
            {"name": "fault_lag", "measures": "lag", "value": 0.01, "expected": "<= 0.1", "ok": True},
            {"name": "pause_daemon", "measures": "pauses", "ok": None, "note": "no lossless class"},
        ]
    }
    text = section_trust(results)
    assert "| fault_lag |" in text and "not judged |" not in text
    assert "Not judged in this run: pause_daemon (no lossless class)." in text


def test_a_failed_switch_is_one_mark_on_the_plots_not_six():
    from testbed.results.plots import fault_marks

    downs = [
        {"at": 5.0, "applied_at": 5.01 + i / 1000, "action": "link-down", "link": ["t0r0k0", h]}
        for i, h in enumerate(["s0h0", "s0h1", "a0n0"])
    ]
    named = {"at": 9.0, "applied_at": 9.0, "action": "link-down", "link": ["s1h0", "t1r0k0"], "name": "cut"}
    up = {"at": 15.0, "applied_at": 15.02, "action": "link-up", "link": ["s0h0", "t0r0k0"]}
    assert fault_marks([*downs, named, up]) == [
        (5.01, "red", "down 3 links"),
        (9.0, "red", "down cut"),
        (15.02, "green", "up s0h0-t0r0k0"),
    ]


def test_a_degraded_link_is_marked_with_its_share_and_shaded_apart_from_outages():
    from testbed.results.plots import fault_marks, outage_spans

    faults = [
        {"at": 5.0, "applied_at": 5.0, "action": "link-degrade", "link": ["s0h0", "t0r0k0"], "rate": 0.25},
        {"at": 8.0, "applied_at": 8.0, "action": "link-down", "link": ["s1h0", "t1r0k0"]},
        {"at": 9.0, "applied_at": 9.0, "action": "link-up", "link": ["s1h0", "t1r0k0"]},
        {"at": 15.0, "applied_at": 15.0, "action": "link-restore", "link": ["s0h0", "t0r0k0"], "rate": 1.0},
    ]
    assert fault_marks(faults)[0] == (5.0, "darkorange", "degrade s0h0-t0r0k0 to 25%")
    assert fault_marks(faults)[-1] == (15.0, "green", "restore s0h0-t0r0k0")
    assert outage_spans(faults, 25.0, "degraded") == [(5.0, 15.0)]
    assert outage_spans(faults, 25.0) == [(8.0, 9.0)]


def test_overlapping_outages_shade_as_one_span():
    from testbed.results.plots import outage_spans

    faults = [
        {"at": 5.0, "applied_at": 5.0, "action": "link-down", "link": ["t0r0k0", "s0h0"]},
        {"at": 5.0, "applied_at": 5.01, "action": "link-down", "link": ["t0r0k0", "a0n0"]},
        {"at": 9.0, "applied_at": 9.0, "action": "link-up", "link": ["t0r0k0", "s0h0"]},
        {"at": 12.0, "applied_at": 12.0, "action": "link-down", "link": ["s1h0", "t1r0k0"]},
        {"at": 13.0, "applied_at": 13.0, "action": "link-up", "link": ["s1h0", "t1r0k0"]},
    ]
    assert outage_spans(faults, 20.0) == [(5.0, 20.0)]  # a0n0's link never came back
    assert outage_spans(faults[:1] + faults[2:], 20.0) == [(5.0, 9.0), (12.0, 13.0)]


def test_compare_draws_runs_on_one_pair_of_axes(tmp_path, capsys):
    from testbed.cli import main
    from testbed.results.overlay import overlay_png

    dual, single = drill("dual"), drill("single")
    assert overlay_png([("a", dual), ("b", single)]).startswith(PNG_SIGNATURE)
    jobs_only = {
        "scenario": "ring",
        "faults": [],
        "series": {"interval_s": DT, "t": [], "flows": {}, "flow_info": {}},
        "metrics": {
            "jobs": {"ring8": {"iteration_ends_s": [1.0, 2.1, 3.3], "iteration_times_s": [1.0, 1.1, 1.2]}}
        },
    }
    assert overlay_png([("c", jobs_only)]).startswith(PNG_SIGNATURE)
    for name, res in (("dual", dual), ("single", single)):
        write_results(str(tmp_path / name), res)
    picture = tmp_path / "both.png"
    assert main(["compare", str(tmp_path / "dual"), str(tmp_path / "single"), "--plot", str(picture)]) == 0
    assert picture.read_bytes().startswith(PNG_SIGNATURE) and f"plot: {picture}" in capsys.readouterr().out
    (tmp_path / "link.png").symlink_to(tmp_path / "elsewhere.png")
    assert main(["compare", str(tmp_path / "dual"), "--plot", str(tmp_path / "link.png")]) == 2
    assert not (tmp_path / "elsewhere.png").exists()


def test_each_nic_port_of_a_sending_host_is_a_series_and_a_plot(tmp_path):
    from testbed.results.counters import port_series
    from testbed.results.plots import plot_ports

    # 10 Hz samples of two ports: port 0 carries 40 Mbit/s until 1 s, then port 1 does
    samples, sent = [], {"p0": 0, "p1": 0}
    for i in range(21):
        samples.append((round(i * 0.1, 3), {d: (b, 0, 0) for d, b in sent.items()}))
        sent["p0" if i < 10 else "p1"] += 500_000  # bytes per 0.1 s: 40 Mbit/s
    ports = port_series(samples, ["p0", "p1", "absent"], 20, 0.1)
    assert ports["p0"][:10] == [40.0] * 10 and ports["p0"][10:] == [0.0] * 10
    assert ports["p1"][:10] == [0.0] * 10 and ports["p1"][10:] == [40.0] * 10
    assert ports["absent"] == [None] * 20
    results = drill()
    results["series"] = dict(
        results["series"],
        t=[round((i + 1) * 0.1, 3) for i in range(20)],
        ports={k: ports[k] for k in ("p0", "p1")},
        port_info={"p0": {"host": "h0", "to": "t0a"}, "p1": {"host": "h0", "to": "t0b"}},
    )
    path = plot_ports(str(tmp_path), results)
    assert path and open(path, "rb").read().startswith(PNG_SIGNATURE)
    results["series"]["ports"] = {}
    assert plot_ports(str(tmp_path / "none"), results) is None


def test_a_sampler_slower_than_the_intervals_leaves_none_empty():
    from testbed.results.counters import port_series

    # 0.1 s intervals, samples every 0.25 s or so (a loaded machine): 40 Mbit/s throughout
    times = [0.0, 0.26, 0.49, 0.77, 1.0]
    samples = [(t, {"p0": (int(t * 5_000_000), 0, 0)}) for t in times]
    values = port_series(samples, ["p0"], 12, 0.1)["p0"]
    assert values[:10] == [40.0] * 10, values
    assert values[10:] == [None, None]  # after the last sample: unknown, not zero


def test_markdown_reads_as_aligned_text_in_a_terminal():
    from testbed.results.text import terminal_text

    md = "# Title\n\nSome **bold** `code`.\n\n| a | bb |\n|---|---|\n| 1 | `x` |\n\nend\n"
    assert terminal_text(md) == "Title\n\nSome bold code.\n\na  bb\n-  --\n1  x\n\nend\n"


def test_link_utilization_heatmap_and_iteration_cdf(tmp_path):
    from pathlib import Path

    from testbed.fabric.scenario import load_fabric
    from testbed.results.distributions import plot_iteration_cdf
    from testbed.results.heatmap import plot_link_heatmap, utilization_rows

    _, fabric = load_fabric(Path(__file__).resolve().parents[2] / "topologies" / "hpn-mini.yaml")
    link = fabric.links_between("s0h0", "t0r0k0")[0]
    busy, idle = link.end("t0r0k0").ifname, link.end("s0h0").ifname
    rate = fabric.scaled_mbit(link)
    per_sample = rate * 1e6 / 8 * 0.1 / 2  # half the link's rate
    samples = [(round(i * 0.1, 3), {busy: (int(i * per_sample), 0, 0), idle: (0, 0, 0)}) for i in range(31)]
    labels, rows = utilization_rows(fabric, samples, 0.1)
    assert labels == ["t0r0k0 -> s0h0"]  # the idle direction is left out
    assert rows[0] == pytest.approx([0.5] * 30, abs=0.01)
    results = {"scenario": "x", "faults": [], "time_dilation": 2}
    path = plot_link_heatmap(str(tmp_path), fabric, samples, results)
    assert open(path, "rb").read().startswith(PNG_SIGNATURE)
    assert plot_link_heatmap(str(tmp_path / "none"), fabric, samples[:1], results) is None

    jobs = {"ring": {"iteration_times_s": [1.0, 1.2, 3.0]}, "one": {"iteration_times_s": [1.0]}}
    path = plot_iteration_cdf(str(tmp_path), {"scenario": "x", "metrics": {"jobs": jobs}})
    assert path.endswith("iterations-cdf.png") and open(path, "rb").read().startswith(PNG_SIGNATURE)
    assert plot_iteration_cdf(str(tmp_path), {"metrics": {"jobs": {"one": jobs["one"]}}}) is None


def test_probe_gaps_are_plotted_per_named_fault(tmp_path):
    from testbed.results.distributions import plot_probe_gaps

    probe = {
        "base_gap_ms": 11.8,
        "faults": {
            "agg": {"action": "link-down", "gap_ms": 27.6},
            "agg_back": {"action": "link-up", "gap_ms": 18.5},
        },
    }
    expect = [{"metric": "gap_ms", "fault": "agg", "max": 50}]
    results = {"scenario": "x", "metrics": {"probe": probe}, "expectations": expect}
    path = plot_probe_gaps(str(tmp_path), results)
    assert path.endswith("probes.png") and open(path, "rb").read().startswith(PNG_SIGNATURE)
    assert plot_probe_gaps(str(tmp_path), {"metrics": {}}) is None


def test_every_time_plot_says_the_routes_convergence_and_marks_the_pauses():
    from testbed.results.plots import draw_faults, fault_marks, new_axes

    faults = [
        {
            "at": 5.0,
            "applied_at": 5.0,
            "action": "link-down",
            "link": ["s0h0", "t0r0k0"],
            "converged_s": 0.0248,
        },
        {
            "at": 15.0,
            "applied_at": 15.0,
            "action": "link-up",
            "link": ["s0h0", "t0r0k0"],
            "converged_s": 0.026,
        },
    ]
    assert [label for _, _, label in fault_marks(faults)] == [
        "down s0h0-t0r0k0, routes +25 ms",
        "up s0h0-t0r0k0, routes +26 ms",
    ]
    fig, ax = new_axes()
    pauses = [{"start_s": 6.0, "duration_s": 0.01}, {"start_s": 6.5, "duration_s": 0.02}]
    draw_faults(ax, faults, 25.0, pauses)
    ticks = [c for c in ax.collections if c.get_label() == "PFC pause"]
    assert len(ticks) == 1 and len(ticks[0].get_segments()) == 2


def test_a_long_list_names_the_first_few_and_counts_the_rest():
    assert listed([]) == ""
    assert listed(["a", "b"], most=2) == "a, b"
    assert listed(["a", "b", "c"], most=2) == "a, b, and 1 more"
    assert listed([f"p{i}" for i in range(128)]).endswith("p7, and 120 more")
