"""What the probes saw around each named fault (pure).

For every fault name (faults that share a name happen together, like every
link of a failing switch), the window runs from when its first fault was
issued to when the next fault was issued (or the run ended). In it, per
probe flow, the longest interval without a delivery: between two arrivals,
or from the last arrival to the window's end when the sender kept sending.
The fault's gap is the worst over all flows; a flow whose path the fault
did not touch just shows the sending interval.

Before the first fault (after a warm-up second) the probes measure the
machine's own jitter, and any packet the emulator lost: one that never
arrived while a later one of its flow did, before the fault.

A gap is only worth something if the probes crossed what failed: the
switch-side egress counters of the fault's links (sampled at 10 Hz) say how
many probe packets per second they carried in the second before. When a
link-down's links carried less than half a probe flow, the gap is not
reported (None) and the report says why. (A link-up is measured whatever
crossed before: its gap is the traffic moving back.)
"""

import bisect
from collections.abc import Callable, Sequence

FRAME_BYTES = 64 + 8 + 20 + 14  # probe payload + UDP + IPv4 + Ethernet
WARMUP_S = 1.0  # the baseline skips the first second (ARP, first packets)
BEFORE_S = 1.0  # how far back the crossing rate looks
SETTLE_S = 0.2  # the rate after a fault is read from this long after it (routes take tens of ms)
AFTER_S = 1.0  # over at most this long


def fault_windows(faults: list, end_s: float) -> list:
    """[(name, start, end, [faults])] in order, for faults that have a name."""
    groups: dict = {}
    for f in faults:
        if f.get("name"):
            groups.setdefault(f["name"], []).append(f)
    starts = sorted({_issued(f) for f in faults})
    out = []
    for name, fs in groups.items():
        start = min(_issued(f) for f in fs)
        last = max(_issued(f) for f in fs)
        later = [t for t in starts if t > last]
        out.append((name, start, later[0] if later else end_s, fs))
    return sorted(out, key=lambda w: w[1])


def _issued(f):
    return f.get("issued_at", f["applied_at"])


def flow_gap(arrivals: list, sent: list, start: float, end: float) -> float:
    """Longest interval without a delivery in [start, end) for one flow:
    `arrivals` sorted times, `sent` sorted send times (the same clock)."""
    inside = [t for t in arrivals if start <= t < end]
    before = [t for t in arrivals if t < start]
    points = ([before[-1]] if before else []) + inside
    gap = max((b - a for a, b in zip(points, points[1:])), default=0.0)
    last = points[-1] if points else start
    if any(last < t < end for t in sent):  # still sending, nothing arriving
        gap = max(gap, end - last)
    return gap


