"""Capacity planning, the pure parts: the packets per second a scenario asks,
the stored calibration (read, written, refused on one line), the dilation
that fits, `hpnlab plan`, and the calibration a first run leaves."""

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.cli.common import INVALID
from testbed.cli.drill import _calibrate_from_first_run
from testbed.drill.jobs import rank_specs
from testbed.fabric.build import build_fabric
from testbed.fabric.paths import compute_routes, trace
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario
from testbed.plan import budget, calibration
from testbed.plan.calibration import Calibration
from testbed.plan.demand import _Hops, agent_hosts, loads
from testbed.plan.report import render_plan

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
PORT = 40e6  # one NIC port of HPN-mini: 200 Gbit/s / 5000
FRAME = 4096 + 58  # the largest RoCE payload at MTU 9000, with its headers
RING_PPS = PORT / (FRAME * 8)  # about 1204 packets/s
RING = ["s0h0", "s0h1", "s0h2", "s0h3", "s1h0", "s1h1", "s1h2", "s1h3"]


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def scenario(tmp_path, body, duration=10):
    return load_scenario(write(tmp_path, f"name: t\ntopology: {{kind: hpn}}\nduration: {duration}\n" + body))


def senders_of(sc):
    [load] = loads(sc)
    return {s.what: s for s in load.senders}


# --- demand ------------------------------------------------------------------------


def test_a_ring_rank_sends_on_one_port_through_one_or_three_switches():
    [load] = loads(load_scenario(SCENARIOS / "allreduce-ring.yaml"))
    assert [s.host for s in load.senders] == RING
    for s in load.senders:
        assert (s.bps, s.frame_bytes) == (PORT, FRAME)
        assert s.pps == pytest.approx(RING_PPS)
    # a ToR between neighbours of a segment; ToR, aggregation, ToR into the other segment
    assert {s.host: s.switch_hops for s in load.senders} == {
        h: 3.0 if h in ("s0h3", "s1h3") else 1.0 for h in RING
    }
    assert load.total_pps == pytest.approx(8 * RING_PPS)
    assert load.packet_hops_per_s == pytest.approx(12 * RING_PPS)
    assert load.mean_switch_hops == pytest.approx(1.5)
    assert load.host_pps() == {h: pytest.approx(RING_PPS) for h in RING}


def test_all_to_all_uses_every_port_unless_pinned(tmp_path):
    job = "jobs: [{name: a, hosts: [s0h0, s0h1, s1h0, s1h1], collective: all-to-all, bytes: 1GB%s}]\n"
    spread = senders_of(scenario(tmp_path, job % ""))["a rank 0"]
    assert spread.bps == 2 * PORT
    assert spread.switch_hops == pytest.approx((1 + 3 + 3) / 3)  # equal bytes to each peer
    pinned = senders_of(scenario(tmp_path, job % ", port: 1"))["a rank 0"]
    assert pinned.bps == PORT


def test_iperf3_sends_frames_of_the_mtu_on_a_port_per_stream(tmp_path):
    flows = senders_of(load_scenario(SCENARIOS / "dual-tor-link-failure.yaml"))
    [s] = flows.values()
    assert (s.host, s.bps, s.frame_bytes, s.switch_hops) == ("s0h0", 2 * PORT, 9014, 3.0)
    assert s.what == "iperf3 to s1h0, s1h1, s1h2, ... (4) (8 TCP streams)"
    [one] = senders_of(scenario(tmp_path, "traffic: [{src: s0h0, dst: s0h1}]\n")).values()
    assert (one.bps, one.switch_hops, one.what) == (PORT, 1.0, "iperf3 to s0h1 (1 TCP stream)")


