"""Time dilation, the pure parts: the dilated scenario (rates /N, times xN,
bytes kept), what the machine is told (shaping, queues, agent configs),
and the measurements brought back to emulated time before they are judged
and reported."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml
from entries import evaluate

from testbed.drill import measure
from testbed.drill.faults import link_switch_ports
from testbed.drill.jobs import agent_configs
from testbed.emulation import plans
from testbed.fabric.bounds import MAX_WALL_S, wall_seconds
from testbed.fabric.dilation import MAX_DILATION, dilate, parse_setting
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario
from testbed.fabric.schema import load_schema
from testbed.plan.budget import LADDER
from testbed.results import dilation, store
from testbed.results.analytical import analytical_iteration_s, goodput_bps, path_latency_s
from testbed.results.compare import render_side_by_side
from testbed.results.markdown import render_summary

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

# Everything a scenario can stretch: delay on the interconnect, iperf3 flows
# starting late, faults, jobs with compute and a start, transport knobs.
DRILL = """\
name: everything
topology:
  kind: region
  fabrics: [{kind: hpn, segments: 1}, {kind: hpn, segments: 1}]
  dci: {oversubscription: 2, delay: 2ms}
duration: 20
traffic:
  - {src: d0s0h0, dst: [d1s0h0], parallel: 2, start: 1.5}
jobs:
  - {name: ring, hosts: [d0s0h1, d0s0h2, d1s0h1, d1s0h2], collective: ring, bytes: 1GB,
     compute: 150ms, iterations: 3, start: 2}
faults:
  - {at: 5, action: link-down, link: [d0s0h0, d0t0r0k0]}
  - {at: 9, action: link-up, link: [d0s0h0, d0t0r0k0]}
transport: {rto: 100ms, dcqcn: {min_rate: 0.1}}
expect:
  - {metric: mean_throughput_mbit, host: d0s0h0, min: 30}
