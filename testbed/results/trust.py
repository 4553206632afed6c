"""Whether a drill's numbers can be believed: the one place that decides.

A run measures the design only if the emulator kept its promises while it
ran. `assess` holds each promise against what was measured (never against
what was configured) and says which one broke:

  link_fidelity       every egress, switch port or host port, that had
                      packets waiting sent them at its rate
                      (counters.fidelity); the worst port is judged
  generator_fidelity  every NIC port of every traffic agent kept to its
                      line-rate pacing while it had packets ready; the
                      worst port of the worst agent is judged
  agent_results       every traffic agent wrote its results
  emulator_loss       receivers saw no packet gap that neither a modeled
                      queue drop nor a fault explains
  fault_lag           every fault struck within MAX_FAULT_LAG_S of its time
  convergence         the controller's routes were in place within
                      MAX_CONVERGENCE_S of every fault
  emulator_hold       no switch port's frames waited for Open vSwitch to
                      read them longer than MAX_EMULATOR_HOLD_S (the most
                      its socket held unread at a sample, over the port's
                      rate): a delay no modeled queue made
  pause_lag           the machine let the pause daemon act on time: at the
                      99th percentile of pauses (in force and resume), it
                      held the daemon at most MAX_PAUSE_HELD_S, waiting to
                      be woken or off its core (emulation/pfc.py)
  agent_reading       every traffic agent read what arrived for it in time
                      (a process short of CPU reads late: its peers then
                      wait for ACKs, which the sending side cannot see);
                      the median agent and the latest one are judged
  host_cpu            a warning only: the cores were saturated most of the run

A worst case, not an average: one starved host among eight spoils a
synchronous job however well the other seven did. Any failed check makes
the run untrustworthy and no expectation can pass; the report names the
checks that failed. When neither links nor generators were busy enough to
be judged, the emulator's rate is unknown and that fails too. The runner
writes the decision into results.json; verdicts.py reads it back.
"""

from collections.abc import Sequence

from .emulator import ALL_PORTS, unexplained_loss
from .text import fmt, listed

# Probes: the longest gap before any fault (sending interval plus jitter)
PROBE_BASE_GAP_MS = 25.0
FIDELITY_THRESHOLD = 0.9  # below this the run measured the emulator, not the design
# The agents' reading on time (traffic/transport.py ReadMeter): the wire
# time of what an agent read, over that plus how late it read it. Late
# reading does not slow a job one for one (a late pass often falls in a
# wait for a peer), so the thresholds come from runs whose iteration was
# measured against its analytical time (docs/numbers.md). A machine short
# of CPU makes every agent late: runs within 10% of analytical had their
# median agent at 0.897-0.997, those 1.2x or slower 0.808 or less. One
# agent can also fall behind alone: the latest one read 0.80-1.00 in runs
# within 10%, 0.92-1.00 over the shipped drills.
READING_MEDIAN_THRESHOLD = 0.85
READING_WORST_THRESHOLD = 0.7
# Natively the timeline applies a fault within a few ms of its time and the
# controller's routes are acknowledged (hosts included) 12-32 ms after it.
# Ten times that means the machine was too busy to run the timeline or the
# control plane as designed: the silence and slowdowns measured then are the
# machine's, not the fabric's.
MAX_FAULT_LAG_S = 0.1
MAX_CONVERGENCE_S = 0.5
# Frames that wait unread in Open vSwitch's socket of a switch port wait
# outside every modeled queue: the time the port takes to bring in what the
# socket held is a delay the machine added. Quiet, the sockets are read
# within a few frames; held long enough to matter to a transport's timers
# (go-back-N's 250 ms, TCP's 200 ms minimum), the run measured the machine.
# Sampled at 10 Hz, and the socket counts each frame with its buffer
# overhead (about 1.5 x its bytes at a 1500-byte MTU): a short stall can go
# unseen, a long one cannot, and the time is an upper bound.
MAX_EMULATOR_HOLD_S = 0.05

