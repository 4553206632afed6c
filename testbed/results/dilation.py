"""A dilated drill's measurements brought back to emulated time (pure).

A drill played N times slower (testbed/fabric/dilation.py) measures times
N times too long and rates N times too low. Before its expectations are
judged, and before anything is reported, this module divides every time
by N and multiplies every rate by N, so that the scenario's bounds,
written in emulated units, are judged unchanged, and reports, plots and
comparisons all speak emulated time. Ratios (fidelity, utilization,
slowdowns), counts and bytes do not change.

Which number is what is read from its key, the naming rule the metrics
already follow:
  * a key ending in `_s` holds seconds, in `_ms` milliseconds, a number or a list of numbers
    (except those in MACHINE_TIME_KEYS: how long something took on this
    machine, such as bringing the fabric up, and those ending in
    CPU_TIME_SUFFIXES: the CPU this machine's processes spent, which the
    costs per packet beside them are computed from);
  * a key ending in `_mbit` holds Mbit/s;
  * the points in time with short names: `t` (gap events), `at` and
    `issued_at` and `applied_at` (faults), `start` and `end` (outage windows);
  * the throughput series, handled here by its shape.
A new metric that follows the rule is converted without a change here.
The names the data itself uses as keys (hosts, jobs, flows, links) never
end so: none of them holds an underscore.
"""

import copy
from typing import Any

TIME_SUFFIX, MS_SUFFIX, RATE_SUFFIX = "_s", "_ms", "_mbit"
TIME_KEYS = frozenset({"t", "at", "issued_at", "applied_at", "start", "end"})
MACHINE_TIME_KEYS = frozenset({"bringup_s"})
CPU_TIME_SUFFIXES = ("cpu_s", "cpu_user_s", "cpu_system_s")


def note(n: float | None) -> str:
    """The sentence every report shows for a dilated run ('' when n is 1)."""
    if not n or n == 1:
        return ""
    return f"time dilation {n:g}: rates /{n:g}, times x{n:g} on this machine; reported in emulated time"


def to_emulated(results: Any, n: float) -> Any:
    """A copy of `results` (any part of a results dict: metrics, faults,
    series, durations) with times divided by `n` and rates multiplied by it."""
    if n == 1:
        return copy.deepcopy(results)
    return _convert(results, float(n))


def _machine_time(key):
    return key in MACHINE_TIME_KEYS or key.endswith(CPU_TIME_SUFFIXES)


def _convert(obj, n, key=None):
    if isinstance(obj, dict):
        if key == "series":
            return _series(obj, n)
        return {k: _convert(v, n, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_convert(v, n, key) for v in obj]
    if not _is_number(obj) or not isinstance(key, str) or _machine_time(key):
        return obj
    if key.endswith((TIME_SUFFIX, MS_SUFFIX)) or key in TIME_KEYS:
        return _tidy(obj / n)
    if key.endswith(RATE_SUFFIX):
        return _tidy(obj * n)
    return obj


def _series(series, n):
    """The throughput series: end times, the interval and every flow's
    Mbit/s samples (None stays None: no measurement)."""
    out = dict(series)
    if "t" in out:
        out["t"] = [None if t is None else _tidy(t / n) for t in out["t"]]
    if _is_number(out.get("interval_s")):
        out["interval_s"] = _tidy(out["interval_s"] / n)
    for key in ("flows", "ports"):  # Mbit/s of each flow, of each host port
        if isinstance(out.get(key), dict):
            out[key] = {k: [None if v is None else _tidy(v * n) for v in vs] for k, vs in out[key].items()}
    return out


def _tidy(x):
    # Nine decimals keep 0.1 * 3 from reaching JSON as 0.30000000000000004
    # and still resolve the microseconds a gap was filled after.
    return round(x, 9)


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)
