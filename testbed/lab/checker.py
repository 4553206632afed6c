"""`hpnlab lab check`: run a student's scenarios and judge the lab's checks
on what the runs measured (the judging is pure; running is a callable the
caller passes, `hpnlab run` in a child process for real).

A check on a file the student has not written, or whose run was refused or
crashed, fails with the reason and the check's hint. A run the trust gate
called untrustworthy judges nothing: its checks say so, and the lab's
status is "untrustworthy" (run it again on a quieter machine), not failed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from testbed.results.expectations import evaluate_one
from testbed.results.junit import Case, suite

from .catalog import Lab, student_file

PASSED, FAILED, UNTRUSTWORTHY = "passed", "failed", "untrustworthy"


@dataclass
class RunOutcome:
    status: int  # hpnlab run's exit status
    results: dict | None  # results.json, when the run wrote one
    said: str = ""  # its last line of output (the reason when it wrote none)


@dataclass
class Report:
    lab: Lab
    folder: str
    checks: list[dict] = field(default_factory=list)

    @property
    def score(self) -> float:
        total = sum(c["weight"] for c in self.checks)
        return sum(c["weight"] for c in self.checks if c["status"] == PASSED) / total if total else 0.0

    @property
    def status(self) -> str:
        states = {c["status"] for c in self.checks}
        if states <= {PASSED}:
            return PASSED
        return FAILED if FAILED in states else UNTRUSTWORTHY


def judge(lab: Lab, folder: str, outcomes: dict[str, RunOutcome]) -> Report:
    """Each check of `lab` against the outcome of its run (pure). A lab with
    parameters is judged for one student (Lab.for_student): a bound still
    waiting for a student's number would let anything pass."""
    if any(c.parametric for c in lab.checks):
        raise ValueError(f"lab {lab.slug} has checks for a student's own numbers: judge it for a student")
    report = Report(lab, folder)
    for check in lab.checks:
        outcome = outcomes.get(check.run)
        row = {"name": check.expectation.name, "run": check.run, "weight": check.weight, "hint": check.hint}
        if outcome is None or outcome.results is None:
            why = outcome.said if outcome is not None else f"{check.run} is not in {folder}"
            row.update(status=FAILED, measured=None, expected=None, reason=why or "the run wrote no results")
        else:
            res = outcome.results
            judged = evaluate_one(check.expectation, res.get("metrics") or {}, bool(res.get("trustworthy")))
            row.update(
                status=judged["status"],
                measured=judged["measured"],
                expected=judged["expected"],
                reason=judged["reason"],
            )
        report.checks.append(row)
    return report


def run_all(lab: Lab, folder: str, out_dir: str, run, log=print) -> dict[str, RunOutcome]:
    """{file: RunOutcome} for every scenario the checks name that the
    student wrote; `run(scenario path, report folder)` runs one."""
    outcomes = {}
    for name in lab.runs:
        path = student_file(folder, name)
        if not os.path.isfile(path):
            log(f"{name}: not in {folder}")
            continue
        log(f"running {name} ...")
        outcomes[name] = run(path, os.path.join(out_dir, os.path.splitext(name)[0]))
        log(f"{name}: {outcomes[name].said}")
    return outcomes


def _measured_against_expected(c: dict) -> str:
    parts = []
    if c["expected"]:
        parts.append(f"expected {c['expected']}")
    if c["measured"] is not None:
        parts.append(f"measured {c['measured']:.4g}")
    return ", ".join(parts) + "; " if parts else ""


def render(report: Report, failed_only: bool = False) -> str:
    """The report a student reads: a line per check, the hint under each
    one that did not pass, the score."""
    lines = [f"lab {report.lab.slug}: {report.lab.title} ({report.folder})"]
    for c in report.checks:
        if failed_only and c["status"] == PASSED:
            continue
        mark = {PASSED: "PASS", FAILED: "FAIL", UNTRUSTWORTHY: "UNTRUSTED"}[c["status"]]
        found = _measured_against_expected(c).rstrip("; ")
        found = f": {found}" if found else ""
        lines.append(f"  {mark:9s} {c['name']} ({c['run']}, weight {c['weight']:g}){found}")
        if c["status"] != PASSED:
            if c["reason"]:
                lines.append(f"            why: {c['reason']}")
            if c["hint"]:
                lines.append(f"            hint: {c['hint']}")
    lines.append(f"score {report.score:.0%}; {report.status.upper()}")
    return "\n".join(lines)


def junit(report: Report) -> str:
    """The report as JUnit XML, for graders' tools."""
    return suite(
        "lab " + report.lab.slug,
        (
            Case(
                c["run"],
                c["name"],
                failure=None if c["status"] == PASSED else c["status"],
                text=f"{c['status']}: {_measured_against_expected(c)}{c['reason'] or ''} hint: {c['hint']}"
                if c["status"] != PASSED
                else "",
            )
            for c in report.checks
        ),
    )


def read_results(out: str) -> dict | None:
    try:
        with open(os.path.join(out, "results.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def grade_csv(reports: list[Report]) -> str:
    """Every student's checks as CSV rows, for a grader's spreadsheet: one
    row per (student folder, check) with its status, measured value and
    bound, then one row per student with the score (pure)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["student", "check", "run", "weight", "status", "measured", "expected", "reason"])
    for r in reports:
        for c in r.checks:
            measured = "" if c["measured"] is None else f"{c['measured']:.6g}"
            w.writerow(
                [
                    r.folder,
                    c["name"],
                    c["run"],
                    f"{c['weight']:g}",
                    c["status"],
                    measured,
                    c["expected"] or "",
                    c["reason"] or "",
                ]
            )
        w.writerow([r.folder, "(score)", "", "", r.status, f"{r.score:.4f}", "", ""])
    return buf.getvalue()


def grade_summary(reports: list[Report], failed_only: bool = False) -> str:
    """The grader's table: a line per student with score, status and the
    checks that did not pass (pure)."""
    from testbed.results.text import text_table

    rows = []
    for r in reports:
        if failed_only and r.status == PASSED:
            continue
        missed = "; ".join(c["name"] for c in r.checks if c["status"] != PASSED) or "-"
        rows.append([r.folder, f"{r.score:.0%}", r.status.upper(), missed])
    if not rows:
        return "every student passed"
    return text_table(["student", "score", "status", "not passed"], rows)