def test_iperf3_on_every_rail_fills_every_nic(tmp_path):
    """8 rails of dual-ToR NICs: 16 streams per rail fill both ports of each
    NIC, 16 ports of 40 Mbit/s in all; one rail named, its NIC's two."""
    flows = senders_of(load_scenario(SCENARIOS / "dual-tor-8rails.yaml"))
    [s] = flows.values()
    assert (s.bps, s.rails, s.what) == (
        16 * PORT,
        tuple(range(8)),
        "iperf3 to s0h1 (128 TCP streams, 8 rails)",
    )
    topology = ROOT / "topologies" / "hpn-8rails.yaml"  # shipped: allowed from anywhere
    body = "traffic: [{src: s0h0, dst: s0h1, rails: [3], parallel: 4}]\n"
    path = write(tmp_path, f"name: t\ntopology: {topology}\nduration: 5\n{body}")
    [one] = senders_of(load_scenario(path)).values()
    assert (one.bps, one.rails) == (2 * PORT, (3,))


def test_a_host_never_sends_more_than_its_nic_carries(tmp_path):
    sc = scenario(
        tmp_path,
        "traffic: [{src: s0h0, dst: [s1h0], parallel: 4}]\n"
        "jobs: [{name: a, hosts: [s0h0, s0h1, s1h0], collective: all-to-all, "
        "bytes: 1GB}]\n",
    )
    got = senders_of(sc)
    mine = [s for s in got.values() if s.host == "s0h0"]
    assert len(mine) == 2 and sum(s.bps for s in mine) == pytest.approx(2 * PORT)
    assert all(s.bps == pytest.approx(PORT) for s in mine)  # each asked 2 ports
    assert got["a rank 1"].bps == 2 * PORT  # s0h1 is alone


def test_senders_overlap_only_when_they_run_at_once():
    sc = load_scenario(SCENARIOS / "two-jobs-contention.yaml")
    first, later = loads(sc)
    assert (first.t, later.t) == (0.0, 5.0)
    # the large job alone is done (6 idle-fabric iterations, about 3.5 s) before the others start
    assert {s.what.split()[0] for s in first.senders} == {"large-alone"}
    assert {s.what.split()[0] for s in later.senders} == {"large-shared", "small"}
    assert len(later.senders) == 12
    plan = budget.plan(sc, Calibration(2, 20.0, 50.0))
    assert plan.peak.load == later


def test_a_late_job_is_the_only_load(tmp_path):
    sc = scenario(
        tmp_path,
        "jobs: [{name: a, hosts: [s0h0, s0h1], collective: ring, bytes: 1GB, start: 20}]\n",
        duration=30,
    )
    assert [(l.t, len(l.senders)) for l in loads(sc)] == [(20.0, 2)]
    plan = budget.plan(sc, Calibration(2, 20.0, 50.0))
    assert plan.dilation == 1 and plan.fits


@pytest.mark.parametrize(
    "params",
    [
        {"kind": "hpn"},
        {"kind": "hpn", "planes": 1, "dual_tor": False},
        {"kind": "hpn", "rails": 2},
        {"kind": "fat-tree"},
        {
            "kind": "region",
            "fabrics": [{"kind": "hpn"}, {"kind": "hpn", "segments": 1}],
            "dci": {"rate": "10Gbit"},
        },
    ],
    ids=lambda p: (
        p["kind"]
        + ("-" + "-".join(f"{k}{v}" for k, v in p.items() if k != "kind") if p["kind"] == "hpn" else "")
    ),
)
def test_hops_follow_the_controllers_routes(params):
    fabric = build_fabric(params)
    routes = compute_routes(fabric)
    hops = _Hops(fabric)
    hosts = [n.name for n in fabric.hosts()]
    for src in hosts:
        nic = fabric.nics_of(src)[0]
        for dst in hosts:
            if dst == src:
                continue
            ip = next(n.ip for n in fabric.nics_of(dst) if n.rail == nic.rail)
            paths = [trace(fabric, routes, port, ip) for port in nic.ports]
            expected = sum(len(p) - 1 for p in paths) / len(paths)
            assert hops(src, dst) == pytest.approx(expected), (src, dst)


# --- budget --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ring():
    return load_scenario(SCENARIOS / "allreduce-ring.yaml")


def test_the_ring_fits_at_dilation_1(ring):
    plan = budget.plan(ring, Calibration(2, 20.0, 50.0))
    asked = RING_PPS * (8 * 20 + 12 * 50) / 1e6
    assert plan.peak.cores == pytest.approx(asked)
    assert asked == pytest.approx(0.915, abs=0.001) and plan.budget_cores == pytest.approx(1.7)
    assert (plan.dilation, plan.fits) == (1.0, True)