# A pause takes hold and lets go through a real-time user-space daemon, so
# its reaction is its own work plus what the machine held it: woken late
# (this kernel does not preempt kernel code, and a hypervisor may take the
# core) or taken off its core. On the 2-core CI machine, over 8 runs, the
# rest came to 1.1-2.4 ms at the p99 of resumes (seven links one after
# another) and the machine's part to 0.9-1.8 ms at its p99; its worst
# single hold in a run was 1.0-5.4 ms over 12 runs (docs/numbers.md).
# When the machine took more than half of that target at the p99, the
# slowest pauses measured the machine.
MAX_PAUSE_HELD_S = 0.0025

# Every core saturated in most samples. Only a warning: agents and switches
# may keep the cores busy while every promise above still holds, and each
# check above measures what a starved CPU would spoil. It names the likely
# cause when one of them fails.
CPU_SATURATED_SHARE = 0.5

FAIL, WARN = "fail", "warn"


# --- the checks --------------------------------------------------------------


def _check(name, what, value, expected, ok, reason=None, note=None, severity=FAIL, threshold=None):
    return {
        "name": name,
        "measures": what,
        "value": value,
        "threshold": threshold,
        "expected": expected,
        "ok": ok,
        "severity": severity,
        "reason": reason,
        "note": note,
    }


def _ms(seconds):
    return f"{seconds * 1000:.0f} ms"


def _link_check(metrics, generators_judged):
    what = "worst share of owed bytes a busy egress delivered"
    expected = f">= {fmt(FIDELITY_THRESHOLD)}"
    links = ((metrics.get("fidelity") or {}).get("links")) or {}
    judged = {name: v for name, v in links.items() if v.get("fidelity") is not None}
    if not judged:
        if generators_judged:
            return _check(
                "link_fidelity",
                what,
                None,
                expected,
                None,
                note="no egress had packets waiting for 1 s in all: not judged "
                "(the traffic agents or the probes were)",
                threshold=FIDELITY_THRESHOLD,
            )
        return _check(
            "link_fidelity",
            what,
            None,
            expected,
            False,
            threshold=FIDELITY_THRESHOLD,
            reason="nothing was busy long enough to judge the emulator: no egress had "
            "packets waiting for 1 s and no traffic agent had 0.5 s of packets "
            "ready on a port, so the fidelity is unknown",
        )
    name, worst = min(judged.items(), key=lambda kv: kv[1]["fidelity"])
    value = worst["fidelity"]
    switches = [v for v in judged.values() if v.get("switch")]
    note = f"{len(judged)} busy egress{'' if len(judged) == 1 else 'es'} judged"
    if any("switch" in v for v in judged.values()):
        note += f", {len(switches)} of them switch ports"
        if not switches:
            note += "; no switch port had packets waiting for 1 s, so no switch's rate was put to the test"
    reason = None
    if value < FIDELITY_THRESHOLD:
        reason = (
            f"egress {name} delivered {fmt(value)} of the bytes it owed while packets "
            f"waited (worst port; threshold {fmt(FIDELITY_THRESHOLD)})"
        )
    return _check(
        "link_fidelity", what, value, expected, reason is None, reason, note, threshold=FIDELITY_THRESHOLD
    )


def _generator_check(gen):
    what = "worst share of time an agent's port kept to its line-rate pacing"
    expected = f">= {fmt(FIDELITY_THRESHOLD)}"
    if gen is None:
        return _check(
            "generator_fidelity",
            what,
            None,
            expected,
            None,
            note="no traffic agents in this drill",
            threshold=FIDELITY_THRESHOLD,
        )
    too_little = gen.get("too_little") or []
    note = None
    if too_little:
        ports = f"{len(too_little)} agent port{'s' if len(too_little) > 1 else ''}"
        note = f"too little traffic to judge on {ports}: {listed(too_little)}"
    worst = gen.get("worst")
    if worst is None:
        return _check(
            "generator_fidelity",
            what,
            None,
            expected,
            None,
            note=note or "no agent port had packets ready",
            threshold=FIDELITY_THRESHOLD,
        )
    value = worst["on_time"]
    reason = None
    if value < FIDELITY_THRESHOLD:
        where = f"the agent on {worst['host']}" + (
            "" if worst["port"] == ALL_PORTS else f", port {worst['port']},"
        )
        reason = (
            f"{where} kept to its line-rate pacing only {fmt(value)} of the time it had "
            f"packets ready ({fmt(worst['lost_s'], ' s')} lost; threshold "
            f"{fmt(FIDELITY_THRESHOLD)})"
        )
    return _check(
        "generator_fidelity",
        what,
        value,
        expected,
        reason is None,
        reason,
        note,
        threshold=FIDELITY_THRESHOLD,
    )


