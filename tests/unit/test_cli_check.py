"""`hpnlab check` and `hpnlab topo show`, called through testbed.cli.main."""

import json
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.cli.common import INVALID
from testbed.fabric.model import Fabric
from testbed.fabric.scenario import load_topology

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SHIPPED = sorted(TOPOLOGIES.glob("*.yaml"))

SCENARIO = """\
name: smoke
topology: {kind: clos}
duration: 5
traffic: [{src: s0h0, dst: s1h0}]
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_shipped_topologies_check(capsys):
    assert len(SHIPPED) >= 5
    assert main(["check", *map(str, SHIPPED)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert len(lines) == len(SHIPPED)
    assert f"OK {TOPOLOGIES / 'hpn-mini.yaml'} (topology: 8 hosts, 8 switches, 24 links)" in lines


def test_scenario_check(tmp_path, capsys):
    path = _write(tmp_path, "s.yaml", SCENARIO)
    assert main(["check", path]) == 0
    assert capsys.readouterr().out == f"OK {path} (scenario: 8 hosts, 4 switches, 12 links)\n"


def test_one_bad_file_fails_the_whole_check(tmp_path, capsys):
    good = _write(tmp_path, "good.yaml", "kind: hpn\n")
    bad = _write(tmp_path, "bad.yaml", "kind: hpn\nplanes: 3\n")
    assert main(["check", good, bad]) == INVALID
    out, err = capsys.readouterr()
    assert out.startswith(f"OK {good} (topology:")
    assert err == f"{bad}: planes: expected one of 1, 2, got 3\n"


def test_check_as_json_gives_each_files_kind_or_problems(tmp_path, capsys):
    good = _write(tmp_path, "good.yaml", "kind: hpn\n")
    bad = _write(tmp_path, "bad.yaml", "kind: hpn\nplanes: 3\n")
    assert main(["check", "--json", good, bad]) == INVALID
    out, err = capsys.readouterr()
    assert err == ""
    first, second = json.loads(out)
    assert first == {"file": good, "valid": True, "kind": "topology", "hosts": 8, "switches": 8, "links": 24}
    assert second == {
        "file": bad,
        "valid": False,
        "problems": [{"field": "planes", "message": "expected one of 1, 2, got 3"}],
    }


def test_missing_file(tmp_path, capsys):
    path = str(tmp_path / "nope.yaml")
    assert main(["check", path]) == INVALID
    assert capsys.readouterr().err == f"{path}: (top): file not found\n"


@pytest.mark.parametrize("argv", [[], ["check"], ["topo"], ["topo", "show"], ["frobnicate"]])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "check" in capsys.readouterr().out


def test_every_commands_help_says_whether_it_needs_root_and_gives_an_example(capsys):
    from testbed.cli import EXAMPLES, ROOT_COMMANDS, build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(EXAMPLES) == set(commands)
    for name in commands:
        assert main([name, "--help"]) == 0
        out = capsys.readouterr().out
        assert ("needs root (sudo)" in out) == (name in ROOT_COMMANDS), name
        assert f"example:\n  {EXAMPLES[name]}" in out


def test_version_names_the_installed_package(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"hpnlab {version('hpnlab')}"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_topo_show_json_round_trips(path, capsys):
    assert main(["topo", "show", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    fabric = Fabric.from_dict(data)
    _, expected = load_topology(path)
    assert fabric == expected
    # Tuples (NIC ports) become lists in JSON, so compare after the same trip.
    assert json.loads(json.dumps(fabric.to_dict())) == data


def test_topo_show_text(capsys):
    assert main(["topo", "show", str(TOPOLOGIES / "hpn-mini.yaml")]) == 0
    out = capsys.readouterr().out
    assert "kind hpn" in out and "scale 1:5000" in out and "MTU 9000" in out and "2 plane(s)" in out
    for header in ("NODES", "LINKS", "NICS", "dpid", "scaled Mbit/s", "mac"):
        assert header in out
    access = next(line for line in out.splitlines() if line.startswith("s0h0-n0p0"))
    assert access.split()[:6] == ["s0h0-n0p0", "t0r0k0-e1", "access", "0", "200Gbit", "40"]


def test_topo_show_region_mentions_dci(capsys):
    assert main(["topo", "show", str(TOPOLOGIES / "region-2dc.yaml")]) == 0
    assert "DCI: 2 links of" in capsys.readouterr().out


def test_topo_show_accepts_a_scenario(tmp_path, capsys):
    path = _write(tmp_path, "s.yaml", SCENARIO)
    assert main(["topo", "show", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "clos"


def test_topo_show_invalid_file(tmp_path, capsys):
    path = _write(tmp_path, "t.yaml", "kind: clos\nspines: 0\n")
    assert main(["topo", "show", path]) == INVALID
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"{path}: spines: expected an integer from 1 to 64, got 0\n"


def test_crux_plan_ranks_the_jobs_of_a_scenario(capsys):
    """The plan comes from the controller's placement code, run as a
    process: three jobs, the small intense one first, and the one real
    contention (small against the large job it runs beside) kept apart."""
    assert main(["crux", "plan", "scenarios/two-jobs-contention.yaml", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["order"][0] == "small" and plan["level_count"] == 8
    assert [(e["high"], e["low"]) for e in plan["edges"]] == [("small", "large-shared")]
    assert plan["levels"]["small"] < plan["levels"]["large-shared"]
    assert main(["crux", "plan", "scenarios/two-jobs-contention.yaml", "--levels", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Crux plan: two-jobs-contention") and "1 priority levels (--levels)" in text
    assert "keeps 0% of that weight" in text and "|" not in text  # aligned columns, as plan prints
    assert main(["crux", "plan", "scenarios/two-jobs-contention.yaml", "--levels", "1", "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "# Crux plan: two-jobs-contention" in text and "| job (by priority) |" in text


def test_crux_plan_needs_jobs(capsys):
    assert main(["crux", "plan", "scenarios/dual-tor-link-failure.yaml"]) == INVALID
    err = capsys.readouterr().err
    assert "jobs: expected at least one training job to plan" in err


@pytest.mark.parametrize("folder,kind", [("scenarios", "scenario"), ("topologies", "topology")])
def test_shipped_files_name_their_schema_for_editors(folder, kind):
    """The first line tells a YAML language server which schema to check and
    complete the file with; the path it names is the schema hpnlab uses."""
    files = sorted((TOPOLOGIES.parent / folder).glob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        first = path.read_text().splitlines()[0]
        assert first == f"# yaml-language-server: $schema=../testbed/fabric/schemas/{kind}.json", path
        assert (path.parent / first.split("=", 1)[1]).resolve().is_file()


@pytest.mark.parametrize("kind", ["scenario", "topology"])
def test_every_field_an_editor_offers_says_what_it_is(kind):
    """An editor shows a property's `description` while one types it."""
    from testbed.fabric.schema import load_schema

    bare = []

    def walk(node, owner):
        if isinstance(node, dict):
            for name, prop in (node.get("properties") or {}).items():
                if not owner.startswith("is-") and not (isinstance(prop, dict) and prop.get("description")):
                    bare.append(f"{owner}.{name}")
                walk(prop, name)
            for name, sub in (node.get("$defs") or {}).items():
                walk(sub, name)
            for key, sub in node.items():
                if key not in ("properties", "$defs", "if"):  # an `if` is a condition, not a field
                    walk(sub, owner)
        elif isinstance(node, list):
            for sub in node:
                walk(sub, owner)

    walk(load_schema(kind), "")
    assert bare == []