def test_slow_switches_need_the_next_step_that_fits(ring):
    plan = budget.plan(ring, Calibration(2, 20.0, 200.0))
    asked = RING_PPS * (8 * 20 + 12 * 200) / 1e6  # 3.08 cores: 1.8x the budget of 1.7
    assert plan.peak.cores == pytest.approx(asked)
    assert (plan.dilation, plan.fits) == (2.0, True)
    assert plan.fits_at(2) and not plan.fits_at(1.5)


def test_one_agent_process_runs_on_one_core(ring):
    # 64 cores leave the machine plenty and give each host a process of
    # its own; one agent needs 1.2 of its single core
    plan = budget.plan(ring, Calibration(64, 1000.0, 1.0))
    assert len(plan.peak.groups) == 8
    assert plan.peak.process_cores()[("s0h0",)] == pytest.approx(RING_PPS * 1000 / 1e6)
    assert plan.peak.cores < plan.budget_cores
    assert (plan.dilation, plan.fits) == (2.0, True)


def test_a_process_playing_several_hosts_is_priced_for_all_of_them(ring):
    # 2 cores: two processes of four hosts each, dealt round-robin as a
    # drill deals them; each asks four hosts' packets of one core
    cal = Calibration(2, 100.0, 1.0)
    plan = budget.plan(ring, cal)
    assert plan.peak.groups == (tuple(RING[0::2]), tuple(RING[1::2]))
    per_process = 4 * RING_PPS * 100 / 1e6  # 0.48 core: within 0.7 at dilation 1
    assert sorted(plan.peak.process_cores().values()) == pytest.approx([per_process] * 2)
    assert plan.fits_at(1)
    # one process (asked for) plays all eight: 0.96 core, too much for one
    one = budget.plan(ring, cal, processes_asked="1")
    assert one.peak.process_cores() == {tuple(RING): pytest.approx(2 * per_process)}
    assert not one.fits_at(1) and one.dilation == 1.5
    assert "the busiest process (s0h0, s0h1, s0h2, ... (8))" in render_plan(one)


def test_a_scenario_too_big_for_the_machine_says_so(ring):
    plan = budget.plan(ring, Calibration(1, 1e4, 1e4))
    assert (plan.dilation, plan.fits) == (64.0, False)
    assert "does not fit even at time dilation 64" in render_plan(plan)


def test_plan_numbers(ring):
    d = budget.plan(ring, Calibration(2, 20.0, 50.0, path="/x/cal.json")).to_dict()
    assert d["dilation"] == 1.0 and d["fits"] is True and d["peak_at"] == 0.0
    assert d["cores_asked"] == pytest.approx(d["agent_cores"] + d["switch_cores"], abs=1e-3)
    assert d["packets_per_second"] == pytest.approx(8 * RING_PPS, abs=1e-3)
    assert d["packet_hops_per_second"] == pytest.approx(12 * RING_PPS, abs=1e-3)
    assert d["agent_processes"] == 2 and d["process_budget_cores"] == budget.PROCESS_SHARE
    assert set(d["busiest_process"]) < set(RING) and len(d["busiest_process"]) == 4
    assert d["calibration"] == "/x/cal.json" and "calibration /x/cal.json" in d["capacity"]
    assert set(d["host_packets_per_second"]) == set(RING)
    json.dumps(d)


def _never():
    raise AssertionError("the calibration was read without 'auto'")


@pytest.mark.parametrize(
    "written, override, expected",
    [
        (None, None, (1.0, {"from": "default"})),
        (3, None, (3.0, {"from": "scenario"})),
        (3, 1.5, (1.5, {"from": "command line"})),
        ("auto", 2.0, (2.0, {"from": "command line"})),
    ],
)
def test_resolve_a_given_dilation(tmp_path, written, override, expected):
    extra = "" if written is None else f"time_dilation: {written}\n"
    sc = scenario(tmp_path, "traffic: [{src: s0h0, dst: s1h0}]\n" + extra)
    assert budget.resolve(sc, override, _never) == expected


