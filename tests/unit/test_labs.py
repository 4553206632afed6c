"""The labs as data (every shipped lab loads, its files check) and the
checker's judging, report and JUnit output, from synthetic results; `lab
list`, `start`, `reset` without root."""

import json
import os
from pathlib import Path
from xml.etree import ElementTree

import pytest

from testbed.cli import main
from testbed.cli.common import INVALID, OK
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import check_files
from testbed.lab import params
from testbed.lab.catalog import all_labs, find_lab, load_lab
from testbed.lab.checker import RunOutcome, judge, junit, render, run_all
from testbed.lab.files import copy_filled


def test_every_shipped_lab_loads_and_its_files_check(tmp_path):
    labs = all_labs()
    assert [lab.number for lab in labs] == list(range(1, len(labs) + 1)) and len(labs) >= 2
    for lab in labs:
        assert (lab.path / "README.md").read_text().startswith(f"# Lab {lab.number:02d}")
        for folder in (lab.starter, lab.solution):
            names = sorted(p.name for p in folder.iterdir())
            assert names == sorted(lab.runs), (lab.slug, folder)
            used = set().union(*(params.placeholders((folder / n).read_text()) for n in names))
            assert used == {p.name for p in lab.parameters}, (lab.slug, folder)
            for p in lab.parameters:  # every student's numbers make a valid file
                for value in p.choices:
                    filled = tmp_path / f"{lab.slug}-{folder.name}-{value:g}"
                    filled.mkdir()
                    copy_filled(folder, str(filled), {p.name: value}, replace=False)
                    assert check_files([str(filled / n) for n in names]) == []
            if not lab.parameters:
                assert check_files([str(folder / n) for n in names]) == []
    assert find_lab("1").slug == find_lab("01").slug == find_lab("01-dual-tor").slug == "01-dual-tor"
    with pytest.raises(LookupError, match="no lab '9'"):
        find_lab("9")


@pytest.mark.parametrize(
    "entry,message",
    [
        ("{run: ../x.yaml, metric: max_silence_s, max: 1}", "checks[0]: expected run: a plain scenario file"),
        ("{run: a.yaml, metric: nosuch, max: 1}", "checks[0]: unknown metric 'nosuch'"),
        ("{run: a.yaml, metric: max_silence_s}", "checks[0]: expected min, max or both"),
        ("{run: a.yaml, metric: max_silence_s, max: 1, weight: 0}", "checks[0]: expected a weight"),
        ("{run: a.yaml, metric: max_silence_s, max: 1, grade: 5}", "checks[0]: unknown field 'grade'"),
    ],
)
def test_a_bad_checks_file_is_refused_on_one_line(tmp_path, entry, message):
    lab = tmp_path / "07-x"
    lab.mkdir()
    (lab / "checks.yaml").write_text(f"title: x\nminutes: 5\nchecks: [{entry}]\n")
    with pytest.raises(ConfigError) as e:
        load_lab(lab)
    [problem] = e.value.problems
    assert message in str(problem) and str(problem).startswith(str(lab / "checks.yaml"))


def results(trustworthy=True, **host):
    return {"trustworthy": trustworthy, "metrics": {"hosts": {"s0h0": host}, "overall": {}}}


def test_checks_are_judged_on_what_the_runs_measured():
    lab = find_lab("1")
    good = {
        "dual.yaml": RunOutcome(0, results(fault_throughput_ratio=0.5, max_silence_s=0.1), "PASSED"),
        "single.yaml": RunOutcome(0, results(fault_throughput_ratio=0.0, max_silence_s=19.2), "PASSED"),
    }
    report = judge(lab, "work", good)
    assert report.status == "passed" and report.score == 1.0
    # no fault: nothing measured during it; single.yaml missing
    bad = {"dual.yaml": RunOutcome(1, results(fault_throughput_ratio=None, max_silence_s=0.1), "FAILED")}
    report = judge(lab, "work", bad)
    assert [c["status"] for c in report.checks] == ["failed", "passed", "failed", "failed"]
    assert report.score == pytest.approx(1 / 6)  # weights 2, 1, 2, 1
    text = render(report)
    assert "hint: Nothing is measured during a fault that never happened" in text
    assert "why: single.yaml is not in work" in text
    assert text.splitlines()[-1] == "score 17%; FAILED"
    assert "PASS " not in render(report, failed_only=True)
    # an untrustworthy run judges nothing
    shaky = {
        name: RunOutcome(4, results(False, fault_throughput_ratio=0.5, max_silence_s=0.1), "")
        for name in good
    }
    assert judge(lab, "work", shaky).status == "untrustworthy"