def _probe_check(metrics):
    """Probes measure gaps of tens of ms: only if they arrived steadily
    before the first fault (the sending interval plus this machine's
    jitter, nothing lost) does a gap around a fault measure the fault."""
    what = "longest gap in probe delivery before the first fault (ms)"
    expected = f"<= {fmt(PROBE_BASE_GAP_MS)}, nothing lost"
    probe = metrics.get("probe")
    if not probe:
        return _check(
            "probe_baseline",
            what,
            None,
            expected,
            None,
            note="no probes in this drill",
            threshold=PROBE_BASE_GAP_MS,
        )
    base, lost = probe.get("base_gap_ms"), probe.get("base_lost") or 0
    if base is None:
        return _check(
            "probe_baseline",
            what,
            None,
            expected,
            False,
            threshold=PROBE_BASE_GAP_MS,
            reason="the probes had no steady time before the first fault to measure "
            "this machine's own jitter against: start the faults later",
        )
    reason = None
    if lost:
        reason = f"{lost} probe packets were lost before any fault: the emulator dropped them"
    elif base > PROBE_BASE_GAP_MS:
        reason = (
            f"probes went {fmt(base)} ms without a delivery before any fault (limit "
            f"{fmt(PROBE_BASE_GAP_MS)} ms): the machine could not keep them steady"
        )
    return _check("probe_baseline", what, base, expected, reason is None, reason, threshold=PROBE_BASE_GAP_MS)


def _agents_check(gen):
    what = "traffic agents that wrote no results"
    if gen is None:
        return _check("agent_results", what, None, "none", None, note="no traffic agents")
    missing = gen.get("missing_results") or []
    reason = None
    if missing:
        reason = (
            f"no results from the traffic agents on {', '.join(map(str, missing))}: "
            "what they sent and received was not measured"
        )
    return _check("agent_results", what, len(missing), "none", not missing, reason, threshold=0)


def _loss_check(metrics, faults):
    what = (
        "frames the emulator lost: drops the kernel counted outside the model, "
        "else packet gaps no modeled drop and no fault explains"
    )
    jobs = metrics.get("jobs")
    if not jobs:
        return _check(
            "emulator_loss", what, None, "0", None, note="no traffic agents counted gaps in this drill"
        )
    seen = sum(jm.get("gaps_seen") or 0 for jm in jobs.values())
    lost = unexplained_loss(
        jobs,
        metrics.get("queue_drops"),
        faults,
        (metrics.get("generators") or {}).get("rx_overflows"),
        metrics.get("emulator_drops"),
        metrics.get("crux"),
    )
    if lost:
        if "dropped" in lost:
            frames = lost["rx_overflows"] + sum(lost["dropped"].values())
            reason = lost["note"] + f"; receivers saw {seen} packet gaps"
            return _check("emulator_loss", what, frames, "0", False, threshold=0, reason=reason)
        else:
            per_job = ", ".join(f"{job}: {n}" for job, n in sorted(lost["gaps_seen"].items()))
            reason = (
                f"receivers saw {seen} packet gaps ({per_job}) that no modeled "
                "queue dropped and no fault explains: the emulator lost packets"
            )
        return _check("emulator_loss", what, seen, "0", False, threshold=0, reason=reason)
    note = None
    if seen:
        if metrics.get("queue_drops"):
            why = "modeled queue drops"
        elif faults:
            why = "the faults"
        else:
            why = "class changes that reordered frames in flight (Crux as it ran)"
        note = f"{seen} gaps, explained by {why}"
    return _check("emulator_loss", what, 0, "0", True, note=note, threshold=0)