@pytest.mark.parametrize(
    "written, override, set_by", [("auto", None, "scenario"), (2, "auto", "command line")]
)
def test_resolve_auto_asks_the_plan(written, override, set_by, ring, tmp_path):
    text = (
        (SCENARIOS / "allreduce-ring.yaml")
        .read_text()
        .replace("topology: ../topologies/hpn-mini.yaml", "topology: {kind: hpn}")
    )
    sc = load_scenario(write(tmp_path, text + f"time_dilation: {written}\n"))
    n, choice = budget.resolve(sc, override, lambda: Calibration(2, 20.0, 200.0))
    assert n == 2.0
    assert choice["from"] == "auto" and choice["set_by"] == set_by
    assert choice["plan"]["dilation"] == 2.0 and "DEFAULTS" in choice["plan"]["capacity"]


# --- calibration ---------------------------------------------------------------------


def test_calibration_round_trips(tmp_path):
    path = str(tmp_path / "deep" / "calibration.json")
    cal = Calibration(2, 12.5, 40.0, "2026-01-02T03:04:05+00:00", {"command": "test"})
    calibration.save(cal, path)
    assert os.stat(path).st_mode & 0o777 == 0o644
    back = calibration.load(path)
    assert back == Calibration(2, 12.5, 40.0, "2026-01-02T03:04:05+00:00", {"command": "test"}, path=path)
    assert not back.is_default and f"calibration {path}" in back.describe()
    assert set(json.loads(Path(path).read_text())) == set(calibration.FIELDS)


def test_no_calibration_means_labelled_defaults(tmp_path):
    path = str(tmp_path / "none.json")
    assert calibration.load(path) is None
    cal = calibration.load_or_defaults(path)
    assert cal.is_default and cal.cores >= 1
    assert (cal.agent_us_per_packet, cal.switch_us_per_packet_hop) == (20.0, 50.0)
    assert cal.describe().startswith("DEFAULTS, not measured on this machine")


GOOD = {"cores": 2, "agent_us_per_packet": 12.5, "switch_us_per_packet_hop": 40.0}


@pytest.mark.parametrize(
    "text, field, message",
    [
        ("{", "(top)", "invalid JSON at line 1, column 2: Expecting property name enclosed in double quotes"),
        ("[]", "(top)", "expected a mapping of fields, got an empty list"),
        (
            json.dumps({**GOOD, "colour": 1}),
            "(top)",
            "unknown field 'colour' (allowed: cores, "
            "agent_us_per_packet, switch_us_per_packet_hop, measured_at, source)",
        ),
        (json.dumps({k: v for k, v in GOOD.items() if k != "cores"}), "cores", "required field is missing"),
        (json.dumps({**GOOD, "cores": 0}), "cores", "expected an integer > 0, got 0"),
        (json.dumps({**GOOD, "cores": 2.5}), "cores", "expected an integer > 0, got 2.5"),
        (json.dumps({**GOOD, "cores": True}), "cores", "expected an integer > 0, got true"),
        (
            json.dumps({**GOOD, "agent_us_per_packet": -1}),
            "agent_us_per_packet",
            "expected a number > 0, got -1",
        ),
        (
            json.dumps({**GOOD, "switch_us_per_packet_hop": "fast"}),
            "switch_us_per_packet_hop",
            "expected a number > 0, got 'fast'",
        ),
        (json.dumps({**GOOD, "source": [1]}), "source", "expected a mapping, got a list of 1 item"),
        (json.dumps({**GOOD, "measured_at": 5}), "measured_at", "expected a date and time, got 5"),
        ("\xff\xfe", "(top)", "not UTF-8 text, expected a calibration (JSON)"),
    ],
)
def test_a_bad_calibration_is_one_line(tmp_path, text, field, message):
    path = tmp_path / "calibration.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError) as e:
        calibration.load(str(path))
    assert [str(p) for p in e.value.problems] == [f"{path}: {field}: {message}"]


