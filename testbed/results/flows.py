"""Turn a drill's sampled throughput into the numbers its expectations judge.

Pure: no I/O, no clocks. The runner hands over what it measured (a time
series per flow, the faults it applied, per-link fidelity samples; their
records in flow_inputs.py) and gets back one plain dict that goes straight
into results.json.

Conventions used throughout:
  * Every sample i covers the interval (t[i] - interval_s, t[i]]: `t` holds
    sample END times in seconds since traffic start.
  * None means "no measurement" (a flow not started yet, or a series shorter
    than `t`); it is never read as zero throughput.
  * Fault times are the measured `applied_at`; the scheduled `at` is only a
    fallback when a fault carries no applied time.
  * Aggregates skip the first WARMUP_S of traffic (TCP slow start would drag
    the "before" baseline down) and SETTLE_S after every fault edge (rerouting
    and TCP recovery transients belong to neither steady state).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median

from .flow_inputs import (
    LINK_DEGRADE,
    LINK_DOWN,
    LINK_RESTORE,
    LINK_UP,
    Fault,
    Flow,
    Series,
    as_faults,
    as_flows,
    as_link_fidelity,
    as_series,
)

WARMUP_S = 1.0  # ignored at the start of traffic (TCP slow start)
SETTLE_S = 1.0  # ignored after each link-down / link-up edge
RECOVERED_FRACTION = 0.9  # "recovered" = aggregate back to 90% of before
RECOVERY_WINDOW_S = 5.0  # traffic after the faults is judged over the run's last 5 s
SILENCE_FLOOR_MBIT = 0.01  # below this a sample is silent, whatever the flow
SILENCE_FRACTION = 0.01  # ... or below 1% of the flow's own median rate
_EPS = 1e-6  # tolerance for float sample times (0.1 * 3 != 0.3)


# ---------------------------------------------------------- series helpers


def infer_interval(t: list) -> float:
    """The sampling interval implied by `t` (end times, evenly spaced)."""
    if len(t) >= 2:
        return t[1] - t[0]
    return t[0] if t else 0.0


def _inside(t_end, interval_s, start, end):
    """Does the sample ending at t_end lie entirely within [start, end)?"""
    return t_end - interval_s >= start - _EPS and t_end <= end + _EPS


def _overlaps(t_end, interval_s, start, end):
    """Does the sample ending at t_end share any time with [start, end)?"""
    return t_end - interval_s < end - _EPS and t_end > start + _EPS


def window_mean(
    t: list, values: list, start: float, end: float, interval_s: float | None = None
) -> float | None:
    """Mean of the samples lying inside [start, end); None samples ignored.

    Returns None when no measured sample falls in the window.
    """
    interval_s = infer_interval(t) if interval_s is None else interval_s
    picked = [v for ti, v in zip(t, values) if v is not None and _inside(ti, interval_s, start, end)]
    return _mean(picked)


def aggregate(value_lists: list[list], length: int) -> list:
    """Per-sample sum over several flows.

    A None sample (flow not started, or series ended) contributes nothing;
    the sum is None only where no flow has a measurement at all.
    """
    out = []
    for i in range(length):
        present = [vals[i] for vals in value_lists if i < len(vals) and vals[i] is not None]
        out.append(sum(present) if present else None)
    return out


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


# ---------------------------------------------------------------- silence


def silence_threshold(values: list) -> float:
    """Mbit/s below which a sample of this flow counts as silent.

    The larger of an absolute floor (0.01 Mbit/s) and 1% of the median of
    the flow's nonzero samples. The relative part matters: during an outage
    a lone retransmitted packet still shows up as a small positive rate and
    must not be mistaken for the flow being alive.
    """
    nonzero = [v for v in values if v is not None and v > 0]
    relative = SILENCE_FRACTION * median(nonzero) if nonzero else 0.0
    return max(SILENCE_FLOOR_MBIT, relative)


def max_silence_s(values: list, interval_s: float) -> float | None:
    """Longest run of silent samples, in seconds; None if nothing was measured.

    Only the span from the flow's first to its last measured sample counts
    (a flow that starts late is not silent before it starts). A None inside
    that span is counted as silent: nothing proves data moved then, and a
    failover test should not pass on missing evidence.
    """
    measured = [i for i, v in enumerate(values) if v is not None]
    if not measured:
        return None
    threshold = silence_threshold(values)
    longest = run = 0
    for v in values[measured[0] : measured[-1] + 1]:
        run = run + 1 if v is None or v < threshold else 0
        longest = max(longest, run)
    return round(longest * interval_s, 6)


# ----------------------------------------------------------------- faults


def link_outages(faults: Iterable[Fault | dict] | None, duration: float) -> list[dict]:
    """Fault windows as [{link, start, end, restored, kind}], ordered by start.

    A "down" window runs from a link-down to the next link-up of the same
    link, a "degraded" one from a link-degrade to the next link-restore
    (restored=True), or to `duration` if the link never comes back
    (restored=False). A second link-down of a link already down (or a
    degrade of a degraded one: its rate changes), or a link-up of a link
    that is up, changes nothing here.
    """
    opens = {LINK_DOWN: "down", LINK_DEGRADE: "degraded"}
    closes = {LINK_UP: "down", LINK_RESTORE: "degraded"}
    open_since: dict = {}
    windows = []
    for f in as_faults(faults):
        if f.action in opens:
            open_since.setdefault((f.link_key, opens[f.action]), f.time)
        elif (f.link_key, closes.get(f.action)) in open_since:
            key = (f.link_key, closes[f.action])
            windows.append(_window(key, open_since.pop(key), f.time, True))
    windows += [_window(key, start, float(duration), False) for key, start in open_since.items()]
    return sorted(windows, key=lambda w: (w["start"], w["end"]))


def _window(key, start, end, restored):
    (link, kind) = key
    return {"link": list(link[:2]), "start": start, "end": end, "restored": restored, "kind": kind}


def fault_windows(faults: Iterable[Fault | dict] | None, duration: float) -> list[tuple[float, float]]:
    """Fault windows as (start, end) tuples, one per link down or degraded."""
    return [(w["start"], w["end"]) for w in link_outages(faults, duration)]


@dataclass
class Periods:
    """The time ranges the before/during/after aggregates are taken over."""

    before: tuple[float, float]
    during: list[tuple[float, float]]
    after: tuple[float, float] | None  # None: no link-up, or still down at the end
    blackouts: list[tuple[float, float]]  # warmup and settle margins, never counted
    last_up: float | None  # the link-up that recovery is timed from


def fault_periods(faults: Iterable[Fault | dict] | None, duration: float) -> Periods:
    """Split the run into before / during / after the faults."""
    faults = as_faults(faults)
    windows = link_outages(faults, duration)
    edges = [f.time for f in faults]
    blackouts = [(0.0, WARMUP_S)] + [(e, e + SETTLE_S) for e in edges]
    all_restored = bool(windows) and all(w["restored"] for w in windows)
    # "After" only exists once every failed link is back; its start is the
    # link-up that closed the last outage.
    last_up = max(w["end"] for w in windows) if all_restored else None
    return Periods(
        before=(0.0, edges[0] if edges else float("inf")),
        during=[(w["start"], w["end"]) for w in windows],
        after=(last_up, float("inf")) if last_up is not None else None,
        blackouts=blackouts,
        last_up=last_up,
    )


def _period_mean(t, values, interval_s, ranges, blackouts):
    """Mean over samples inside any of `ranges` and clear of all blackouts."""
    picked = [
        v
        for ti, v in zip(t, values)
        if v is not None
        and any(_inside(ti, interval_s, s, e) for s, e in ranges)
        and not any(_overlaps(ti, interval_s, s, e) for s, e in blackouts)
    ]
    return _mean(picked)


def recovery_s(
    t: list, aggregate_values: list, interval_s: float, last_up: float | None, before: float | None
) -> float | None:
    """Seconds from `last_up` to the end of the first sample back at >= 90%
    of `before`. Timed to the sample's end: that is when the measurement
    proves the rate was back, so an instant recovery reads as one interval.
    None if there is no link-up, no baseline, or it never recovers.
    """
    if last_up is None or not before:
        return None
    target = RECOVERED_FRACTION * before
    for ti, v in zip(t, aggregate_values):
        if ti - interval_s >= last_up - _EPS and v is not None and v >= target:
            return round(ti - last_up, 6)
    return None


def recovered_ratio(
    t: list, aggregate_values: list, interval_s: float, last_up: float | None, before: float | None
) -> float | None:
    """Throughput over the run's last RECOVERY_WINDOW_S (clear of the settle
    margin after `last_up`) over `before`: once every failed link is back,
    does the traffic flow again? The end of the run is far enough from the
    link-up for TCP's retransmission back-off to have run its course, so a
    host still silent there was left without a path (routes never restored).
    None without a link-up that closed the outages or without a baseline.
    """
    if last_up is None or not before or not t:
        return None
    end = t[-1]
    start = max(last_up + SETTLE_S, end - RECOVERY_WINDOW_S)
    if start >= end:
        return None
    return _ratio(window_mean(t, aggregate_values, start, end, interval_s), before)


# ---------------------------------------------------------------- metrics


def _ratio(during, before):
    if during is None or not before:
        return None
    return during / before


def group_metrics(
    t: list, interval_s: float, value_lists: list[list], periods: Periods, has_faults: bool
) -> dict:
    """before/during/after, ratio, recovery (time and final share) and mean
    for a set of flows."""
    agg = aggregate(value_lists, len(t))
    before = _period_mean(t, agg, interval_s, [periods.before], periods.blackouts)
    during = _period_mean(t, agg, interval_s, periods.during, periods.blackouts) if has_faults else None
    after = _period_mean(t, agg, interval_s, [periods.after], periods.blackouts) if periods.after else None
    return {
        "mean_mbit": _round(_mean(agg)),
        "before_mbit": _round(before),
        "during_mbit": _round(during),
        "after_mbit": _round(after),
        "fault_throughput_ratio": _round(_ratio(during, before) if has_faults else None),
        "recovery_s": recovery_s(t, agg, interval_s, periods.last_up, before),
        "recovered_throughput_ratio": _round(recovered_ratio(t, agg, interval_s, periods.last_up, before)),
    }


def _round(x):
    # Six decimals keep JSON free of 2.5000000000000004 without losing data.
    return None if x is None else round(x, 6)


def _max_or_none(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def flow_metrics(series: Series, flows: list[Flow]) -> dict:
    """{flow id: {src, dst, mean_mbit, max_silence_s}}."""
    return {
        f.id: {
            "src": f.src,
            "dst": f.dst,
            "mean_mbit": _round(_mean(series.values(f.id))),
            "max_silence_s": max_silence_s(series.values(f.id), series.interval_s),
        }
        for f in flows
    }


def fidelity_metrics(fidelity_links: dict | None) -> dict:
    """{links: {name: {configured_mbit, achieved_mbit, fidelity, ...}}, min}."""
    links = {
        name: {
            "configured_mbit": lf.configured_mbit,
            "achieved_mbit": lf.achieved_mbit,
            "fidelity": _round(lf.fidelity),
            **lf.details,
        }
        for name, lf in as_link_fidelity(fidelity_links).items()
    }
    measured = [v["fidelity"] for v in links.values() if v["fidelity"] is not None]
    return {"links": links, "min": min(measured) if measured else None}


def _all_flows(series: Series, flows: list[Flow]) -> list[Flow]:
    """The caller's flows, plus any flow seen only in the series.

    Unlisted flows have no known source host; they still count overall so
    that no measured traffic silently disappears from the report.
    """
    known = {f.id for f in flows}
    return flows + [Flow(fid, None, None) for fid in series.flows if fid not in known]


def compute_metrics(
    series: Series | dict,
    flows: list | dict | None,
    faults: Iterable[Fault | dict] | None,
    duration: float,
    fidelity_links: dict | None,
) -> dict:
    """All metrics of one drill as a JSON-ready dict.

    Keys: flows, hosts, overall, fidelity, outages, settings. The names in
    hosts/overall are the ones expectations.evaluate looks up.
    """
    series = as_series(series)
    flows = _all_flows(series, as_flows(flows))
    faults = as_faults(faults)
    periods = fault_periods(faults, duration)
    has_faults = bool(periods.during)
    t, dt = series.t, series.interval_s
    per_flow = flow_metrics(series, flows)

    hosts = {}
    for src in sorted({f.src for f in flows if f.src is not None}):
        ids = [f.id for f in flows if f.src == src]
        hosts[src] = {
            "flows": ids,
            **group_metrics(t, dt, [series.values(i) for i in ids], periods, has_faults),
            "max_silence_s": _max_or_none(per_flow[i]["max_silence_s"] for i in ids),
        }

    overall = {
        **group_metrics(t, dt, [series.values(f.id) for f in flows], periods, has_faults),
        "max_silence_s": _max_or_none(m["max_silence_s"] for m in per_flow.values()),
    }
    return {
        "flows": per_flow,
        "hosts": hosts,
        "overall": overall,
        "fidelity": fidelity_metrics(fidelity_links),
        "outages": link_outages(faults, duration),
        "settings": {
            "interval_s": dt,
            "warmup_s": WARMUP_S,
            "settle_s": SETTLE_S,
            "recovered_fraction": RECOVERED_FRACTION,
            "recovery_window_s": RECOVERY_WINDOW_S,
            "silence_floor_mbit": SILENCE_FLOOR_MBIT,
            "silence_fraction_of_median": SILENCE_FRACTION,
        },
    }
