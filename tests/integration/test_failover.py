"""Failover on a real fabric: the probes' longest delivery gap around a
ToR-aggregation link, an aggregation switch and a host link failing, each
measured where the failed links carried probes before; and the switches
holding fast-failover groups the controller installed."""

import json

import drillrun

FAULTS = ("tor_agg", "agg", "host_link")


def test_failover_gaps_stay_under_50_ms(tmp_path, leak_check):
    r = drillrun.run("scenarios/failover-probe.yaml", tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    res = json.loads((tmp_path / "results.json").read_text())
    probe = res["metrics"]["probe"]
    assert probe["received"] > 0.99 * probe["sent"]
    for name in FAULTS:
        f = probe["faults"][name]
        # measured on the probes' path, and the gap is longer than the
        # sending interval only because the fault cut some flows off
        assert f["crossing_pps"] >= 60, (name, f)
        assert f["flows_hit"] >= 1 or f["lost"] >= 1, (name, f)
        assert res["metrics"][f"{name}_gap_ms"] == f["gap_ms"] < 50, (name, f)
    assert "Probes: delivery gaps" in (tmp_path / "summary.md").read_text()