def test_a_calibration_that_is_not_a_small_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is not a regular file"):
        calibration.load(str(tmp_path))
    big = tmp_path / "big.json"
    big.write_text(" " * (calibration.MAX_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match=f"expected at most {calibration.MAX_FILE_BYTES}"):
        calibration.load(str(big))


def measured(packets=20_000, agents_us=12.5, ovs_us=40.0, dilation=1, instrumented=(), processes=None):
    results = {
        "scenario": "calibration-ring",
        "scenario_file": "c.yaml",
        "time_dilation": dilation,
        "fabric": {"kind": "hpn"},
        "faults": [],
        "metrics": {
            "cpu_per_packet": {
                "agents_us": agents_us,
                "ovs_us": ovs_us,
                "packets": packets,
                "packet_hops": 2 * packets,
                "agents_instrumented": list(instrumented),
            },
            "jobs": {"ring8": {"collective": "ring", "retransmissions": 0, "cnps": 0}},
        },
    }
    if processes:
        results["metrics"]["generators"] = {"agent_processes": processes}
    return results


def test_calibration_from_results():
    cal = calibration.from_results(measured(), "hpnlab doctor --calibrate", "/r/results.json", cores=4)
    assert (cal.cores, cal.agent_us_per_packet, cal.switch_us_per_packet_hop) == (4, 12.5, 40.0)
    assert cal.source == {
        "command": "hpnlab doctor --calibrate",
        "drill": "calibration-ring",
        "scenario_file": "c.yaml",
        "results": "/r/results.json",
        "packets": 20_000,
        "packet_hops": 40_000,
        "time_dilation": 1,
        "agent_processes": None,  # results that did not say
        "code": calibration.code_fingerprint(),
        "kernel": os.uname().release,
    }
    assert cal.measured_at and cal.agent_processes is None
    assert "in an agent, " in cal.describe()


def test_a_calibration_says_how_many_processes_played_the_hosts(tmp_path):
    path = str(tmp_path / "calibration.json")
    calibration.save(calibration.from_results(measured(processes=8), "c", "r", cores=2), path)
    back = calibration.load(path)
    assert back.agent_processes == 8
    assert "12.5 us per packet in an agent (the agents in 8 processes)" in back.describe()


@pytest.mark.parametrize(
    "results, why",
    [
        ({"metrics": {}}, "did not measure the CPU per packet"),
        (measured(packets=10), "measured 10 packets, fewer than the 5000"),
        (measured(agents_us=0), "agents_us: expected a number > 0, got 0"),
        (measured(ovs_us=None), "ovs_us: expected a number > 0, got an empty value"),
        (measured(instrumented=["split"]), r"the agents measured their own loop \(split\)"),
    ],
)
def test_calibration_needs_enough_measured(results, why):
    with pytest.raises(ValueError, match=why):
        calibration.from_results(results, "c", "r")


def test_the_fingerprint_moves_with_any_code_file_and_nothing_else(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "agent.py").write_text("x = 1\n")
    (tmp_path / "c" / "frames.c").write_text("int x;\n")
    first = calibration.fingerprint([str(tmp_path)])
    assert len(first) == 16 and int(first, 16) >= 0
    (tmp_path / "__pycache__" / "agent.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "notes.txt").write_text("not code")
    assert calibration.fingerprint([str(tmp_path)]) == first
    (tmp_path / "c" / "frames.c").write_text("int y;\n")
    assert calibration.fingerprint([str(tmp_path)]) != first
    (tmp_path / "c" / "frames.c").write_text("int x;\n")
    assert calibration.fingerprint([str(tmp_path)]) == first
    (tmp_path / "c" / "frames.c").rename(tmp_path / "c" / "other.c")  # same bytes, another file
    assert calibration.fingerprint([str(tmp_path)]) != first
    # This installation's packet path: the agents' files and the pacer's.
    here = calibration.code_fingerprint()
    assert len(here) == 16 and here != calibration.fingerprint([str(ROOT / "traffic")])


def test_a_calibration_by_other_code_or_on_another_kernel_is_stale(tmp_path):
    cal = calibration.from_results(measured(), "c", "r", cores=2)
    assert cal.stale() is None  # measured here by this code
    cal = calibration.save(cal, str(tmp_path / "calibration.json"))
    assert cal.stale() is None and "STALE" not in cal.describe()
    code, kernel = cal.source["code"], cal.source["kernel"]
    assert "other agent and pacer code" in cal.stale(code="0" * 16)
    assert "another kernel" in cal.stale(kernel=kernel + "-other")
    old = dataclasses.replace(cal, source={k: v for k, v in cal.source.items() if k != "code"})
    assert "before calibrations recorded the code" in old.stale(code=code)
    assert old.describe().endswith(
        "STALE, measured before calibrations recorded the code that measured them: "
        "run 'sudo hpnlab doctor --calibrate'"
    )
    assert calibration.defaults().stale() is None  # labelled DEFAULTS instead


def test_the_plan_says_its_calibration_is_stale(ring):
    cal = Calibration(2, 20.0, 50.0, source={"code": "0" * 16, "kernel": "?"}, path="/x/cal.json")
    plan = budget.plan(ring, cal)
    assert "other agent and pacer code" in plan.to_dict()["calibration_stale"]
    assert "; STALE, measured with other agent and pacer code" in render_plan(plan)
    assert "run 'sudo hpnlab doctor --calibrate'" in render_plan(plan)
    fresh = calibration.from_results(measured(), "c", "r", cores=2)
    assert budget.plan(ring, dataclasses.replace(fresh, path="/x")).to_dict()["calibration_stale"] is None


def test_the_calibration_drill_is_a_valid_ring(tmp_path):
    sc = load_scenario(calibration.write_drill(str(tmp_path)))
    [job] = sc.jobs
    assert (job.collective, list(job.hosts), job.iterations) == ("ring", RING, 6)
    assert sc.expect == [] and sc.time_dilation == 1 and sc.jobs_only


def test_the_first_undilated_run_calibrates_a_machine(tmp_path, capsys):
    path = str(tmp_path / "calibration.json")
    _calibrate_from_first_run(measured(dilation=4), path, str(tmp_path))
    _calibrate_from_first_run(measured(packets=10), path, str(tmp_path))
    assert not os.path.exists(path)
    _calibrate_from_first_run(measured(), path, str(tmp_path))
    assert calibration.load(path).agent_us_per_packet == 12.5
    said = capsys.readouterr().out
    assert "stored this machine's calibration" in said and f": calibration {path}, measured " in said
    _calibrate_from_first_run(measured(agents_us=99.0), path, str(tmp_path))
    assert calibration.load(path).agent_us_per_packet == 12.5  # never overwritten while current


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda r: r.update(faults=[{"action": "link-down"}]), "faults were applied"),
        (lambda r: r["fabric"].update(kind="region"), "a fabric of several datacenters"),
        (lambda r: r["metrics"]["jobs"].update(other={"collective": "ring"}), "2 jobs, not one"),
        (
            lambda r: r["metrics"]["jobs"]["ring8"].update(collective="alltoall"),
            "its job runs alltoall, not a ring",
        ),
        (lambda r: r["metrics"]["jobs"]["ring8"].update(retransmissions=7), "7 packets retransmitted"),
        (lambda r: r["metrics"]["jobs"]["ring8"].update(cnps=3), "DCQCN slowed its flows (3 CNPs)"),
        (lambda r: r["metrics"].update(pfc={"pauses": 5}), "5 pauses"),
    ],
)
def test_only_a_run_like_the_calibration_ring_calibrates_a_machine(tmp_path, capsys, change, why):
    """Drills' CPU per packet differs up to fivefold (an ECN drill's agents
    pace in user space): a machine calibrated by one unlike the ring would
    be planned at that cost for every drill."""
    path = str(tmp_path / "calibration.json")
    results = measured()
    change(results)
    assert calibration.unlike_the_ring(results) == why
    _calibrate_from_first_run(results, path, str(tmp_path))
    assert not os.path.exists(path)
    line = f"(no calibration taken from this run, which is unlike the ring a calibration measures: {why};"
    assert line in capsys.readouterr().out
    _calibrate_from_first_run(measured(), path, str(tmp_path))
    assert calibration.load(path).agent_us_per_packet == 12.5