def probe_results(
    records: dict,
    faults: list,
    t0: float,
    end_s: float,
    samples: Sequence = (),
    link_devs: Callable[[dict], list[str]] | None = None,
) -> dict:
    """Metrics of the probes (see the module docstring).

    records: [{rate, flows, sent: {flow: [t]}, arrivals: {flow: [[seq, t]]}}]
    with monotonic times; faults as applied (drill-clock times); t0: the
    drill clock's zero; samples: the link sampler's (t, {dev: (bytes, ...)});
    link_devs(fault) -> the switch-side devices of its link."""
    flows = []  # (arrival times, send times) per probe flow, drill clock
    for rec in records:
        arrivals = rec.get("arrivals", {})
        for flow, times in rec.get("sent", {}).items():
            got = sorted(t - t0 for _seq, t in arrivals.get(flow, []))
            sent_at = [t - t0 for t in times]
            seqs = {seq: t - t0 for seq, t in arrivals.get(flow, [])}  # seq -> arrival
            flows.append((got, sent_at, seqs))
    windows = fault_windows(faults, end_s)
    first = windows[0][1] if windows else end_s
    out = {
        "flows": len(flows),
        "sent": sum(len(s) for _, s, _ in flows),
        "received": sum(len(a) for a, _, _ in flows),
        "base_gap_ms": _ms(max((flow_gap(a, s, WARMUP_S, first) for a, s, _ in flows), default=None)),
        "base_lost": sum(_lost_while_delivering(s, q, WARMUP_S, first) for _, s, q in flows),
        "faults": {},
    }
    for name, start, end, fs in windows:
        gaps = [flow_gap(a, s, start, end) for a, s, _ in flows]
        sends = [max((b - a for a, b in zip(s, s[1:]) if start <= b < end), default=0.0) for _, s, _ in flows]
        lost = sum(_lost(s, q, start, end) for _, s, q in flows)
        devs = [d for f in fs for d in (link_devs(f) if link_devs else [])]
        crossing = _crossing_pps(samples, devs, start - BEFORE_S, start)
        after = _crossing_pps(samples, devs, start + SETTLE_S, min(end, start + SETTLE_S + AFTER_S))
        entry = {
            "at": round(start, 4),
            "until": round(end, 4),
            "faults": len(fs),
            "action": fs[0]["action"],
            "gap_ms": _ms(max(gaps, default=None)),
            "send_gap_ms": _ms(max(sends, default=None)),
            "lost": max(lost, 0),
            "flows_hit": sum(1 for g, (_, s, _) in zip(gaps, flows) if g > 2.5 * _interval(s)),
            "crossing_pps": crossing,
            # what the fault's links carried once it had struck: a link that
            # went down carries nothing, whether or not a probe was lost
            "crossing_after_pps": after,
        }
        # A link that goes down must have carried at least half a probe
        # flow's packets; one that comes back carried nothing before, and
        # its gap (traffic moving back) counts as measured.
        rates = [1 / _interval(s) for _, s, _ in flows if len(s) > 1]
        need = 0.5 * min(rates) if rates else 1.0
        if fs[0]["action"] == "link-down" and crossing is not None and crossing < need:
            entry["gap_ms"] = None
            entry["why_none"] = (
                f"the failed links carried {fmt_rate(crossing)} probe packets/s "
                f"before the fault, less than half a probe flow ({fmt_rate(need)}/s): "
                "they were not on the probes' paths"
            )
        out["faults"][name] = entry
    return out


def _lost(sent, received, start, end):
    """Packets sent in [start, end) that never arrived: a packet's sequence
    number is its index in the sender's list."""
    return sum(1 for seq, t in enumerate(sent) if start <= t < end and seq not in received)


def _lost_while_delivering(sent, received, start, end):
    """Packets sent in [start, end) that never arrived although a later one
    of the same flow did, before `end`: lost on a path that worked. A packet
    sent just before a fault and still on its way when the cable went is
    the fault's loss, not the emulator's (a fault strikes within a
    millisecond of being issued, less than a packet's way through)."""
    delivered_before_end = sorted(seq for seq, t in received.items() if t < end)
    lost = 0
    for seq, t in enumerate(sent):
        if start <= t < end and seq not in received:
            later = bisect.bisect_right(delivered_before_end, seq)
            lost += later < len(delivered_before_end)
    return lost


def _interval(sent):
    if len(sent) < 2:
        return float("inf")
    return (sent[-1] - sent[0]) / (len(sent) - 1)


def _crossing_pps(samples, devs, lo, hi):
    """Probe packets per second that left the devices between the samples
    of [lo, hi] (None without samples or devices, or with fewer than two
    samples there)."""
    if not samples or not devs:
        return None
    inside = [(t, c) for t, c in samples if lo <= t <= hi]
    if len(inside) < 2:
        return None
    (ta, a), (tb, b) = inside[0], inside[-1]
    sent = sum(b.get(d, (0,))[0] - a.get(d, (0,))[0] for d in devs)
    return round(sent / FRAME_BYTES / (tb - ta), 1) if tb > ta else None


def fmt_rate(x: float) -> str:
    return f"{x:.3g}"


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 2)


def gap_metrics(probe: dict | None) -> dict:
    """{"<fault>_gap_ms": value} for the metrics' top level."""
    return {f"{name}_gap_ms": f["gap_ms"] for name, f in (probe or {}).get("faults", {}).items()}