"""


@pytest.fixture
def drill(tmp_path):
    path = tmp_path / "everything.yaml"
    path.write_text(DRILL)
    return load_scenario(path)


# --- the dilated scenario -----------------------------------------------------------


def test_dilate_slows_rates_stretches_times_and_keeps_bytes(drill):
    sc = dilate(drill, 4)
    assert sc.time_dilation == 4.0 and sc.fabric.time_dilation == 4.0
    assert sc.duration_s == 80
    assert [t.start for t in sc.traffic] == [6.0]
    assert [f.at for f in sc.faults] == [20.0, 36.0]
    [job], [was] = sc.jobs, drill.jobs
    assert (job.compute_s, job.start) == (pytest.approx(0.6), 8.0)
    assert (job.bytes, job.bytes_real) == (was.bytes, was.bytes_real) == (200_000, 1e9)
    assert sc.fabric.scale == drill.fabric.scale == 5000  # scale would change bytes; it stays
    for new, old in zip(sc.fabric.links, drill.fabric.links):
        assert new == old  # the model's real rates and delays are untouched...
        assert sc.fabric.scaled_bps(new) == pytest.approx(drill.fabric.scaled_bps(old) / 4)
        assert sc.fabric.shaped_delay_s(new) == pytest.approx(4 * old.delay_s)
    assert any(l.delay_s for l in sc.fabric.links)
    # ...and what is judged (emulated units) and what the agent stretches itself are as written
    assert sc.expect == drill.expect and sc.transport == drill.transport == {
        "rto_s": 0.1,
        "dcqcn": {"min_rate_share": 0.1},
    }


def test_dilate_leaves_the_original_alone(drill):
    dilate(drill, 3)
    assert drill == load_scenario(drill.path)
    assert drill.fabric.time_dilation == 1 and drill.duration_s == 20


def test_dilation_1_is_the_scenario_as_written(drill):
    sc = dilate(drill, 1)
    assert (sc.duration_s, sc.faults, sc.jobs, sc.traffic) == (
        drill.duration_s,
        drill.faults,
        drill.jobs,
        drill.traffic,
    )
    assert [sc.fabric.scaled_mbit(l) for l in sc.fabric.links] == [
        drill.fabric.scaled_mbit(l) for l in drill.fabric.links
    ]


@pytest.mark.parametrize("n", ["auto", 0.5, 65, math.nan])
def test_dilate_wants_a_number_in_range(drill, n):
    with pytest.raises(ValueError, match="from 1 to 64"):
        dilate(drill, n)


def test_dilate_refuses_to_dilate_twice(drill):
    with pytest.raises(ValueError, match="already dilated"):
        dilate(dilate(drill, 2), 2)


@pytest.mark.parametrize(
    "text, expected", [("auto", "auto"), ("2", 2.0), ("1.5", 1.5), ("1", 1.0), ("64", 64.0)]
)
def test_parse_setting(text, expected):
    assert parse_setting(text) == expected


@pytest.mark.parametrize("text", ["0.5", "65", "fast", "", "nan", "inf", "-2"])
def test_parse_setting_says_what_it_expected(text):
    with pytest.raises(ValueError) as e:
        parse_setting(text)
    assert str(e.value) == f"expected a number from 1 to 64, or 'auto', got {text!r}"


def test_one_bound_everywhere():
    schema = load_schema("scenario")["properties"]["time_dilation"]
    assert (schema["then"]["minimum"], schema["then"]["maximum"]) == (1, MAX_DILATION)
    assert LADDER[0] == 1 and LADDER[-1] == MAX_DILATION and list(LADDER) == sorted(LADDER)


def test_scenario_reads_time_dilation(tmp_path, drill):
    assert drill.time_dilation == 1.0
    for value, expected in (("3", 3.0), ("auto", "auto"), ("1.5", 1.5)):
        path = tmp_path / "d.yaml"
        path.write_text(DRILL + f"time_dilation: {value}\n")
        assert load_scenario(path).time_dilation == expected


# --- what the machine is told --------------------------------------------------------


def test_shaping_slows_the_rate_stretches_the_delay_and_keeps_the_queue_bytes(drill):
    _, plain = plans.switch_port_plan(drill.fabric)
    _, slow = plans.switch_port_plan(dilate(drill, 4).fabric)
    assert len(plain) == len(slow)
    dci = [(a, b) for a, b in zip(plain, slow) if " netem " in a]
    assert dci and all(" delay 2ms " in a and " delay 8ms " in b for a, b in dci)
    # per plane, 4 ports x 40 Mbit/s / 2 = 80 Mbit/s on the interconnect: 20 at dilation 4;
    # the queue holds 100 ms at the emulated rate either way (1 MB: 110 jumbo frames)
    assert all(a.endswith(" limit 110") and b.endswith(" limit 110") for a, b in dci)
    rates = [(a, b) for a, b in zip(plain, slow) if " htb rate " in a]
    assert any(" rate 80mbit " in a and " rate 20mbit " in b for a, b in rates)
    fifo = [(a, b) for a, b in zip(plain, slow) if " bfifo " in a]
    assert fifo and all(a == b for a, b in fifo)


def test_host_shaping_under_dilation(drill):
    slow = dilate(drill, 8).fabric
    script = plans.host_script(slow, "d0s0h0")
    assert "htb rate 5mbit ceil 5mbit" in script  # 40 Mbit/s / 8
    assert "bfifo limit 500000" in script  # 100 ms at 40 Mbit/s, as undilated


def test_agent_configs_carry_the_dilation(drill, tmp_path):
    sc = dilate(drill, 4)
    configs = agent_configs(sc.fabric, sc.jobs, str(tmp_path), sc.duration_s, sc.transport)
    plain = agent_configs(drill.fabric, drill.jobs, str(tmp_path), drill.duration_s, drill.transport)
    assert sorted(configs) == sorted(plain) == ["d0s0h1", "d0s0h2", "d1s0h1", "d1s0h2"]
    for host, cfg in configs.items():
        assert cfg["time_dilation"] == 4.0 and plain[host]["time_dilation"] == 1.0
        assert cfg["deadline_s"] == 80
        assert cfg["nic"]["rate_bps"] == pytest.approx(10e6)
        assert cfg["dcqcn"] == {"min_rate_bps": pytest.approx(1e6)}  # 0.1 of the dilated rate
        assert cfg["rto_s"] == 0.1  # emulated: the agent stretches its timers itself
        [spec] = cfg["jobs"]
        assert (spec["compute_s"], spec["start"]) == (pytest.approx(0.6), 8.0)
        assert spec["bytes"] == plain[host]["jobs"][0]["bytes"] == 200_000


def test_analytical_time_on_the_dilated_fabric_is_n_times_the_emulated(drill):
    def analytical(sc):
        [job] = sc.jobs
        return analytical_iteration_s(job, goodput_bps(sc.fabric), path_latency_s(sc.fabric, job))

    emulated = analytical(drill)
    assert emulated > drill.jobs[0].compute_s
    assert analytical(dilate(drill, 6)) == pytest.approx(6 * emulated)


# --- back to emulated time ----------------------------------------------------------


def machine_results():
    """Results as measured on a machine at dilation 4, before conversion."""
    return {
        "duration_s": 40.0,
        "duration_planned_s": 40.0,
        "fabric": {"bringup_s": 0.8, "hosts": 8},
        "faults": [
            {
                "at": 20.0,
                "applied_at": 20.012,
                "converged_s": 0.016,
                "action": "link-down",
                "link": ["s0h0", "t0r0k0"],
                "index": 0,
                "link_name": "a~b",
            }
        ],
        "series": {
            "interval_s": 0.1,
            "t": [0.1, 0.2, 0.3],
            "flows": {"f": [10.0, None, 9.5]},
            "flow_info": {"f": {"src": "s0h0", "dst": "s1h0"}},
            "ports": {"s0h0-eth0": [5.0, None, 2.5]},
        },
        "metrics": {
            "hosts": {
                "s0h0": {
                    "flows": ["f"],
                    "mean_mbit": 9.75,
                    "before_mbit": 10.0,
                    "fault_throughput_ratio": 0.5,
                    "max_silence_s": 0.4,
                    "recovery_s": None,
                }
            },
            "fidelity": {
                "links": {
                    "a~b (x egress)": {"configured_mbit": 10.0, "achieved_mbit": 9.9, "fidelity": 0.99}
                },
                "min": 0.99,
                "generators_on_time": 0.97,
            },
            "outages": [{"link": ["s0h0", "t0r0k0"], "start": 20.012, "end": 36.0, "restored": True}],
            "settings": {
                "interval_s": 0.1,
                "warmup_s": 1.0,
                "silence_floor_mbit": 0.01,
                "recovered_fraction": 0.9,
            },
            "jobs": {
                "ring": {
                    "iteration_time_s": 2.4,
                    "iteration_times_s": [2.8, 2.4, 2.4],
                    "iteration_ends_s": [10.8, 13.2, 15.6],
                    "window_s": [8.0, 15.6],
                    "analytical_iteration_s": 2.0,
                    "path_latency_s": 0.004,
                    "iteration_time_vs_analytical": 1.2,
                    "gpu_utilization": 0.25,
                    "bytes_per_iteration": 200000,
                    "retransmissions": 3,
                    "gap_events": [{"t": 12.0, "filled_after_s": 0.0004, "iter": 1}],
                    "job_completion_s": 7.6,
                    "fault_iteration_slowdown": None,
                }
            },
            "generators": {"lost_s": 0.2, "max_lag_s": 0.004, "on_time": 0.97},
            "cpu_per_packet": {
                "agents_cpu_s": 0.1125,
                "agents_us": 12.5,
                "ovs_cpu_s": 0.72,
                "ovs_us": 40.0,
                "packets": 9000,
                "packet_hops": 18000,
            },
            "host_cpu": {"mean_busy": 0.6, "saturated_share": 0.1},
        },
    }


def test_to_emulated_divides_times_and_multiplies_rates():
    out = dilation.to_emulated(machine_results(), 4)
    assert (out["duration_s"], out["duration_planned_s"]) == (10.0, 10.0)
    assert out["fabric"] == {"bringup_s": 0.8, "hosts": 8}  # this machine's wall time
    # The CPU this machine spent, and the costs per packet it makes, as measured:
    # agents_cpu_s / packets is agents_us, ovs_cpu_s / packet_hops is ovs_us.
    assert out["metrics"]["cpu_per_packet"] == machine_results()["metrics"]["cpu_per_packet"]
    [f] = out["faults"]
    assert (f["at"], f["applied_at"], f["converged_s"]) == (5.0, 5.003, 0.004)
    assert (f["link"], f["link_name"], f["index"]) == (["s0h0", "t0r0k0"], "a~b", 0)
    s = out["series"]
    assert (s["interval_s"], s["t"], s["flows"]) == (0.025, [0.025, 0.05, 0.075], {"f": [40.0, None, 38.0]})
    assert s["flow_info"] == {"f": {"src": "s0h0", "dst": "s1h0"}}
    assert s["ports"] == {"s0h0-eth0": [20.0, None, 10.0]}  # rates x N, as the flows'
    m = out["metrics"]
    assert m["hosts"]["s0h0"] == {
        "flows": ["f"],
        "mean_mbit": 39.0,
        "before_mbit": 40.0,
        "fault_throughput_ratio": 0.5,
        "max_silence_s": 0.1,
        "recovery_s": None,
    }
    assert m["fidelity"] == {
        "links": {"a~b (x egress)": {"configured_mbit": 40.0, "achieved_mbit": 39.6, "fidelity": 0.99}},
        "min": 0.99,
        "generators_on_time": 0.97,
    }
    assert m["outages"] == [{"link": ["s0h0", "t0r0k0"], "start": 5.003, "end": 9.0, "restored": True}]
    assert m["settings"] == {
        "interval_s": 0.025,
        "warmup_s": 0.25,
        "silence_floor_mbit": 0.04,
        "recovered_fraction": 0.9,
    }
    job = m["jobs"]["ring"]
    assert (job["iteration_time_s"], job["iteration_times_s"], job["iteration_ends_s"], job["window_s"]) == (
        0.6,
        [0.7, 0.6, 0.6],
        [2.7, 3.3, 3.9],
        [2.0, 3.9],
    )
    assert (job["analytical_iteration_s"], job["path_latency_s"], job["job_completion_s"]) == (
        0.5,
        0.001,
        1.9,
    )
    assert job["gap_events"] == [{"t": 3.0, "filled_after_s": 0.0001, "iter": 1}]
    # ratios, counts, bytes and CPU costs are the same in any time
    for key in (
        "iteration_time_vs_analytical",
        "gpu_utilization",
        "bytes_per_iteration",
        "retransmissions",
        "fault_iteration_slowdown",
    ):
        assert job[key] == machine_results()["metrics"]["jobs"]["ring"][key]
    assert m["generators"] == {"lost_s": 0.05, "max_lag_s": 0.001, "on_time": 0.97}
    assert m["host_cpu"] == {"mean_busy": 0.6, "saturated_share": 0.1}


def test_to_emulated_at_1_is_a_copy():
    before = machine_results()
    out = dilation.to_emulated(before, 1)
    assert out == before
    out["metrics"]["jobs"]["ring"]["iteration_times_s"].append(9)
    assert before == machine_results()


def test_to_emulated_leaves_its_input_alone():
    before = machine_results()
    dilation.to_emulated(before, 4)
    assert before == machine_results()


def test_expectations_are_judged_in_emulated_units():
    expect = [
        {"name": "fast", "metric": "iteration_time_s", "job": "ring", "max": 1.0},
        {"name": "full", "metric": "mean_throughput_mbit", "host": "s0h0", "min": 30},
    ]
    machine = machine_results()["metrics"]
    assert [e["passed"] for e in evaluate(expect, machine, True)] == [False, False]
    emulated = dilation.to_emulated({"metrics": machine}, 4)["metrics"]
    assert [e["passed"] for e in evaluate(expect, emulated, True)] == [True, True]


class _Flows:
    """iperf3 flows as the runner reads them: one flow at 10 Mbit/s on the
    machine (40 emulated), silent while its link is down."""

    def __init__(self, n):
        self.n = n

    def series(self):
        points = [
            (round(0.1 * (i + 1), 3), 0.0 if 5 * self.n < 0.1 * i < 9 * self.n else 10.0)
            for i in range(int(10 * 10 * self.n))
        ]
        return {"s0h0->s1h0#0": points}, {"s0h0->s1h0#0": {"src": "s0h0", "dst": "s1h0"}}


def test_the_runner_judges_a_dilated_run_in_emulated_time(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "name: d\ntopology: {kind: hpn}\nduration: 10\n"
        "traffic: [{src: s0h0, dst: s1h0}]\n"
        "faults: [{at: 5, action: link-down, link: [s0h0, t0r0k0]},\n"
        "         {at: 9, action: link-up, link: [s0h0, t0r0k0]}]\n"
        "expect: [{metric: mean_throughput_mbit, host: s0h0, min: 20},\n"
        "         {metric: max_silence_s, host: s0h0, max: 4.5}]\n"
    )
    n = 4
    sc = dilate(load_scenario(path), n)
    # s0h0's egress saturated at the dilated 10 Mbit/s for 2 s of the machine's time
    dev = sc.fabric.nics_of("s0h0")[0].ports[0]
    samples = [(0.1 * i, {dev: (int(i * 125_000), 9000, 0)}) for i in range(21)]
    faults = [
        {
            "at": 20.0,
            "applied_at": 20.01,
            "action": "link-down",
            "link": ["s0h0", "t0r0k0"],
            "index": 0,
            "link_name": "x",
        },
        {
            "at": 36.0,
            "applied_at": 36.02,
            "action": "link-up",
            "link": ["s0h0", "t0r0k0"],
            "index": 0,
            "link_name": "x",
        },
    ]
    # the controller's new routes acknowledged 20 ms (machine time) after each fault
    events = [
        {"event": "routes", "t": 20.02, "applied_t": 20.03, "down": link_switch_ports(sc.fabric, faults[0])},
        {"event": "routes", "t": 36.03, "applied_t": 36.04, "down": []},
    ]
    run = measure.RunRecord(
        t0=0.0,
        ran_s=40.0,
        faults=faults,
        problems=[],
        events=events,
        flows=_Flows(n),
        samples=samples,
        cpu=[],
        agent_results=None,
        capture_files=[],
        datapath="user",
        bringup_s=1.0,
    )
    results = measure.results(sc, run, "now", {"from": "command line"}).to_dict()
    assert [f["converged_s"] for f in results["faults"]] == [0.005, 0.005]
    assert results["time_dilation"] == 4.0
    assert results["time_dilation_choice"] == {"from": "command line"}
    assert (results["duration_s"], results["duration_planned_s"]) == (10.0, 10.0)
    assert [f["applied_at"] for f in results["faults"]] == [5.0025, 9.005]
    assert results["series"]["t"][-1] == 10.0 and results["series"]["interval_s"] == 0.025
    assert results["fabric"]["bringup_s"] == 1.0
    [link] = results["metrics"]["fidelity"]["links"].values()
    assert link["configured_mbit"] == pytest.approx(40.0)
    assert link["achieved_mbit"] == pytest.approx(40.0)
    host = results["metrics"]["hosts"]["s0h0"]
    assert host["before_mbit"] == pytest.approx(40.0)
    assert host["max_silence_s"] == pytest.approx(4.0, abs=0.05)
    assert [e["passed"] for e in results["expectations"]] == [True, True]
    assert results["passed"] is True
    # what the runner assembles has the public shape results.json declares
    written = json.loads(json.dumps(store.jsonable(results)))
    assert store.shape_problems(written) == []
    del written["trust"]["checks"]
    written["fabric"]["hosts"] = "8"
    assert store.shape_problems(written) == [
        "fabric.hosts: '8' is not of type 'integer'",
        "trust: 'checks' is a required property",
    ]


# --- the report says so --------------------------------------------------------------


def report(n, choice=None):
    return {
        "scenario": "ring",
        "duration_s": 10,
        "time_dilation": n,
        "time_dilation_choice": choice or {"from": "scenario"},
        "expectations": [],
        "metrics": {"fidelity": {"min": 1.0}},
        "trustworthy": True,
        "trust": {"trustworthy": True, "failed": [], "warnings": [], "checks": []},
        "passed": True,
    }


def test_summary_states_the_dilation():
    text = render_summary(report(4))
    assert (
        "| time dilation | 4: time dilation 4: rates /4, times x4 on this machine; reported "
        "in emulated time; set in the scenario |"
    ) in text
    assert "| time dilation | 1 (none" in render_summary(report(1, {"from": "default"}))
    assert "time dilation" not in render_summary(
        {k: v for k, v in report(1).items() if not k.startswith("time_dilation")}
    )


def test_summary_shows_the_plan_behind_auto():
    choice = {
        "from": "auto",
        "set_by": "scenario",
        "plan": {
            "cores_asked": 2.1,
            "budget_cores": 1.4,
            "fits": True,
            "capacity": "DEFAULTS, not measured on this machine",
        },
    }
    text = render_summary(report(2, choice))
    assert (
        "chosen by the capacity plan: 2.1 cores asked at dilation 1, budget 1.4 cores "
        "(capacity: DEFAULTS, not measured on this machine)" in text
    )


def test_compare_names_the_dilation():
    text = render_side_by_side([report(1), report(4)])
    assert "ring (dilation 4)" in text and "ring (dilation 1)" not in text


def test_plot_titles_state_the_dilation():
    from testbed.results.plots import titled

    assert titled("t", 1) == "t"
    assert (
        titled("t", 2.5) == "t\n(time dilation 2.5: rates /2.5, times x2.5 on this machine; "
        "reported in emulated time)"
    )


def test_shipped_scenarios_pass_check_at_the_largest_dilation(tmp_path):
    """Every shipped scenario, told `time_dilation: auto` (which may choose
    the largest step), still passes every bound `check` applies: its wall
    time, samples and captures at 64 times its duration."""
    paths = sorted(SCENARIOS.glob("*.yaml"))
    assert len(paths) >= 20, f"found only {len(paths)} shipped scenarios in {SCENARIOS}"
    topologies = SCENARIOS.parent / "topologies"
    for path in paths:
        doc = yaml.safe_load(path.read_text())
        doc["time_dilation"] = "auto"
        if isinstance(doc["topology"], str):
            doc["topology"] = str(topologies / Path(doc["topology"]).name)
        copy = tmp_path / path.name
        copy.write_text(yaml.safe_dump(doc))
        sc = load_scenario(copy)  # raises ConfigError naming the bound it breaks
        assert wall_seconds(sc.duration_s, sc.time_dilation) <= MAX_WALL_S, path.name


def test_a_scenario_too_long_to_dilate_is_refused(tmp_path):
    # The test above can fail: 300 s at up to 64x is more than 4 hours.
    doc = yaml.safe_load((SCENARIOS / "allreduce-ring.yaml").read_text())
    doc.update(
        time_dilation="auto", duration=300, topology=str(SCENARIOS.parent / "topologies" / "hpn-mini.yaml")
    )
    copy = tmp_path / "long.yaml"
    copy.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="time_dilation"):
        load_scenario(copy)


def test_the_results_record_and_the_published_schema_name_the_same_keys():
    from testbed.results import document

    schema = store.results_schema()
    written_later = {"files", "plot_errors"}  # added as the report is written
    assert document.keys() == schema["required"]
    assert set(schema["properties"]) - written_later == set(document.keys())
    fabric = schema["properties"]["fabric"]
    assert [f.name for f in dataclasses.fields(document.FabricSummary)] == fabric["required"]


def test_progress_speaks_in_emulated_time_and_rates():
    """At dilation 4 a second of emulated time is 4 s here, and a port the
    machine runs at 10 Mbit/s stands for 40."""
    import dataclasses

    from testbed.drill.runner import _progress
    from testbed.fabric.scenario import load_fabric

    fabric = load_fabric(SCENARIOS.parent / "topologies" / "hpn-mini.yaml")[1]
    fabric = dataclasses.replace(fabric, time_dilation=4.0)
    said = []

    class Sample:
        def rate_mbit(self, port):
            return 10.0 if port.endswith("p0") else 0.0

    tick = _progress(fabric, ["s0h0"], None, [], said.append)
    tick(2.0, Sample())  # half an emulated second: nothing yet
    tick(4.0, Sample())
    assert said == ["[  1.00s] s0h0   40.0 Mbit/s (ports:  40.0   0.0)"]
    quiet = []
    _progress(fabric, [], None, [], quiet.append)(4.0, Sample())  # probes alone: no sender, no job
    assert quiet == []