def test_the_calibration_drill_is_like_the_ring_it_measures(tmp_path):
    sc = load_scenario(calibration.write_drill(str(tmp_path)))
    [job] = sc.jobs
    results = {
        "faults": list(sc.faults),
        "fabric": {"kind": sc.fabric.kind},
        "metrics": {"jobs": {job.name: {"collective": job.collective, "retransmissions": 0, "cnps": 0}}},
    }
    assert calibration.unlike_the_ring(results) is None


def test_an_undilated_run_replaces_a_stale_calibration_and_nothing_else(tmp_path, capsys):
    path = str(tmp_path / "calibration.json")
    stale = calibration.from_results(measured(agents_us=70.0), "c", "r", cores=2)
    calibration.save(dataclasses.replace(stale, source={**stale.source, "code": "0" * 16}), path)
    _calibrate_from_first_run(measured(dilation=4), path, str(tmp_path))
    assert calibration.load(path).agent_us_per_packet == 70.0  # dilated: measures nothing
    _calibrate_from_first_run(measured(), path, str(tmp_path))
    back = calibration.load(path)
    assert back.agent_us_per_packet == 12.5 and back.stale() is None
    assert "(the one before was measured with other agent and pacer code" in capsys.readouterr().out
    # A file that is not a calibration, or a link, is not this run's to replace.
    Path(path).write_text("{not json")
    _calibrate_from_first_run(measured(), path, str(tmp_path))
    assert Path(path).read_text() == "{not json"
    linked, target = tmp_path / "linked.json", tmp_path / "target.json"
    target.write_text(Path(path).read_text())
    calibration.save(dataclasses.replace(stale, source={**stale.source, "code": "0" * 16}), str(target))
    linked.symlink_to(target)
    _calibrate_from_first_run(measured(), str(linked), str(tmp_path))
    assert linked.is_symlink() and calibration.load(str(target)).agent_us_per_packet == 70.0


