"""Every lab as a student and a grader meet it: the solution passes every
check, the starter fails them with the hints shown. A check run that the
trust gate could not judge (exit status 4) is run again, as drills are."""

import csv
import shutil
import subprocess
import sys

import pytest
from drillrun import ATTEMPTS

from testbed.cli.common import UNTRUSTWORTHY
from testbed.lab.catalog import all_labs
from testbed.lab.checker import FAILED, RunOutcome, judge, read_results
from testbed.lab.files import copy_filled


def lab_check(number, folder):
    for _ in range(ATTEMPTS):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "testbed.cli",
                "lab",
                "check",
                str(number),
                str(folder),
                "--junit",
                str(folder / "junit.xml"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != UNTRUSTWORTHY:
            break
    return r


def as_student(source, folder, lab, student):
    """The lab's files in `folder` as `lab start --student` leaves them."""
    folder.mkdir()
    copy_filled(source, str(folder), lab.values(student), replace=False)
    (folder / ".hpnlab-student").write_text(student + "\n")


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.slug)
def test_the_solution_passes_and_the_starter_fails_with_hints(tmp_path, leak_check, lab):
    solution, starter = tmp_path / "solution", tmp_path / "starter"
    as_student(lab.solution, solution, lab, "ana")
    as_student(lab.starter, starter, lab, "ana")
    r = lab_check(lab.number, solution)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "score 100%; PASSED"
    if lab.parameters:
        # The same measured runs judged for a student whose numbers differ
        # (a neighbour who copied ana's files): the checks of those numbers fail.
        bo = next(f"bo{i}" for i in range(50) if lab.values(f"bo{i}") != lab.values("ana"))
        outcomes = {n: RunOutcome(0, read_results(str(solution / "results" / n[:-5]))) for n in lab.runs}
        copied = judge(lab.for_student(bo), "bo", outcomes)
        failed = [lab.checks[i] for i, c in enumerate(copied.checks) if c["status"] != "passed"]
        assert copied.status == FAILED and failed and all(c.parametric for c in failed), copied.checks
    r = lab_check(lab.number, starter)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in r.stdout and "hint:" in r.stdout
    assert "<failure" in (starter / "junit.xml").read_text()


def test_a_grader_checks_every_students_folder_in_one_command(tmp_path, leak_check):
    lab = next(lab for lab in all_labs() if lab.slug == "04-pfc")  # the quickest lab
    ana, bo = tmp_path / "ana", tmp_path / "bo"
    shutil.copytree(lab.solution, ana)
    shutil.copytree(lab.starter, bo)
    sheet = tmp_path / "grades.csv"
    argv = [sys.executable, "-m", "testbed.cli", "lab", "grade", "4", str(ana), str(bo), "--csv", str(sheet)]
    for _ in range(ATTEMPTS):  # graded again only when the trust gate could not judge a run
        r = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != UNTRUSTWORTHY:
            break
    assert r.returncode == 0, r.stdout + r.stderr
    scores = {row[0]: row for row in csv.reader(sheet.read_text().splitlines()) if row[1] == "(score)"}
    assert scores[str(ana)][4] == "passed" and scores[str(ana)][5] == "1.0000"
    assert scores[str(bo)][4] == "failed" and float(scores[str(bo)][5]) < 1
    assert "the RoCE class drops nothing at the incast port" in r.stdout  # bo's missed check, named
