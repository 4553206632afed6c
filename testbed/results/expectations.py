"""Judge a drill's metrics against the scenario's expectations.

Pure. An expectation is a dict {name, metric, host?, min?, max?}; bounds are
inclusive. Each result says what was expected, what was measured and why it
failed, so the report can show it without re-deriving anything.

A run that is not trustworthy (trust.py decides) cannot prove anything:
every expectation is then reported as "untrustworthy" and none passes, even
if the numbers look fine.
"""

from typing import Any

from testbed.fabric.records import Expectation
from testbed.fabric.vocabulary import CLASS_METRICS, CONTROLLER_METRICS, JOB_METRICS, PROBE_METRICS

PASSED, FAILED, UNTRUSTWORTHY = "passed", "failed", "untrustworthy"

# metric name in a scenario -> key in metrics["hosts"][h] / metrics["overall"]
METRIC_KEYS = {
    "max_silence_s": "max_silence_s",
    "fault_throughput_ratio": "fault_throughput_ratio",
    "recovered_throughput_ratio": "recovered_throughput_ratio",
    "mean_throughput_mbit": "mean_mbit",
}
FIDELITY = "fidelity"
METRICS = tuple(METRIC_KEYS) + (FIDELITY,) + CLASS_METRICS + CONTROLLER_METRICS + PROBE_METRICS


def format_number(x: float) -> str:
    """Short human form of a bound: 0.45, 1, 1e+03 -> '0.45', '1', '1000'."""
    return f"{x:.6g}" if abs(x) < 1e6 else f"{x:.3g}"


def expected_text(lo: float | None, hi: float | None) -> str:
    """'>= 0.45', '<= 1', 'in [9, 11]' or 'any value' for no bound."""
    if lo is not None and hi is not None:
        return f"in [{format_number(lo)}, {format_number(hi)}]"
    if lo is not None:
        return f">= {format_number(lo)}"
    if hi is not None:
        return f"<= {format_number(hi)}"
    return "any value"


def lookup_job(metrics: dict, metric: str, job: str | None) -> tuple[Any, str | None]:
    """A per-job measurement (training jobs): (value or None, reason)."""
    jobs = metrics.get("jobs") or {}
    if job not in jobs:
        return None, f"job {job!r} was not measured"
    value = jobs[job].get(metric)
    return value, None if value is not None else f"{metric} not measured for job {job}"


def lookup_class(metrics: dict, metric: str, cls: str | None) -> tuple[Any, str | None]:
    """A per-class measurement of the queues: (value or None, reason)."""
    if cls is None:
        return None, f"{metric} is measured per queue class: name the class"
    classes = metrics.get("classes")
    if classes is None:
        return None, "the scenario has no queues, so no class was measured"
    if cls not in classes:
        return None, f"nothing was sent in class {cls!r}"
    value = classes[cls].get(metric[len("class_") :])
    if value is None:
        return None, f"class {cls!r} is not lossless, so it is never paused"
    return value, None


def lookup_gap(metrics: dict, fault: str | None) -> tuple[Any, str | None]:
    """The longest delivery gap the probes saw around a named fault."""
    entry = ((metrics.get("probe") or {}).get("faults") or {}).get(fault)
    if entry is None:
        return None, f"no probe measured fault {fault!r}"
    if entry.get("gap_ms") is None:
        return None, entry.get("why_none") or f"no gap measured for fault {fault!r}"
    return entry["gap_ms"], None


def lookup(
    metrics: dict,
    metric: Any,
    host: str | None,
    job: str | None = None,
    cls: str | None = None,
    fault: str | None = None,
) -> tuple[Any, str | None]:
    """(measured value or None, reason when None)."""
    if metric in PROBE_METRICS:
        return lookup_gap(metrics, fault)
    if metric in CLASS_METRICS:
        return lookup_class(metrics, metric, cls)
    if metric in CONTROLLER_METRICS:
        restarts = (metrics.get("controller") or {}).get("restarts") or []
        if not restarts:
            return None, "the controller was not restarted (see controller_timeline)"
        values = [r.get(metric[len("controller_restart_") :]) for r in restarts]
        if None in values:
            return None, "a restarted controller never had its routes acknowledged"
        return max(values), None  # the worst restart
    if metric in JOB_METRICS:
        if job is None:
            return None, f"{metric} is measured per job: name the job"
        return lookup_job(metrics, metric, job)
    if metric == FIDELITY:
        if host is not None:
            return None, "fidelity is measured per link, not per host"
        value = (metrics.get("fidelity") or {}).get("min")
        return value, None if value is not None else ("nothing was busy long enough to measure fidelity")
    if metric not in METRIC_KEYS:
        return None, f"unknown metric {metric!r} (known: {', '.join(METRICS)})"
    if host is None:
        scope, where = metrics.get("overall") or {}, "overall"
    else:
        hosts = metrics.get("hosts") or {}
        if host not in hosts:
            return None, f"no flow was sent from host {host!r}"
        scope, where = hosts[host], f"host {host}"
    value = scope.get(METRIC_KEYS[metric])
    return value, None if value is not None else f"{metric} not measured for {where}"


def check(value: Any, lo: float | None, hi: float | None) -> tuple[bool, str | None]:
    """(within bounds?, reason when not)."""
    if lo is not None and value < lo:
        return False, f"measured {format_number(value)} is below {format_number(lo)}"
    if hi is not None and value > hi:
        return False, f"measured {format_number(value)} is above {format_number(hi)}"
    return True, None


def _bound(x):
    return None if x is None else float(x)


def evaluate_one(item: Expectation, metrics: dict, trustworthy: bool) -> dict:
    """The result dict of one expectation."""
    metric, host = item.metric, item.host
    lo, hi = _bound(item.min), _bound(item.max)
    measured, reason = lookup(metrics, metric, host, item.job, item.queue_class, item.fault)
    base = item.relative_to
    if base is not None and measured is not None:
        # e.g. hierarchical's iteration time over flat ring's, same metric
        ref, why = lookup(metrics, metric, host, base)
        if ref:
            measured = measured / ref
        else:
            measured, reason = None, why or f"{metric} of job {base} is 0"
    within = False
    if measured is not None:
        within, reason = check(measured, lo, hi)
    status = PASSED if within else FAILED
    if not trustworthy:
        # Keep what the numbers said, but never let them count as a pass.
        verdict = "would pass" if within else (reason or "failed")
        reason = f"run not trustworthy, see its trust checks ({verdict})"
        status = UNTRUSTWORTHY
    return {
        "name": item.name or metric,
        "metric": metric,
        "host": host,
        "job": item.job,
        "relative_to": item.relative_to,
        "class": item.queue_class,
        "fault": item.fault,
        "expected": expected_text(lo, hi),
        "min": lo,
        "max": hi,
        "measured": measured,
        "passed": status == PASSED,
        "status": status,
        "trustworthy": bool(trustworthy),
        "reason": reason,
    }


def evaluate(expect: list[Expectation], metrics: dict, trustworthy: bool) -> list[dict]:
    """Results of all expectations, in the scenario's order."""
    return [evaluate_one(item, metrics, trustworthy) for item in expect or []]


def all_passed(results: list[dict]) -> bool:
    """Every expectation passed. A drill that declares none (to watch a
    fabric rather than test it) passes if it was measured faithfully, which
    the caller checks separately."""
    return all(r["passed"] for r in results)