# --- hpnlab plan -----------------------------------------------------------------------


@pytest.fixture
def stored(tmp_path):
    path = str(tmp_path / "calibration.json")
    calibration.save(
        Calibration(2, 20.0, 200.0, "2026-01-01T00:00:00+00:00", {"command": "hpnlab doctor --calibrate"}),
        path,
    )
    return path


def test_hpnlab_plan_prints_the_table_and_the_dilation(stored, capsys):
    assert main(["plan", str(SCENARIOS / "allreduce-ring.yaml"), "--calibration", stored]) == 0
    out = capsys.readouterr().out
    assert out.startswith("capacity plan for allreduce-ring at time dilation 1")
    assert "s0h3  ring8 rank 3  4154     1,204      3" in out
    assert "switches: 14,444 packet-hops/s (1.5 switches per packet)" in out
    assert f"capacity: calibration {stored}, measured 2026-01-01T00:00:00+00:00" in out
    assert "recommended time dilation: 2 (rates /2, times x2 on this machine)" in out
    assert "DEFAULTS" not in out


def test_the_plan_says_when_the_calibration_played_the_agents_otherwise(ring):
    # 2 cores: a run would start 2 agent processes for the ring's 8 hosts
    def noted(processes):
        source = {"command": "c", "agent_processes": processes}
        return "measured with the agents in" in render_plan(
            budget.plan(ring, Calibration(2, 20.0, 50.0, "t", source, "/c"))
        )

    assert noted(8) and not noted(2) and not noted(None)
    assert "in 8 processes, where this scenario's run would start 2" in render_plan(
        budget.plan(ring, Calibration(2, 20.0, 50.0, "t", {"agent_processes": 8}, "/c"))
    )


