"""Every lab as a student and a grader meet it: the solution passes every
check, the starter fails them with the hints shown. A check run that the
trust gate could not judge (exit status 4) is run again, as drills are."""

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
