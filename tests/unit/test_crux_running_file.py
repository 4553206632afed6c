"""Crux as it runs, from the scenario's `crux:` block to the controller's
announcement and back into the report."""

import shutil
from pathlib import Path

import pytest
import yaml

from testbed.drill.announce import announcement
from testbed.fabric.dilation import dilate
from testbed.fabric.problems import ConfigError
from testbed.fabric.records import CruxRunning
from testbed.fabric.scenario import load_scenario
from testbed.results import crux
from testbed.results.dilation import to_emulated
from testbed.results.markdown_jobs import section_crux

ROOT = Path(__file__).resolve().parents[2]


def scenario(tmp_path, block, **changes):
    (tmp_path / "scenarios").mkdir(exist_ok=True)
    shutil.copy(ROOT / "topologies" / "hpn-mini.yaml", tmp_path / "scenarios")
    doc = yaml.safe_load((ROOT / "scenarios" / "crux-contention.yaml").read_text())
    doc.pop("expect")
    doc["topology"] = "hpn-mini.yaml"
    if block is not None:
        doc["crux"] = block
    doc.update(changes)
    path = tmp_path / "scenarios" / "running.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_crux_block_reaches_the_controller_dilated(tmp_path):
    sc = load_scenario(scenario(tmp_path, {"window": "4s", "poll": "150ms"}))
    assert sc.crux == CruxRunning(window_s=4.0, idle_s=1.0, poll_s=0.15)
    slow = dilate(sc, 2)
    assert slow.crux == CruxRunning(window_s=8.0, idle_s=2.0, poll_s=0.3)
    told = announcement(slow.fabric, slow.jobs, slow.crux)
    assert told["crux_running"] == {"window_s": 8.0, "idle_s": 2.0, "poll_s": 0.3}
    assert "crux_running" not in announcement(sc.fabric, sc.jobs)
    assert load_scenario(scenario(tmp_path, None)).crux is None


@pytest.mark.parametrize(
    "block, changes, field, said",
    [
        ({}, {"queues": None}, "crux", "expected queue classes"),
        ({"poll": "20ms"}, {}, "crux.poll", "expected at least 100ms"),
        ({"window": "1s", "poll": "100ms"}, {}, "crux.window", "expected at least 20 polls"),
        ({"window": "7s"}, {}, "crux.window", "before the run does"),
        ({"idle": "0s"}, {}, "crux.idle", "expected more than 0s"),
    ],
)
def test_a_crux_block_that_cannot_work_is_refused_in_one_line(tmp_path, block, changes, field, said):
    doc_changes = {k: v for k, v in changes.items() if v is not None}
    path = scenario(tmp_path, block, **doc_changes)
    if "queues" in changes:
        raw = yaml.safe_load(path.read_text())
        raw.pop("queues")
        raw.pop("transport")
        path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as e:
        load_scenario(path)
    mine = [p for p in e.value.problems if p.field == field]
    assert mine and said in mine[0].message, [str(p) for p in e.value.problems]


def test_without_crux_jobs_there_is_nothing_to_run(tmp_path):
    raw = yaml.safe_load(scenario(tmp_path, {}).read_text())
    for job in raw["jobs"]:
        job["priority"] = "fixed"
    path = tmp_path / "scenarios" / "fixed.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="at least one job with priority: crux"):
        load_scenario(path)


def test_what_crux_did_comes_back_in_emulated_time_and_in_the_report():
    events = [
        {"event": "routes", "t": 99.0},
        {"event": "crux", "t": 100.0, "why": "planned from the declared jobs", "levels": {"a": 0, "b": 1}},
        {
            "event": "crux",
            "t": 102.0,
            "why": "profiling b alone at the top level",
            "levels": {"a": 1, "b": 0},
        },
        {
            "event": "crux_profile",
            "t": 104.0,
            "job": "b",
            "declared": {"compute_s": 0.4, "bytes": 1_000_000},
            "measured": {
                "compute_s": 0.8,
                "period_s": 1.0,
                "iterations": 3,
                "resolution_s": 0.04,
                "bytes": 900_000,
            },
            "ratio": {"compute": 2.0, "bytes": 0.9},
            "unseen": [],
        },
    ]
    rec = crux.record(events, t0=101.0)
    assert [d["at"] for d in rec["decisions"]] == [-1.0, 1.0]
    emulated = to_emulated({"metrics": {"crux": rec}}, 2)["metrics"]["crux"]
    assert [d["at"] for d in emulated["decisions"]] == [-0.5, 0.5]
    b = emulated["jobs"]["b"]
    assert (b["measured"]["compute_s"], b["declared"]["compute_s"], b["ratio"]["compute"]) == (0.4, 0.2, 2.0)
    text = section_crux(emulated)
    assert "profiling b alone at the top level" in text and "| b | 0.2 | 0.4 | 2 |" in text
    assert crux.record([{"event": "routes", "t": 1.0}], 0.0) is None


def test_crux_plan_shows_what_a_finished_run_measured_and_decided(tmp_path, capsys):
    import json

    from testbed.cli import main

    ran = {
        "decisions": [{"at": 0.5, "why": "profiling big alone at the top level", "levels": {"big": 0}}],
        "jobs": {
            "big": {
                "declared": {"compute_s": 0.5},
                "measured": {"compute_s": 0.49},
                "ratio": {"compute": 0.98},
            }
        },
    }
    (tmp_path / "results.json").write_text(json.dumps({"scenario": "x", "metrics": {"crux": ran}}))
    assert main(["crux", "plan", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "profiling big alone at the top level" in out
    assert any(line.split()[:4] == ["big", "0.5", "0.49", "0.98"] for line in out.splitlines()), out
    assert main(["crux", "plan", str(tmp_path), "--markdown"]) == 0
    assert "| big | 0.5 | 0.49 | 0.98 |" in capsys.readouterr().out
    assert main(["crux", "plan", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ran
    (tmp_path / "results.json").write_text(json.dumps({"scenario": "x", "metrics": {}}))
    assert main(["crux", "plan", str(tmp_path)]) == 2
    assert "has no crux: block" in capsys.readouterr().err
