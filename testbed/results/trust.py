"""Whether a drill's numbers can be believed: the one place that decides.

An emulator short of CPU delivers less than its links promise, and traffic
generators short of CPU fall behind their pacing; numbers measured then
describe the emulator, not the design. Two measurements decide, both
computed from what was measured, never from what was configured:
  * link fidelity: achieved / configured rate over the intervals an egress
    was saturated (counters.fidelity);
  * generator fidelity: the share of line rate the traffic agents' port
    pacers kept while they had packets waiting; an agent that wrote no
    results measured nothing (fidelity 0).
The smaller of the two is the run's fidelity; below FIDELITY_THRESHOLD (or
unknown) the run is untrustworthy and no expectation can pass. Loss that no
modeled queue and no fault explains is named beside it.
"""
from .text import fmt

FIDELITY_THRESHOLD = 0.9   # below this the run measured the emulator, not the design


# --- measuring ---------------------------------------------------------------

def generator_metrics(agent_results):
    """How far the generators fell behind their pacing: packets sent late and
    the share of line rate they achieved while backlogged (a generator short
    of CPU falls behind, and the run must say so)."""
    got = [res for res in agent_results.values() if res]
    tx = sum(res["pacing"]["tx_s"] for res in got)
    lost = sum(res["pacing"]["lost_s"] for res in got)
    return {"packets_sent": sum(r["packets_sent"] for res in got for r in res["jobs"]),
            "late_packets": sum(res["pacing"]["late_packets"] for res in got),
            "max_lag_s": max((res["pacing"]["max_lag_s"] for res in got), default=None),
            "lost_s": round(lost, 4), "on_time": tx / (tx + lost) if tx else None,
            "missing_results": sorted(h for h, r in agent_results.items() if r is None)}


def fold_generators(fidelity, generators):
    """Make the generators' fidelity part of the run's (`fidelity` is the
    metrics' fidelity dict, changed in place)."""
    on_time = generators["on_time"]
    if on_time is not None:
        fidelity["generators_on_time"] = on_time
        fidelity["min"] = on_time if fidelity["min"] is None else min(fidelity["min"], on_time)
    if generators["missing_results"]:
        fidelity["min"] = 0.0  # an agent that wrote nothing measured nothing


def unexplained_loss(job_metrics, queue_drops, faults):
    """Receivers that saw PSN gaps while no modeled queue dropped a packet
    and no link failed: the packets were lost inside the emulator itself (a
    switch or host short of CPU), not by the network being emulated. None
    when the emulated network accounts for every loss (or there was none)."""
    gaps = {name: jm["gaps_seen"] for name, jm in job_metrics.items() if jm.get("gaps_seen")}
    if not gaps or queue_drops or faults:
        return None
    return {"gaps_seen": gaps,
            "note": "receivers saw lost packets that no modeled queue dropped and no fault "
                    "explains: the emulator lost them (see gap_events per job)"}


# --- deciding ----------------------------------------------------------------

def is_trustworthy(fidelity_min):
    """Fidelity good enough to believe the run? Unknown fidelity is not."""
    return fidelity_min is not None and fidelity_min >= FIDELITY_THRESHOLD


def fidelity_min(results):
    return (((results.get("metrics") or {}).get("fidelity")) or {}).get("min")


def _generator_problems(results):
    """Sentences about traffic generators that fell behind or wrote nothing."""
    gen = (results.get("metrics") or {}).get("generators") or {}
    problems = []
    if gen.get("missing_results"):
        problems.append("No results from the traffic agents on "
                        f"{', '.join(map(str, gen['missing_results']))}.")
    on_time = gen.get("on_time")
    if on_time is not None and on_time < FIDELITY_THRESHOLD:
        problems.append(f"The traffic generators kept to their line-rate pacing only "
                        f"{fmt(on_time)} of the time.")
    return problems


def low_fidelity(results):
    """True when the run itself says it is untrustworthy, fidelity is low,
    or the training jobs' traffic generators could not keep up (read from a
    results dict, so that a report of any run says the same)."""
    fid = fidelity_min(results)
    return (results.get("trustworthy") is False or (fid is not None and fid < FIDELITY_THRESHOLD)
            or bool(_generator_problems(results)))


def reasons(results):
    """Sentences saying why a run is not trustworthy: generators that fell
    behind, and the worst loaded link when it fell short."""
    fid = fidelity_min(results)
    causes = _generator_problems(results)
    links = ((results.get("metrics") or {}).get("fidelity") or {}).get("links") or {}
    worst_link = min((v.get("fidelity") for v in links.values()
                      if v.get("fidelity") is not None), default=None)
    if not causes:
        causes = [f"The worst loaded link delivered {fmt(fid)} of its configured rate "
                  f"(threshold {fmt(FIDELITY_THRESHOLD)})."]
    elif worst_link is not None and worst_link < FIDELITY_THRESHOLD:
        causes.append(f"The worst loaded link delivered {fmt(worst_link)} of its "
                      f"configured rate (threshold {fmt(FIDELITY_THRESHOLD)}).")
    return causes


def verdict(results):
    """PASSED / FAILED / UNTRUSTWORTHY (the latter never counts as a pass)."""
    if results.get("trustworthy") is False:
        return "UNTRUSTWORTHY"
    return "PASSED" if results.get("passed") else "FAILED"
