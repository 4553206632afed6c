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
        # measured on the probes' path, which the fault took away: the
        # failed links carried probes before it and none after. (A repair
        # faster than a flow's spacing need cost no probe, so lost and hit
        # flows do not tell whether the fault struck: in one run a host
        # link's failure lost no probe and cut no flow off for long.)
        assert f["crossing_pps"] >= 60, (name, f)
        assert f["crossing_after_pps"] is not None and f["crossing_after_pps"] < 0.1 * f["crossing_pps"], (
            name,
            f,
        )
        assert res["metrics"][f"{name}_gap_ms"] == f["gap_ms"] < 50, (name, f)
    assert "Probes: delivery gaps" in (tmp_path / "summary.md").read_text()
