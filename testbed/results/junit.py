"""JUnit XML, the test-report format CI systems show: a drill's results
(`hpnlab run --junit`) and a lab's checks (`hpnlab lab check --junit`) as
test cases (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from .text import fmt


@dataclass(frozen=True)
class Case:
    """One test case: passed when neither `failure` nor `skipped` is set;
    `text` is shown beside a failure or a skip, or as the case's output."""

    group: str  # JUnit's classname: what the case belongs to
    name: str
    failure: str | None = None  # the failure's kind, e.g. "failed"
    skipped: str | None = None  # why it was not judged
    text: str = ""


def suite(name: str, cases: Iterable[Case]) -> str:
    cases = list(cases)
    failures = sum(1 for c in cases if c.failure is not None)
    skipped = sum(1 for c in cases if c.failure is None and c.skipped is not None)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name={quoteattr(name)} tests="{len(cases)}" failures="{failures}" skipped="{skipped}">',
    ]
    for c in cases:
        out.append(f"  <testcase classname={quoteattr(c.group)} name={quoteattr(c.name)}>")
        if c.failure is not None:
            out.append(f"    <failure message={quoteattr(c.failure)}>{escape(c.text)}</failure>")
        elif c.skipped is not None:
            out.append(f"    <skipped message={quoteattr(c.skipped)}/>")
        elif c.text:
            out.append(f"    <system-out>{escape(c.text)}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"


def drill_cases(results: dict) -> list[Case]:
    """Each expectation, each problem the run met and each trust check of a
    drill's results.json. An expectation the run could not judge (an
    untrustworthy run) is skipped, and the trust checks that failed say
    why as failures; a check with nothing to judge is skipped; a warning
    passes with its reason as output."""
    cases = []
    for e in results.get("expectations") or []:
        found = f"expected {e['expected']}, measured {fmt(e['measured'])}"
        if e["reason"]:
            found += f": {e['reason']}"
        if e["status"] == "passed":
            cases.append(Case("expectations", e["name"], text=found))
        elif e.get("trustworthy", True) is False or e["status"] == "untrustworthy":
            cases.append(Case("expectations", e["name"], skipped=f"not judged: {found}"))
        else:
            cases.append(Case("expectations", e["name"], failure=e["status"], text=found))
    for i, problem in enumerate(results.get("problems") or [], 1):
        cases.append(Case("problems", f"problem {i}", failure="problem", text=problem))
    for check in (results.get("trust") or {}).get("checks") or []:
        said = check["reason"] or check["expected"] or ""
        if check["ok"] is None:
            cases.append(Case("trust", check["name"], skipped=f"not judged: {check['note'] or said}"))
        elif check["ok"] or check["severity"] == "warn":
            cases.append(Case("trust", check["name"], text="" if check["ok"] else f"warning: {said}"))
        else:
            cases.append(Case("trust", check["name"], failure="untrustworthy", text=said))
    return cases
