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


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.slug)
def test_the_solution_passes_and_the_starter_fails_with_hints(tmp_path, leak_check, lab):
    solution, starter = tmp_path / "solution", tmp_path / "starter"
    shutil.copytree(lab.solution, solution)
    shutil.copytree(lab.starter, starter)
    r = lab_check(lab.number, solution)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "score 100%; PASSED"
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
