"""Files written by someone else, run by root: what reaches a shell, a
path, a terminal or a report, and what a child process imports."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.cli.common import FAILED, INVALID, NOT_RUN, OK, UNTRUSTWORTHY
from testbed.cli.drill import outcome_text, run_status
from testbed.emulation.procs import own_module
from testbed.emulation.rundir import FolderError, make_private_dir, prepare_report_dir, write_private
from testbed.fabric.problems import printable
from testbed.results.markdown import render_summary
from testbed.results.text import md_text

ROOT = Path(__file__).resolve().parents[2]
TRAFFIC = "traffic:\n  - {src: s0h0, dst: s1h0}\n"


def scenario(folder, topology, name="s.yaml"):
    path = folder / name
    path.write_text(f"name: x\ntopology: {topology}\nduration: 5\n" + TRAFFIC)
    return str(path)


def check(capsys, *paths):
    status = main(["check", *map(str, paths)])
    out, err = capsys.readouterr()
    return status, out, err.splitlines()


# --- names from file names --------------------------------------------------------


@pytest.mark.parametrize("stem", ["a$(touch${IFS}PWN)", "a b", "-rf", "a;b", "x\x1b[2J", "é"])
def test_a_topology_file_name_that_is_not_a_plain_name_is_refused(tmp_path, capsys, stem):
    topo = tmp_path / f"{stem}.yaml"
    topo.write_text("kind: hpn\n")
    status, out, err = check(capsys, topo)
    assert status == INVALID and out == "" and len(err) == 1
    assert "cannot name a fabric" in err[0] and "\x1b" not in err[0]
    if "\x1b" in stem:
        return  # YAML itself cannot hold it in a scenario
    # and so is a scenario that names it
    status, _, err = check(capsys, scenario(tmp_path, f"'{topo.name}'"))
    assert status == INVALID and len(err) == 1 and "cannot name a fabric" in err[0]


@pytest.mark.parametrize("name", ["ring\\n", "a b", "x;y"])
def test_a_scenario_name_must_be_plain_to_its_last_character(tmp_path, capsys, name):
    path = tmp_path / "s.yaml"
    path.write_text(f'name: "{name}"\ntopology: {{kind: hpn}}\nduration: 5\n' + TRAFFIC)
    status, _, err = check(capsys, path)
    assert status == INVALID and len(err) == 1 and ": name: expected a name" in err[0]


# --- which files topology: may name -------------------------------------------------


@pytest.mark.parametrize(
    "where", ["/etc/machine-id", "../outside.yaml", "/root/.ssh/id_rsa", "sub/../../outside.yaml"]
)
def test_topology_outside_the_tree_is_never_read(tmp_path, capsys, where):
    (tmp_path / "outside.yaml").write_text("SECRET-CONTENT\n")
    inner = tmp_path / "lab"
    inner.mkdir()
    status, _, err = check(capsys, scenario(inner, where))
    assert status == INVALID and len(err) == 1
    assert "outside the scenario's folder" in err[0]
    # one answer whether or not the file exists: no oracle, no content
    assert "not found" not in err[0] and "SECRET" not in err[0]


def test_a_symbolic_link_out_of_the_tree_is_refused(tmp_path, capsys):
    (tmp_path / "outside.yaml").write_text("kind: hpn\n")
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "t.yaml").symlink_to(tmp_path / "outside.yaml")
    status, _, err = check(capsys, scenario(lab, "t.yaml"))
    assert status == INVALID and "outside the scenario's folder" in err[0]
    # allowed once its folder is named on the command line
    assert main(["check", "--topology-dir", str(tmp_path), str(lab / "s.yaml")]) == OK


def test_a_topology_in_the_tree_and_the_shipped_ones_are_read(tmp_path, capsys):
    (tmp_path / "topos").mkdir()
    (tmp_path / "topos" / "t.yaml").write_text("kind: hpn\n")
    assert check(capsys, scenario(tmp_path, "topos/t.yaml"))[0] == OK
    shipped = ROOT / "topologies" / "hpn-mini.yaml"
    assert check(capsys, scenario(tmp_path, str(shipped), "abs.yaml"))[0] == OK


def test_a_refused_file_is_not_echoed(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("the-secret-value-1234\n")
    status, _, err = check(capsys, scenario(tmp_path, "t.yaml"))
    assert status == INVALID and len(err) == 1
    assert "got a string" in err[0] and "secret" not in err[0]


# --- text from files on the terminal and in reports ------------------------------------


def test_control_characters_are_shown_not_obeyed():
    assert printable("ok\x1b[2K\rPASSED\u202e") == "ok\\x1b[2K\\rPASSED\\u202e"
    assert printable("plain text: 1 < 2") == "plain text: 1 < 2"


def test_an_expectation_name_cannot_print_escape_codes():
    results = {
        "expectations": [
            {"status": "failed", "name": "\x1b[2K\rPASSED all", "expected": "<= 1", "measured": 3}
        ],
        "problems": ["a tool said \x1b]0;pwned\x07"],
        "metrics": {"fidelity": {"min": 1.0}},
        "trustworthy": True,
        "passed": False,
        "trust": {"checks": []},
    }
    text = outcome_text(results, "out/summary.md")
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "FAILED        \\x1b[2K\\rPASSED all: expected <= 1" in text


def test_a_description_cannot_add_markup_to_the_summary():
    results = {
        "scenario": "x",
        "description": "**PASSED** <img src=x onerror=y> [link](http://x)",
        "expectations": [
            {
                "name": "`all` *fine*",
                "metric": "max_silence_s",
                "status": "failed",
                "expected": "<= 1",
                "measured": 3,
            }
        ],
        "problems": ["a <b>problem</b>"],
        "metrics": {},
        "faults": [],
    }
    lines = render_summary(results).splitlines()
    assert lines[2] == "\\*\\*PASSED\\*\\* \\<img src=x onerror=y\\> \\[link\\](http://x)"
    assert "> - a \\<b\\>problem\\</b\\>" in lines
    assert any(line.startswith("| \\`all\\` \\*fine\\* |") for line in lines)
    assert md_text("a\nb |c") == "a b |c"


# --- child processes import hpnlab's code only ------------------------------------------


def test_a_child_ignores_modules_where_the_user_stands(tmp_path):
    fake = tmp_path / "controllers"
    fake.mkdir()
    marker = tmp_path / "RAN"
    for name in ("__init__.py", "run.py"):
        (fake / name).write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONSTARTUP=str(fake / "__init__.py"))
    argv = own_module("controllers.run", "--help")
    assert argv[1:4] == ["-I", "-u", "-m"]
    r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not marker.exists()
    # the same command without -I would have run the fake: the test can fail
    plain = [sys.executable, "-m", "controllers.run", "--help"]
    subprocess.run(plain, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert marker.exists()


# --- folders root writes in ---------------------------------------------------------------


def test_a_run_folder_is_new_or_empty_and_private(tmp_path):
    made = make_private_dir(str(tmp_path / "a" / "run"))
    assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(FolderError, match="not empty"):
        make_private_dir(str(tmp_path / "full"))
    # a link (a trailing slash too) is followed once; the folder it led to is used
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert make_private_dir(str(tmp_path / "link") + "/") == str(tmp_path / "empty")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(FolderError, match="other users"):
        make_private_dir(str(shared))
    # nor below a folder others can write in (they could swap what is in it)
    with pytest.raises(FolderError, match="shared can be written by other users"):
        make_private_dir(str(shared / "below" / "run"))
    assert not (shared / "below").exists()
    # /tmp is shared but sticky: a new folder of ours in it is fine
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert make_private_dir(str(sticky / "run")) == str(sticky / "run")
    # and never in (or below) another user's folder (only root can make one)
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, 65534, 65534)
        with pytest.raises(FolderError, match="belongs to uid 65534"):
            make_private_dir(str(other / "run"))


def test_force_replaces_only_an_earlier_report(tmp_path):
    out = tmp_path / "out"
    prepare_report_dir(str(out))
    for name in ("results.json", "summary.md", "throughput.png"):
        (out / name).write_text("old")
    (out / "run").mkdir()
    (out / "run" / "pauses.json").write_text("{}")
    with pytest.raises(FolderError, match="not empty"):
        prepare_report_dir(str(out))
    prepare_report_dir(str(out), force=True)
    assert os.listdir(out) == []  # nothing of the earlier run is left to be read as this one's
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FolderError, match="'notes.txt'"):
        prepare_report_dir(str(out), force=True)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_private_file_is_never_written_through_a_link(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError):
        write_private(str(tmp_path / "link"), "x")
    with pytest.raises(FileExistsError):
        write_private(str(target), "x")
    assert target.read_text() == "keep"
    write_private(str(tmp_path / "new"), "x")
    assert stat.S_IMODE(os.lstat(tmp_path / "new").st_mode) == 0o600


def test_an_unusable_out_folder_is_one_line_before_anything_runs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "other.txt").write_text("")
    if os.geteuid() != 0:
        pytest.skip("run refuses non-root before it looks at --out")

    def never(*args, **kwargs):
        raise AssertionError("a fabric would be built")

    monkeypatch.setattr("testbed.drill.runner.run_scenario", never)
    # the folder is looked at only when the machine is free; a unit test must
    # not depend on whether a fabric happens to be up beside it
    monkeypatch.setattr("testbed.emulation.ledger.lock_is_held", lambda: False)
    status = main(["run", str(ROOT / "scenarios" / "dual-tor-link-failure.yaml"), "--out", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert status == INVALID and len(err) == 1 and "--out" in err[0]


# --- exit statuses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "results,status",
    [
        ({"passed": True, "trustworthy": True, "problems": []}, OK),
        ({"passed": False, "trustworthy": True, "problems": []}, FAILED),
        ({"passed": False, "trustworthy": False, "problems": []}, UNTRUSTWORTHY),
        ({"passed": False, "trustworthy": True, "problems": ["routes not applied"]}, NOT_RUN),
    ],
)
def test_a_run_exit_status_says_what_happened(results, status):
    assert run_status(results) == status
    assert len({OK, FAILED, INVALID, UNTRUSTWORTHY, NOT_RUN, 3}) == 6


@pytest.mark.parametrize("content", ["[1, 2]", '{"metrics": 5}', "{", '{"scenario": "\\u001b[2Jx"}'])
def test_compare_reads_results_from_elsewhere_without_a_traceback(tmp_path, capsys, content):
    (tmp_path / "results.json").write_text(content)
    status = main(["compare", str(tmp_path)])
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    if status == OK:
        assert "\\x1b[2Jx" in out
    else:
        assert status == INVALID and len(err.splitlines()) == 1 and "Traceback" not in err


def test_only_yaml_files_are_read_as_topologies(tmp_path, capsys):
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("kind: Config\n")
    status, _, err = check(capsys, scenario(tmp_path, ".kube/config"))
    assert status == INVALID and "expected a .yaml file" in err[0] and "Config" not in err[0]


def test_a_topology_is_judged_where_it_really_is_once_open(tmp_path):
    """The check on its name is made again on the open file: a link
    swapped in between the two is caught."""
    from testbed.fabric.loader import load_yaml
    from testbed.fabric.problems import ConfigError

    (tmp_path / "t.yaml").write_text("kind: hpn\n")
    seen = []
    assert load_yaml(tmp_path / "t.yaml", within=lambda real: seen.append(real) or True)
    assert seen == [str(tmp_path / "t.yaml")]
    with pytest.raises(ConfigError, match="not where it may be read from"):
        load_yaml(tmp_path / "t.yaml", within=lambda real: False)


def test_a_fabric_goes_on_tearing_down_when_its_output_is_gone():
    """A parent killed while a drill ran closes the pipe the drill logs to;
    its teardown must still reach the sweep of what it recorded."""
    from testbed.emulation.realize import saying_never_fails

    def closed_pipe(message):
        raise BrokenPipeError(32, "Broken pipe")

    said = []
    saying_never_fails(closed_pipe)("torn down")  # nothing raised
    saying_never_fails(said.append)("fabric up")
    assert said == ["fabric up"]
