"""The verdict on a measured run, in one pure step: whether it can be
believed (trust.assess), what each expectation came to
(expectations.evaluate) and whether the run passed. The runner calls it on
what it measured; tests call it on synthetic metrics, so a report is never
judged by a second copy of the rule."""

from testbed.fabric.records import Expectation

from . import expectations, trust


def judge(metrics: dict, faults: list, expect: list[Expectation], problems: list) -> dict:
    """{"trust", "trustworthy", "expectations", "passed"} for metrics in
    emulated time. A run that hit problems (a tool that failed, routes not
    installed) did not do what the scenario asked, whatever the numbers say."""
    judged = trust.assess(metrics, faults)
    trustworthy = judged["trustworthy"]
    results = expectations.evaluate(expect, metrics, trustworthy)
    return {
        "trust": judged,
        "trustworthy": trustworthy,
        "expectations": results,
        "passed": trustworthy and expectations.all_passed(results) and not problems,
    }
