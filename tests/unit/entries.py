"""Expectations written as a scenario file writes them (dicts), turned into
records the way the loader does, then judged."""

from testbed.fabric.records import Expectation
from testbed.results import expectations


def evaluate(entries: list[dict], metrics: dict, trustworthy: bool) -> list[dict]:
    return expectations.evaluate([Expectation.from_entry(e) for e in entries], metrics, trustworthy)
