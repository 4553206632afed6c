"""The first drills, end to end through `hpnlab run`: the dual-ToR host rides
through a link failure, the single-ToR host stalls for the outage."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import drillrun
import pytest

from testbed.emulation import capabilities


def test_dual_tor_survives_link_failure(tmp_path, leak_check):
    r = drillrun.run("scenarios/dual-tor-link-failure.yaml", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "results.json").read_text())
    host = res["metrics"]["hosts"]["s0h0"]
    assert host["max_silence_s"] <= 1.0
    assert host["fault_throughput_ratio"] >= 0.45
    assert res["metrics"]["fidelity"]["min"] >= 0.9
    # The controller reacted to the port going down well inside a second.
    assert res["faults"][0]["converged_s"] is not None and res["faults"][0]["converged_s"] < 1.0
    assert (tmp_path / "summary.md").exists() and (tmp_path / "throughput.png").stat().st_size > 5000
    # the report's picture of the fabric marks the link that failed
    assert "failed link" in (tmp_path / "fabric.svg").read_text()


def test_a_degraded_interconnect_slows_cross_dc_traffic_to_its_new_rate(tmp_path, leak_check):
    r = drillrun.run("scenarios/crossdc-degrade.yaml", tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "link-degrade d0b0 <-> d1b0 to 25% of its rate" in r.stdout
    res = json.loads((tmp_path / "results.json").read_text())
    host = res["metrics"]["hosts"]["d0s0h0"]
    # What the receivers got while the interconnect ran at a quarter, against before
    assert 0.15 <= host["fault_throughput_ratio"] <= 0.40, host
    assert host["recovered_throughput_ratio"] >= 0.9, host
    # The DCI ports were held to the rate they had at each moment, and kept to it
    links = res["metrics"]["fidelity"]["links"]
    dci = {k: v for k, v in links.items() if k.startswith(("d0b0-e3~d1b0-e3", "d0b1-e3~d1b1-e3"))}
    assert dci and all(v["fidelity"] >= 0.9 for v in dci.values()), dci
    degrades = [f for f in res["faults"] if f["action"] == "link-degrade"]
    assert [f["rate"] for f in degrades] == [0.25, 0.25]
    assert all("converged_s" not in f for f in res["faults"])  # no route moved
    assert [w["kind"] for w in res["metrics"]["outages"]] == ["degraded", "degraded"]


def test_a_dead_tor_costs_a_dual_tor_host_one_port(tmp_path, leak_check):
    """switch-down takes every link of t0r0k0 down at once: its hosts go on
    over their other ToR, and every link of it counts as failed."""
    r = drillrun.run("scenarios/tor-failure.yaml", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "results.json").read_text())
    host = res["metrics"]["hosts"]["s0h0"]
    assert host["max_silence_s"] <= 1.0, host
    # Each flow's port is a hash of its 5-tuple: all 8 on one port happens
    # once in 128 runs. What s0h0 keeps follows from what its ports carried
    # before the fault (t = 5 s): with both in use, half; with one, all.
    before = port_mbit(res, "s0h0", 1.0, 4.9)
    after = port_mbit(res, "s0h0", 6.0, 14.0)
    in_use = [p for p, mbit in before.items() if mbit > 5.0]
    low, high = (0.4, 0.65) if len(in_use) == 2 else (0.9, 1.1)
    assert low <= host["fault_throughput_ratio"] <= high, (host, before)
    # the dead ToR's port carries nothing, the other one all of it
    to = {info["to"]: port for port, info in res["series"]["port_info"].items() if info["host"] == "s0h0"}
    assert after[to["t0r0k0"]] < 1.0 and after[to["t0r0k1"]] > 30.0, after
    downs = [f for f in res["faults"] if f["action"] == "link-down"]
    assert len(downs) == 6 and {f["link"][0] for f in downs} == {"t0r0k0"}
    assert all(f["converged_s"] is not None for f in downs)
    assert "s0h0 kept" in (tmp_path / "summary.md").read_text()  # the report says what it found


def port_mbit(res, host, start, end):
    """Each NIC port of `host`: its mean egress Mbit/s over [start, end] s of
    the run (the report's 10 Hz port series, from the wire's counters)."""
    series = res["series"]
    out = {}
    for port, values in series["ports"].items():
        if series["port_info"][port]["host"] == host:
            got = [v for t, v in zip(series["t"], values) if start <= t <= end and v is not None]
            out[port] = sum(got) / len(got)
    return out


def test_single_tor_stalls_for_outage(tmp_path, leak_check):
    junit = tmp_path.parent / f"{tmp_path.name}.xml"  # beside the report: --out holds hpnlab's files only
    r = drillrun.run("scenarios/single-tor-link-failure.yaml", tmp_path, "--junit", str(junit))
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "results.json").read_text())
    host = res["metrics"]["hosts"]["s0h0"]
    assert host["max_silence_s"] >= 9.0
    assert host["during_mbit"] < 1.0 < host["before_mbit"]
    # the same outcome as a CI system reads it: every expectation a passing case
    suite = ET.parse(junit).getroot()
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert {n for g, n in cases if g == "expectations"} == {e["name"] for e in res["expectations"]}
    assert suite.get("failures") == "0" and {g for g, _ in cases} >= {"expectations", "trust"}


def test_eight_rails_lose_one_port_in_sixteen_or_one_nic_in_eight(tmp_path, leak_check):
    """HPN Fig. 18a at the paper's shape: a host with 8 rails sends on all of
    them. Dual-ToR, one failed NIC-ToR link costs one port of 16 (the
    paper: -6.25%); single-ToR, it costs the NIC's only port, one of 8."""
    ratio = {}
    for name in ("dual-tor-8rails", "single-tor-8rails"):
        r = drillrun.run(f"scenarios/{name}.yaml", tmp_path / name)
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads((tmp_path / name / "results.json").read_text())
        ratio[name] = res["metrics"]["hosts"]["s0h0"]["fault_throughput_ratio"]
    assert abs(ratio["dual-tor-8rails"] - 15 / 16) <= 0.03, ratio
    assert abs(ratio["single-tor-8rails"] - 7 / 8) <= 0.03, ratio


def test_missing_kernel_feature_refused_before_building(tmp_path, leak_check):
    if capabilities.has(capabilities.probe(), "netem"):
        pytest.skip("this kernel has netem: nothing to refuse")
    topo = tmp_path / "delayed.yaml"
    topo.write_text(
        "kind: region\nfabrics: [{kind: hpn, segments: 1, hosts_per_segment: 2},"
        " {kind: hpn, segments: 1, hosts_per_segment: 2}]\n"
        "dci: {oversubscription: 2, delay: 2ms}\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "up", str(topo), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 3  # cannot run here, as opposed to 1 (failed)
    assert "netem" in r.stderr and "sch_netem" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