def test_junit_names_every_check_and_carries_the_hint():
    report = judge(find_lab("1"), "work", {})
    suite = ElementTree.fromstring(junit(report))
    assert suite.get("tests") == "4" and suite.get("failures") == "4"
    failure = suite.find("testcase/failure")
    assert "hint:" in failure.text
    measured = {"dual.yaml": RunOutcome(1, results(fault_throughput_ratio=0.2, max_silence_s=0.1), "FAILED")}
    failure = ElementTree.fromstring(junit(judge(find_lab("1"), "work", measured))).find("testcase/failure")
    assert "expected in [0.4, 0.65], measured 0.2;" in failure.text


def test_only_the_labs_scenarios_are_run_and_only_from_the_folder(tmp_path):
    lab = find_lab("1")
    (tmp_path / "dual.yaml").write_text("x")
    ran = []
    outcomes = run_all(
        lab,
        str(tmp_path),
        str(tmp_path / "results"),
        lambda p, o: ran.append((p, o)) or RunOutcome(0, None, "ok"),
        log=lambda m: None,
    )
    assert ran == [(str(tmp_path / "dual.yaml"), str(tmp_path / "results" / "dual"))]
    assert list(outcomes) == ["dual.yaml"]


def test_start_copies_the_starter_and_reset_puts_it_back(tmp_path, capsys):
    work = tmp_path / "w"
    assert main(["lab", "start", "1", str(work)]) == OK
    lab = find_lab("1")
    assert sorted(p.name for p in work.iterdir()) == sorted(lab.runs)
    assert main(["lab", "start", "1", str(work)]) == INVALID  # not over someone's work
    assert "is not empty" in capsys.readouterr().err
    (work / "dual.yaml").write_text("mine")
    (work / "notes.txt").write_text("kept")
    assert main(["lab", "reset", "1", str(work)]) == OK
    assert (work / "dual.yaml").read_text() == (lab.starter / "dual.yaml").read_text()
    assert (work / "notes.txt").read_text() == "kept"
    assert main(["lab", "check", "1", str(tmp_path / "nope")]) == INVALID
    assert main(["lab", "list"]) == OK
    assert "Dual-ToR against single-ToR" in capsys.readouterr().out


def test_results_files_are_read_back(tmp_path):
    from testbed.lab.checker import read_results

    (tmp_path / "results.json").write_text(json.dumps({"trustworthy": True}))
    assert read_results(str(tmp_path)) == {"trustworthy": True}
    assert read_results(str(tmp_path / "none")) is None
    assert Path(tmp_path).exists()


def test_an_instructors_checks_replace_the_labs_and_are_checked_alike(tmp_path):
    hidden = tmp_path / "hidden.yaml"
    check = "checks:\n  - name: secret\n    run: {run}\n    metric: max_silence_s\n    max: 0.5\n"
    hidden.write_text(check.format(run="dual.yaml"))
    lab = find_lab("1", checks_file=str(hidden))
    assert [c.expectation.name for c in lab.checks] == ["secret"] and lab.title == find_lab("1").title
    hidden.write_text(check.format(run="../x.yaml"))
    with pytest.raises(ConfigError) as e:
        find_lab("1", checks_file=str(hidden))
    assert str(e.value.problems[0]).startswith(f"{hidden}: checks[0]: expected run: a plain scenario file")


def test_the_graders_summary_and_csv_have_a_line_per_student():
    import csv
    import io

    from testbed.lab.checker import grade_csv, grade_summary

    lab = find_lab("1")
    good = {
        "dual.yaml": RunOutcome(0, results(fault_throughput_ratio=0.5, max_silence_s=0.1), "PASSED"),
        "single.yaml": RunOutcome(0, results(fault_throughput_ratio=0.0, max_silence_s=19.2), "PASSED"),
    }
    reports = [judge(lab, "ana", good), judge(lab, "bo", {"dual.yaml": good["dual.yaml"]})]
    summary = grade_summary(reports)
    assert "ana" in summary and "100%" in summary and "bo" in summary and "50%" in summary
    assert "ana" not in grade_summary(reports, failed_only=True)
    rows = list(csv.reader(io.StringIO(grade_csv(reports))))
    assert rows[0][:5] == ["student", "check", "run", "weight", "status"]
    assert len(rows) == 1 + 2 * (4 + 1)
    assert ["bo", "(score)", "", "", "failed", "0.5000", "", ""] in rows
    assert grade_summary([judge(lab, "ana", good)], failed_only=True) == "every student passed"


# --- a student's own numbers ----------------------------------------------------

PARAMETRIC = """title: x
minutes: 5
seed: term-1
parameters:
  s_gb: {choices: [3, 4, 5, 6]}
checks:
  - run: a.yaml
    metric: bytes_per_rank
    job: ring
    min: {param: s_gb, times: 1000}
    max: {param: s_gb, times: 1000, plus: 10}
  - {run: a.yaml, metric: iterations_completed, job: ring, min: 6}
"""


