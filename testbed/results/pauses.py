"""What the lossless classes' pauses did (pure): every pause as a record a
reader can follow, the time each link spent paused, and how fast pauses
took hold and let go, all from what the pause daemon and the queue engine
measured (testbed/emulation/pfc.py).

Reaction, per pause:
- in force: from the XOFF crossing in the queue (the engine's clock) to the
  kernel's acknowledgement of the upstream's change; after it up to two
  frames' worth still arrive, the one on its way and the burst the change
  lets by (`let_by_bytes`, counted on the wire);
- resume: from the XON crossing to the first frame of the class arriving
  from the upstream, for pauses that ended with frames waiting upstream
  (others have nothing to show).

Of each, the part the machine held the daemon (`*_held_s`, pfc.py's
machine_hold_ns): waiting to be woken, or off its core. What is left is
the daemon's own work; the trust gate judges the machine's part.
"""

from collections.abc import Sequence

import numpy as np

NS = 1e-9


def _stats_ms(values):
    if not values:
        return None
    a = np.array(values) * 1e3
    return {
        "n": len(values),
        "median": round(float(np.median(a)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
    }


def records(raw: dict, t0: float, class_names: list) -> list[dict]:
    """The daemon's pauses as records in seconds from the drill's zero `t0`
    (monotonic seconds): link, class, start, duration, reaction."""
    out = []
    for p in sorted(raw.get("pauses", ()), key=lambda p: p["assert_ns"]):
        end = p.get("release_ns") or p.get("end_ns")
        rec = {
            "link": p["ifname"],
            "class": class_names[p["class"]],
            "start_s": round(p["assert_ns"] * NS - t0, 6),
            "duration_s": round((end - p["assert_ns"]) * NS, 6),
            "ended": p.get("release_ns") is not None,
            "in_force_s": round((p["applied_ns"] - p["assert_ns"]) * NS, 6),
        }
        if "held_ns" in p:
            rec["in_force_held_s"] = round(p["held_ns"] * NS, 6)
        if p.get("departed_at_resume") is not None:
            rec["let_by_bytes"] = p["departed_at_resume"] - p["departed_at_pause"]
        if p.get("resumed_ns"):
            rec["resume_applied_s"] = round((p["resumed_ns"] - p["release_ns"]) * NS, 6)
        if p.get("first_ns") and p.get("backlog_at_resume", 0) > 0 and p["first_ns"] >= p["release_ns"]:
            rec["resume_s"] = round((p["first_ns"] - p["release_ns"]) * NS, 6)
            if "resume_held_ns" in p:
                rec["resume_held_s"] = round(p["resume_held_ns"] * NS, 6)
        out.append(rec)
    return out


def summary(
    recs: list[dict], events: int = 0, errors: Sequence[str] = (), scheduling: dict | None = None
) -> dict:
    """Totals per link and class, and the reaction statistics (ms)."""
    links: dict = {}
    for r in recs:
        e = links.setdefault(f"{r['link']}/{r['class']}", {"pauses": 0, "paused_s": 0.0})
        e["pauses"] += 1
        e["paused_s"] = round(e["paused_s"] + r["duration_s"], 6)
    let_by = [r["let_by_bytes"] for r in recs if "let_by_bytes" in r]
    return {
        "pauses": len(recs),
        "paused_s": round(sum(r["duration_s"] for r in recs), 6),
        "links": links,
        "in_force_ms": _stats_ms([r["in_force_s"] for r in recs]),
        "resume_ms": _stats_ms([r["resume_s"] for r in recs if "resume_s" in r]),
        "resume_applied_ms": _stats_ms([r["resume_applied_s"] for r in recs if "resume_applied_s" in r]),
        "machine_held_ms": {
            "in_force": _stats_ms([r["in_force_held_s"] for r in recs if "in_force_held_s" in r]),
            "resume": _stats_ms([r["resume_held_s"] for r in recs if "resume_held_s" in r]),
        },
        "max_let_by_bytes": max(let_by, default=None),
        "events": events,
        "errors": list(errors),
        "scheduling": scheduling,
    }


def class_totals(recs: list[dict]) -> dict:
    """Per class: pauses and paused link-seconds."""
    out: dict = {}
    for r in recs:
        t = out.setdefault(r["class"], {"pauses": 0, "paused_s": 0.0})
        t["pauses"] += 1
        t["paused_s"] = round(t["paused_s"] + r["duration_s"], 6)
    return out


def paused_intervals(raw: dict) -> dict:
    """{port: [(start, end)]} in monotonic seconds, from when each pause was
    in force to when its resume was: the port's line was held then."""
    out: dict = {}
    for p in raw.get("pauses", ()):
        end = p.get("resumed_ns") or p.get("end_ns")
        out.setdefault(p["ifname"], []).append((p["applied_ns"] * NS, end * NS))
    return out


def to_emulated(recs: list[dict], n: float) -> list[dict]:
    """Records with times in emulated time (a dilated run is n times slower)."""
    if n == 1:
        return recs
    keys = ("start_s", "duration_s")  # reaction stays in this machine's time: it is its latency
    return [{k: (round(v / n, 6) if k in keys else v) for k, v in r.items()} for r in recs]
