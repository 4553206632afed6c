"""What a drill found, in a few sentences a person reads before any table:
the report's and the terminal's first lines after the verdict (pure).

Each sentence is built from measured values only (throughput before and
during the faults, silences, recovery, convergence, iteration times, GPU
utilization, retransmissions); a value the run did not measure is left
out, never guessed.
"""

from __future__ import annotations

from .text import fmt, listed


def findings(results: dict) -> list[str]:
    """Sentences, most telling first: the faults' effect on each sending
    host, how fast the routes converged, then each job."""
    metrics = results.get("metrics") or {}
    while_ = _while(metrics.get("outages") or [])
    out = [_host_finding(h, m, while_) for h, m in (metrics.get("hosts") or {}).items()]
    out.append(_convergence_finding(results.get("faults") or []))
    out.append(_host_routes_finding(results.get("faults") or [], metrics.get("controller") or {}))
    out += [_job_finding(j, m, while_) for j, m in (metrics.get("jobs") or {}).items()]
    if len(metrics.get("jobs") or {}) > 1 and metrics.get("gpu_utilization") is not None:
        out.append(f"All GPUs together were busy {metrics['gpu_utilization']:.0%} of the time.")
    return [s for s in out if s]


def _while(windows: list) -> str:
    """How the sentences name the fault windows: what the links went through."""
    kinds = {w.get("kind", "down") for w in windows}
    if kinds == {"degraded"}:
        return "while the link was degraded"
    return "while the link was down" if kinds <= {"down"} else "during the faults"


def _host_finding(host: str, m: dict, while_: str = "while the link was down") -> str | None:
    ratio, before, during = m.get("fault_throughput_ratio"), m.get("before_mbit"), m.get("during_mbit")
    if ratio is None or before is None or during is None:
        return None
    rates = f"({fmt(during)} of {fmt(before)} Mbit/s)"
    if ratio < 0.02:
        text = f"{host} was cut off {while_} {rates}"
    else:
        text = f"{host} kept {ratio:.0%} of its throughput {while_} {rates}"
    silence = m.get("max_silence_s")
    if silence is not None:
        text += f"; its longest silence was {fmt(silence)} s"
    recovery = m.get("recovery_s")
    if recovery is not None:
        back = "its rate was restored" if "degraded" in while_ else "the link came back"
        text += f"; it was back to 90% of its rate {fmt(recovery)} s after {back}"
    elif m.get("recovered_throughput_ratio") is not None:
        text += f"; at the end it ran at {m['recovered_throughput_ratio']:.0%} of its rate before"
    return text + "."


def _convergence_finding(faults: list) -> str | None:
    routed = [f for f in faults if "converged_s" in f]  # a rate change moves no route
    times = [f["converged_s"] * 1000 for f in routed if f["converged_s"] is not None]
    if not times:
        return None
    low, high = fmt(min(times)), fmt(max(times))
    span = f"{low} ms" if low == high else f"{low}-{high} ms"  # one value, or all alike
    return f"The controller's routes converged {span} after each fault ({len(times)} of {len(routed)} timed)."


def _host_routes_finding(faults: list, controller: dict, most: int = 3) -> str | None:
    """After faults that moved routes: which hosts the controller still held
    off some of their NIC's ports when the traffic ended (after a repair,
    none should be)."""
    held = controller.get("host_routes_at_end")
    if held is None or not any("converged_s" in f for f in faults):
        return None
    if not held:
        return "When the traffic ended, the controller held no host off any of its ports."
    parts = []
    for host in sorted(held):
        routes = held[host]
        dst = sorted(routes)[0]
        extra = len(routes) - 1
        more = f", and to {extra} more destination{'s' if extra > 1 else ''}" if extra else ""
        parts.append(f"{host} (to {dst} only by {', '.join(routes[dst])}{more})")
    return (
        f"When the traffic ended, the controller held {len(held)} host{'s' if len(held) > 1 else ''} "
        f"off some of their ports: {listed(parts, most)}."
    )


def _job_finding(job: str, m: dict, while_: str = "while the link was down") -> str | None:
    done, planned = m.get("iterations_completed"), m.get("iterations_planned")
    if done is None:
        return None
    text = f"Job {job} ran {done}" + (f" of {planned}" if planned else "") + " iterations"
    mean, vs = m.get("iteration_time_s"), m.get("iteration_time_vs_analytical")
    if mean is not None:
        text += f", {fmt(mean)} s each" + (f" ({fmt(vs)}x its analytical time)" if vs is not None else "")
    util = m.get("gpu_utilization")
    if util is not None:
        text += f"; its GPUs were busy {util:.0%} of the time"
    slowdown = m.get("fault_iteration_slowdown")
    if slowdown is not None:
        text += f"; an iteration took {fmt(slowdown)}x as long {while_}"
    retx, stalled = m.get("retransmissions"), m.get("stalled_iterations")
    if retx:
        text += f"; {retx} retransmissions"
    if stalled:
        text += f"; {stalled} stalled iterations"
    return text + "."