def _lab_with(tmp_path, text):
    lab = tmp_path / "09-x"
    lab.mkdir()
    (lab / "checks.yaml").write_text(text)
    return load_lab(lab)


def _students_with_different(lab, name):
    """Two student ids whose values of parameter `name` differ."""
    ids = [f"student{i}" for i in range(20)]
    first = lab.values(ids[0])[name]
    return ids[0], next(i for i in ids if lab.values(i)[name] != first)


def test_a_students_numbers_are_their_own_and_the_same_each_time(tmp_path):
    lab = _lab_with(tmp_path, PARAMETRIC)
    values = [lab.values(f"s{i}")["s_gb"] for i in range(40)]
    assert set(values) == {3.0, 4.0, 5.0, 6.0}  # spread over the choices
    assert lab.values("s7") == lab.values("s7")
    (tmp_path / "b").mkdir()
    reseeded = _lab_with(tmp_path / "b", PARAMETRIC.replace("term-1", "term-2"))
    assert [reseeded.values(f"s{i}")["s_gb"] for i in range(40)] != values  # a new seed, new numbers


def test_a_check_is_judged_on_the_students_own_bound(tmp_path):
    lab = _lab_with(tmp_path, PARAMETRIC)
    ana, bo = _students_with_different(lab, "s_gb")
    s = lab.values(ana)["s_gb"]
    measured = {
        "trustworthy": True,
        "metrics": {"jobs": {"ring": {"bytes_per_rank": s * 1000 + 5, "iterations_completed": 6}}},
    }
    outcome = {"a.yaml": RunOutcome(0, measured, "PASSED")}
    assert judge(lab.for_student(ana), "ana", outcome).status == "passed"
    copied = judge(lab.for_student(bo), "bo", outcome)  # bo handed in ana's files
    assert copied.status == "failed" and [c["status"] for c in copied.checks] == ["failed", "passed"]
    assert copied.checks[0]["name"].startswith("bytes_per_rank of ring in [")
    with pytest.raises(ValueError, match="judge it for a student"):
        judge(lab, "nobody", outcome)


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("[3, 4, 5, 6]", "[3]", "parameters.s_gb.choices: expected a list of 2 to 100 numbers"),
        ("[3, 4, 5, 6]", "[3, 3]", "parameters.s_gb.choices: expected distinct numbers"),
        ("s_gb: {", "S-GB: {", "parameters: expected names of lower-case letters"),
        (
            "min: {param: s_gb,",
            "min: {param: nope,",
            "checks[0]: min: no parameter 'nope' (parameters: s_gb)",
        ),
        (
            "min: {param: s_gb, times: 1000}",
            "min: {param: s_gb, factor: 2}",
            "checks[0]: min: expected {param:",
        ),
        ("seed: term-1", "seed: [1]", "seed: expected text"),
    ],
)
def test_a_bad_parameter_is_refused_on_one_line(tmp_path, old, new, message):
    assert old in PARAMETRIC
    with pytest.raises(ConfigError) as e:
        _lab_with(tmp_path, PARAMETRIC.replace(old, new))
    assert any(message in str(p) for p in e.value.problems), e.value.problems


def test_start_writes_a_students_numbers_and_check_reads_their_id(tmp_path, capsys):
    lab = find_lab("5")
    assert lab.parameters
    assert main(["lab", "start", "5", str(tmp_path / "anon")]) == INVALID
    assert "add --student ID" in capsys.readouterr().err and not (tmp_path / "anon").exists()
    assert main(["lab", "start", "5", str(tmp_path / "w"), "--student", "a b"]) == INVALID
    assert main(["lab", "start", "5", str(tmp_path / "w"), "--student", "ana"]) == OK
    s_gb = lab.values("ana")["s_gb"]
    assert f"s_gb = {s_gb:g}" in capsys.readouterr().out
    text = (tmp_path / "w" / "collectives.yaml").read_text()
    assert f'bytes: "{s_gb:g}GB"' in text and "{{" not in text
    assert (tmp_path / "w" / ".hpnlab-student").read_text() == "ana\n"
    (tmp_path / "w" / "collectives.yaml").write_text("mine")
    assert main(["lab", "reset", "5", str(tmp_path / "w")]) == OK  # the id from the folder
    assert (tmp_path / "w" / "collectives.yaml").read_text() == text


def test_a_student_file_is_written_as_a_new_file(tmp_path):
    from testbed.lab.files import write_text

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "sym").symlink_to(victim)
    os.link(victim, tmp_path / "hard")
    write_text(str(tmp_path / "sym"), "new")
    write_text(str(tmp_path / "hard"), "new")
    assert victim.read_text() == "keep" and (tmp_path / "hard").read_text() == "new"