def test_hpnlab_plan_without_calibration_says_defaults(tmp_path, capsys):
    assert (
        main(
            [
                "plan",
                str(SCENARIOS / "allreduce-ring.yaml"),
                "--dilation",
                "2",
                "--calibration",
                str(tmp_path / "none.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "capacity: DEFAULTS, not measured on this machine" in out
    assert "sudo hpnlab doctor --calibrate" in out
    assert "at time dilation 2: " in out


def test_hpnlab_plan_json(stored, capsys):
    assert main(["plan", str(SCENARIOS / "allreduce-ring.yaml"), "--calibration", stored, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["dilation"], d["fits"], d["calibration"]) == (2.0, True, stored)


def test_hpnlab_plan_bad_calibration_is_one_line(tmp_path, capsys):
    bad = write(tmp_path, json.dumps({**GOOD, "cores": -2}), "calibration.json")
    assert main(["plan", str(SCENARIOS / "allreduce-ring.yaml"), "--calibration", str(bad)]) == INVALID
    out, err = capsys.readouterr()
    assert out == "" and err == f"{bad}: cores: expected an integer > 0, got -2\n"


def test_hpnlab_plan_bad_scenario(tmp_path, capsys):
    bad = write(
        tmp_path,
        "name: t\ntopology: {kind: hpn}\nduration: 10\ntraffic: [{src: s0h0, dst: s1h0}]\ntime_dilation: 0\n",
    )
    assert main(["plan", str(bad)]) == INVALID
    assert capsys.readouterr().err == (f"{bad}: time_dilation: expected a number from 1 to 64, got 0\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "x.yaml", "--dilation", "0"],
        ["run", "x.yaml", "--dilation", "fast"],
        ["run", "x.yaml", "--dilation", "65"],
    ],
)
def test_a_bad_dilation_is_a_usage_error(argv, capsys):
    assert main(argv) == 2
    assert "expected a number from 1 to 64, or 'auto'" in capsys.readouterr().err


def test_run_auto_with_a_bad_calibration_stops_before_anything_is_built(tmp_path, capsys):
    bad = write(tmp_path, "{", "calibration.json")
    assert (
        main(["run", str(SCENARIOS / "allreduce-ring.yaml"), "--dilation", "auto", "--calibration", str(bad)])
        == INVALID
    )
    assert capsys.readouterr().err.startswith(f"{bad}: (top): invalid JSON")


@pytest.mark.parametrize(
    "name", ["crux-running.yaml", "two-jobs-contention.yaml", "crossdc-hierarchical.yaml"]
)
def test_the_plan_deals_hosts_to_processes_as_a_drill_does(name):
    # the drill deals the hosts of its agents' configs, in rank_specs order
    sc = load_scenario(SCENARIOS / name)
    hosts = list(rank_specs(sc.fabric, sc.jobs))
    assert agent_hosts(sc) == hosts and len(hosts) == len(set(hosts))
    plan = budget.plan(sc, Calibration(3, 20.0, 50.0))
    assert plan.peak.groups == tuple(tuple(hosts[i::3]) for i in range(3))


@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_bad_agent_process_count_stops_before_anything_is_built(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HPNLAB_AGENT_PROCESSES", "two")
    out = tmp_path / "report"
    argv = [command, str(SCENARIOS / "allreduce-ring.yaml")] + (
        ["--out", str(out)] if command == "run" else []
    )
    assert main(argv) == INVALID
    assert capsys.readouterr().err == (
        "hpnlab: error: HPNLAB_AGENT_PROCESSES: expected a whole number of processes, got 'two'\n"
    )
    assert not out.exists()


# --- bench/capacity.py's scenarios ------------------------------------------------------


def test_capacity_bench_scenarios_are_valid(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import capacity
    finally:
        sys.path.remove(str(ROOT / "bench"))
    for hosts in (8, 16):
        sc = load_scenario(capacity.write_scenario(str(tmp_path), hosts))
        [job] = sc.jobs
        assert len(sc.fabric.hosts()) == len(job.hosts) == hosts
        assert sc.fabric.params["planes"] == 2 and sc.fabric.params["hosts_per_segment"] == 8
        assert (job.collective, job.bytes, job.compute_s) == ("ring", 1_000_000, 0.2)
    with pytest.raises(ValueError, match="segments of 8"):
        capacity.scenario_doc(12)