def _hold_check(metrics):
    what = "longest a switch port's frames waited unread for Open vSwitch (s, at most)"
    expected = f"<= {fmt(MAX_EMULATOR_HOLD_S)}"
    hold = metrics.get("emulator_hold")
    if hold is None:
        return _check(
            "emulator_hold",
            what,
            None,
            expected,
            None,
            note="not measured (kernel datapath, or no samples)",
            threshold=MAX_EMULATOR_HOLD_S,
        )
    value = hold["worst_s"]
    reason = None
    if value > MAX_EMULATOR_HOLD_S:
        reason = (
            f"Open vSwitch left up to {_ms(value)} of frames unread on switch port {hold['port']} "
            f"(limit {_ms(MAX_EMULATOR_HOLD_S)}): the machine was short of CPU, and delays "
            "measured then are the machine's, not the fabric's"
        )
    return _check(
        "emulator_hold", what, value, expected, reason is None, reason, threshold=MAX_EMULATOR_HOLD_S
    )


def _pause_check(metrics):
    what = "the machine's hold on the pause daemon at the p99 of pauses (s, worst of in force and resume)"
    expected = f"<= {fmt(MAX_PAUSE_HELD_S)}"
    held = (metrics.get("pfc") or {}).get("machine_held_ms") or {}
    p99 = {kind: s["p99"] / 1e3 for kind, s in held.items() if s}
    if not p99:
        return _check("pause_lag", what, None, expected, None, note="no pauses", threshold=MAX_PAUSE_HELD_S)
    kind, value = max(p99.items(), key=lambda kv: kv[1])
    reason = None
    if value > MAX_PAUSE_HELD_S:
        which = "resumes" if kind == "resume" else "pauses taking hold"
        reason = (
            f"the machine held the pause daemon {value * 1e3:.2f} ms at the 99th percentile of "
            f"{which} (limit {MAX_PAUSE_HELD_S * 1e3:g} ms): "
            "it was woken late or taken off its core, so the slowest reactions are the machine's, "
            "not the lossless class's"
        )
    return _check("pause_lag", what, value, expected, reason is None, reason, threshold=MAX_PAUSE_HELD_S)


def fault_label(i: int, fault: dict) -> str:
    """'fault 2 (link-down s0h0-t0r0k0)': numbered from 1 in the order applied."""
    link = "-".join(map(str, fault.get("link") or ())) + (f" #{fault['index']}" if fault.get("index") else "")
    return f"fault {i + 1} ({fault.get('action')} {link})"


def _lag_check(faults):
    what = "worst delay of a fault after its scheduled time (s)"
    expected = f"<= {fmt(MAX_FAULT_LAG_S)}"
    lags = [
        (f["applied_at"] - f["at"], i, f)
        for i, f in enumerate(faults)
        if f.get("applied_at") is not None and f.get("at") is not None
    ]
    if not lags:
        return _check(
            "fault_lag", what, None, expected, None, note="no faults were applied", threshold=MAX_FAULT_LAG_S
        )
    lag, i, f = max(lags, key=lambda x: x[0])
    reason = None
    if lag > MAX_FAULT_LAG_S:
        reason = (
            f"{fault_label(i, f)} applied {_ms(lag)} late (limit {_ms(MAX_FAULT_LAG_S)}): "
            "the drill did not keep its timeline"
        )
    return _check(
        "fault_lag", what, round(lag, 4), expected, reason is None, reason, threshold=MAX_FAULT_LAG_S
    )


def _untimed(faults):
    """Why no fault's convergence was timed."""
    if not faults:
        return "no faults"
    if all(f.get("action") in ("link-degrade", "link-restore") for f in faults):
        return "the faults changed link rates only: no route moved"
    return "convergence was not recorded"


def _convergence_check(faults):
    """The controller answers every port change with a new routes version
    (even an unchanged one), so a fault with no acknowledged routes after it
    (converged_s None) means the controller was dead or hung: the run did not
    emulate the fabric it describes, and that fails the check too. Faults
    without the key at all (results from elsewhere) are not judged."""
    what = "worst time from a fault to its routes being acknowledged (s)"
    expected = f"<= {fmt(MAX_CONVERGENCE_S)}"
    timed = [(i, f) for i, f in enumerate(faults) if "converged_s" in f]
    if not timed:
        return _check(
            "convergence",
            what,
            None,
            expected,
            None,
            threshold=MAX_CONVERGENCE_S,
            note=_untimed(faults),
        )
    silent = [(i, f) for i, f in timed if f["converged_s"] is None]
    if silent:
        i, f = silent[0]
        return _check(
            "convergence",
            what,
            None,
            expected,
            False,
            threshold=MAX_CONVERGENCE_S,
            reason=f"the controller acknowledged no routes after {fault_label(i, f)}: it did not react",
        )
    worst, i, f = max((f["converged_s"], i, f) for i, f in timed)
    reason = None
    if worst > MAX_CONVERGENCE_S:
        reason = (
            f"routes converged {_ms(worst)} after {fault_label(i, f)} (limit "
            f"{_ms(MAX_CONVERGENCE_S)}; tens of ms on an idle machine)"
        )
    return _check("convergence", what, worst, expected, reason is None, reason, threshold=MAX_CONVERGENCE_S)


