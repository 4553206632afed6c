"""A drill's outcome as JUnit XML (`hpnlab run --junit`), and the files
root writes where a user points it."""

import os
import xml.etree.ElementTree as ET

import pytest

from testbed.cli.common import INVALID, link_refused, write_output_file
from testbed.results.junit import drill_cases, suite


def _expectation(name, status, measured, trustworthy=True, reason=None):
    return {
        "name": name,
        "metric": "max_silence_s",
        "expected": "<= 1.5",
        "min": None,
        "max": 1.5,
        "measured": measured,
        "passed": status == "passed",
        "status": status,
        "trustworthy": trustworthy,
        "reason": reason,
    }


def _check(name, ok, severity="fail", reason=None, note=None):
    return {
        "name": name,
        "measures": "m",
        "value": 1,
        "threshold": 1,
        "expected": ">= 0.9",
        "ok": ok,
        "severity": severity,
        "reason": reason,
        "note": note,
    }


RESULTS = {
    "expectations": [
        _expectation("silence of s0h0", "passed", 0.2),
        _expectation("silence of s0h1", "failed", 3.5),
    ],
    "problems": ["the link t0r0k0-s0h0 was never taken down"],
    "trust": {
        "trustworthy": True,
        "failed": [],
        "warnings": ["cpu_headroom"],
        "checks": [
            _check("fidelity", True),
            _check("cpu_headroom", False, severity="warn", reason="a core was 97% busy"),
            _check("pause_latency", None, note="no lossless class"),
        ],
    },
}


def _parsed(results):
    root = ET.fromstring(suite("hpnlab run t", drill_cases(results)))
    return root, {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}


def test_each_expectation_problem_and_trust_check_is_a_case():
    root, cases = _parsed(RESULTS)
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("6", "2", "1")
    failed = cases[("expectations", "silence of s0h1")].find("failure")
    assert failed.get("message") == "failed" and "measured 3.5" in failed.text
    assert cases[("expectations", "silence of s0h0")].find("failure") is None
    assert "never taken down" in cases[("problems", "problem 1")].find("failure").text
    assert cases[("trust", "fidelity")].find("failure") is None
    warned = cases[("trust", "cpu_headroom")]
    assert warned.find("failure") is None and "97% busy" in warned.find("system-out").text
    assert "no lossless class" in cases[("trust", "pause_latency")].find("skipped").get("message")


def test_an_untrustworthy_run_skips_its_expectations_and_fails_on_trust():
    results = {
        "expectations": [_expectation("silence", "untrustworthy", 0.2, trustworthy=False)],
        "trust": {
            "trustworthy": False,
            "failed": ["fidelity"],
            "warnings": [],
            "checks": [_check("fidelity", False, reason="link at 0.62 of its rate")],
        },
    }
    root, cases = _parsed(results)
    assert cases[("expectations", "silence")].find("skipped") is not None
    assert cases[("trust", "fidelity")].find("failure").get("message") == "untrustworthy"
    assert (root.get("failures"), root.get("skipped")) == ("1", "1")


def test_names_from_a_file_cannot_break_the_xml():
    results = {"expectations": [_expectation('a"<b>&</testcase>', "failed", 2)], "trust": {"checks": []}}
    _, cases = _parsed(results)
    assert ("expectations", 'a"<b>&</testcase>') in cases


def test_an_output_file_is_written_and_replaced(tmp_path):
    path = str(tmp_path / "out.xml")
    assert write_output_file(path, "first, longer\n", "--junit") is None
    assert write_output_file(path, "second\n", "--junit") is None
    assert open(path).read() == "second\n"


def test_an_output_file_is_never_written_through_a_link(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "sym.xml").symlink_to(victim)
    os.link(victim, tmp_path / "hard.xml")
    assert link_refused(str(tmp_path / "sym.xml"), "--junit") == INVALID
    assert write_output_file(str(tmp_path / "sym.xml"), "x", "--junit") == INVALID
    assert write_output_file(str(tmp_path / "hard.xml"), "x", "--csv") == INVALID
    assert victim.read_text() == "keep"
    err = capsys.readouterr().err
    assert "--junit: " in err and "is a symbolic link" in err
    assert "--csv: " in err and "not a plain file of its own" in err


@pytest.mark.parametrize("path", [None, ""])
def test_no_file_named_is_no_refusal(path):
    assert link_refused(path, "--junit") is None