def _reading_check(gen):
    """The receiving side of the agents' fidelity: a process short of CPU
    falls behind in reading, its peers wait for ACKs and their ports look
    idle by choice, which the sending side cannot see. Judged on the median
    agent (the whole machine late) and on the latest one (one starved)."""
    what = "share of its receiving in which the median agent read its frames in time"
    expected = f">= {fmt(READING_MEDIAN_THRESHOLD)}, the latest agent >= {fmt(READING_WORST_THRESHOLD)}"
    gen = gen or {}
    worst, median = gen.get("reading_worst"), gen.get("reading_median")
    if worst is None or median is None:
        note = "no agent received enough to judge" if gen else "no traffic agents in this drill"
        return _check(
            "agent_reading", what, None, expected, None, note=note, threshold=READING_MEDIAN_THRESHOLD
        )
    late = (
        f"the agent on {worst['host']} read its frames in time only {fmt(worst['on_time'])} of its "
        f"receiving ({fmt(worst['late_s'], ' s')} late, longest wait {_ms(worst['max_wait_s'])})"
    )
    reason = None
    if median < READING_MEDIAN_THRESHOLD:
        reason = f"the median agent read its frames in time {fmt(median)} of its receiving; {late}"
    elif worst["on_time"] < READING_WORST_THRESHOLD:
        reason = late
    return _check(
        "agent_reading", what, median, expected, reason is None, reason, threshold=READING_MEDIAN_THRESHOLD
    )


def _cpu_check(metrics):
    what = "share of samples with every core saturated"
    expected = f"<= {fmt(CPU_SATURATED_SHARE)}"
    share = (metrics.get("host_cpu") or {}).get("saturated_share")
    if share is None:
        return _check(
            "host_cpu",
            what,
            None,
            expected,
            None,
            severity=WARN,
            note="CPU was not sampled",
            threshold=CPU_SATURATED_SHARE,
        )
    reason = None
    if share > CPU_SATURATED_SHARE:
        reason = (
            f"every core was saturated in {share * 100:.0f}% of the samples: the machine had no CPU to spare"
        )
    return _check(
        "host_cpu",
        what,
        share,
        expected,
        reason is None,
        reason,
        severity=WARN,
        threshold=CPU_SATURATED_SHARE,
    )


def assess(metrics: dict, faults: Sequence[dict] = ()) -> dict:
    """Every check of the run and the decision: {trustworthy, failed (names
    of the failed checks), warnings (names), checks: [{name, measures, value,
    threshold, expected, ok (None: not judged), severity, reason, note}]}."""
    gen = metrics.get("generators")
    gen_check = _generator_check(gen)
    probe_check = _probe_check(metrics)
    others_judged = gen_check["ok"] is not None or probe_check["ok"] is not None
    checks = [
        _link_check(metrics, others_judged),
        gen_check,
        probe_check,
        _agents_check(gen),
        _reading_check(gen),
        _loss_check(metrics, faults),
        _lag_check(faults),
        _convergence_check(faults),
        _hold_check(metrics),
        _pause_check(metrics),
        _cpu_check(metrics),
    ]
    failed = [c["name"] for c in checks if c["ok"] is False and c["severity"] == FAIL]
    warnings = [c["name"] for c in checks if c["ok"] is False and c["severity"] == WARN]
    return {"trustworthy": not failed, "failed": failed, "warnings": warnings, "checks": checks}


def is_trustworthy(fidelity_min: float | None) -> bool:
    """Does a fidelity reach FIDELITY_THRESHOLD? Unknown fidelity does not.
    A single number never decides a run: assess holds the worst egress and
    the worst agent port to this threshold, beside the other checks."""
    return fidelity_min is not None and fidelity_min >= FIDELITY_THRESHOLD
