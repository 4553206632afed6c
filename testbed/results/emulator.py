"""What the emulator itself did while a drill ran (pure): how well the
traffic agents kept to their line-rate pacing, the frames the machine lost
outside every modeled queue, and how long Open vSwitch left frames unread.
results/trust.py holds these against its thresholds."""

import statistics

from testbed.fabric.model import Fabric
from testbed.fabric.queues import shaper_burst_bytes

from .text import fmt

# A port must have had packets ready this long before its pacing is judged:
# a few hundred packets, enough for a share of time to mean something.
MIN_JUDGED_BACKLOG_S = 0.5
ALL_PORTS = "all ports"  # results written before agents reported per port


def paused_overlap(gaps: list, paused: list) -> float:
    """Seconds of the late gaps [(start, length)] that fall in the port's
    paused intervals [(start, end)]: the line was held by a pause then, not
    left idle by a late agent."""
    total = 0.0
    for start, length in gaps or ():
        for a, b in paused or ():
            total += max(0.0, min(start + length, b) - max(start, a))
    return total


def _port_pacing(p, paused=None):
    tx, lost = p.get("tx_s") or 0.0, p.get("lost_s") or 0.0
    held = min(lost, paused_overlap(p.get("gaps"), paused)) if paused else 0.0
    lost -= held
    return {
        "tx_s": round(tx, 4),
        "lost_s": round(lost, 4),
        "paused_s": round(held, 4),
        "packets": p.get("packets"),
        "on_time": tx / (tx + lost) if tx + lost > 0 else None,
        # A starved port sends little: what it had waiting, sent or not,
        # is how much there was to judge.
        "judged": tx + lost >= MIN_JUDGED_BACKLOG_S,
    }


def generator_metrics(agent_results: dict, paused: dict | None = None) -> dict:
    """How well each agent's NIC ports kept to their line-rate pacing while
    they had packets ready (tx_s / (tx_s + lost_s) per port), the worst
    judged port, and the totals. Agents that reported only totals (older
    results) are judged on those. `paused`: {port: [(start, end)]} when a
    lossless class held the port (same clock as the agents'); time a late
    gap spent inside those is not counted as lost."""
    got = {h: r for h, r in agent_results.items() if r}
    paused = paused or {}
    ports = {}
    for host, res in sorted(got.items()):
        pacing = res["pacing"]
        per_port = pacing.get("ports") or {ALL_PORTS: pacing}
        ports[host] = {name: _port_pacing(p, paused.get(name)) for name, p in sorted(per_port.items())}
    judged = [
        (p["on_time"], host, name) for host, pp in ports.items() for name, p in pp.items() if p["judged"]
    ]
    worst = None
    if judged:
        on_time, host, name = min(judged)
        worst = {"host": host, "port": name, **ports[host][name], "on_time": on_time}
    tx = sum(res["pacing"]["tx_s"] for res in got.values())
    lost = sum(p["lost_s"] for pp in ports.values() for p in pp.values())
    return {
        "packets_sent": sum(r["packets_sent"] for res in got.values() for r in res["jobs"]),
        "late_packets": sum(res["pacing"]["late_packets"] for res in got.values()),
        "max_lag_s": max((res["pacing"]["max_lag_s"] for res in got.values()), default=None),
        "lost_s": round(lost, 4),
        "paused_s": round(sum(p["paused_s"] for pp in ports.values() for p in pp.values()), 4),
        "mean_on_time": tx / (tx + lost) if tx else None,
        "on_time": worst["on_time"] if worst else None,
        "worst": worst,
        "ports": ports,
        "too_little": [
            f"{h} {name} ({fmt(p['tx_s'] + p['lost_s'], ' s')})"
            for h, pp in ports.items()
            for name, p in pp.items()
            if not p["judged"]
        ],
        "rx_overflows": _rx_overflows(got.values()),
        "missing_results": sorted(h for h, r in agent_results.items() if r is None),
        # how many processes played the hosts (older results: one per host)
        "agent_processes": len(
            {tuple((res.get("process") or {}).get("hosts") or [h]) for h, res in got.items()}
        ),
        **reading_metrics(got),
    }


def reading_metrics(results: dict) -> dict:
    """How well each agent read the frames that arrived for it in time
    (rx_s / (rx_s + late_s), see traffic.transport.ReadMeter), the worst
    host that received enough to judge and the median of those hosts.
    Results written before agents measured it have none."""
    readers = {}
    for host, res in sorted(results.items()):
        r = res.get("reading")
        if r:
            rx, late = r["rx_s"], r["late_s"]
            readers[host] = {
                "rx_s": round(rx, 4),
                "late_s": round(late, 4),
                "max_wait_s": r["max_wait_s"],
                "on_time": rx / (rx + late) if rx + late > 0 else None,
                "judged": rx + late >= MIN_JUDGED_BACKLOG_S,
            }
    judged = [(v["on_time"], host) for host, v in readers.items() if v["judged"]]
    worst = median = None
    if judged:
        _, host = min(judged)
        worst = {"host": host, **readers[host]}
        median = statistics.median(v for v, _ in judged)
    return {"readers": readers, "reading_worst": worst, "reading_median": median}


def _rx_overflows(results):
    """Frames the agents' receive sockets dropped: the kernel counts them per
    network namespace, so agents sharing a host report the same count."""
    per_host = {}
    for res in results:
        n = res.get("rx_overflows")
        if n is not None:
            host = res.get("host")
            per_host[host] = max(per_host.get(host, 0), n)
    return sum(per_host.values())


def fold_generators(fidelity: dict, generators: dict) -> None:
    """Make the generators' fidelity (their worst port) part of the run's
    (`fidelity` is the metrics' fidelity dict, changed in place)."""
    on_time = generators["on_time"]
    if on_time is not None:
        fidelity["generators_on_time"] = on_time
        fidelity["min"] = on_time if fidelity["min"] is None else min(fidelity["min"], on_time)
    if generators["missing_results"]:
        fidelity["min"] = 0.0  # an agent that wrote nothing measured nothing


EMULATOR_DROPS = {
    "ovs_socket_drops": "Open vSwitch's packet sockets",
    "backlog_drops": "the CPUs' input backlogs",
}


# A job moved to another class while its frames were in flight: the frames
# of one connection sit in two classes at once and may leave out of order
# (and Open vSwitch applies a changed rule to its cached flows at its next
# revalidation, up to 500 ms later). A gap in that job's traffic this soon
# after the change is the modeled network reordering, not the emulator.
RECLASSIFY_WINDOW_S = 0.6


def class_changes(crux: dict | None) -> dict[str, list[float]]:
    """{job: [when its class changed]} from Crux's decisions as it ran."""
    changes: dict[str, list[float]] = {}
    before: dict[str, int] = {}
    for d in (crux or {}).get("decisions", []):
        for job, level in d["levels"].items():
            if job in before and before[job] != level:
                changes.setdefault(job, []).append(d["at"])
            before[job] = level
    return changes


def _reordered(jm: dict, changes: list[float]) -> int:
    """The job's gaps that came within RECLASSIFY_WINDOW_S of a class change
    (a gap's time counts from the job's start, the first of its window)."""
    start = (jm.get("window_s") or [0.0])[0]
    return sum(
        1
        for g in jm.get("gap_events") or ()
        if any(c <= start + g["t"] <= c + RECLASSIFY_WINDOW_S for c in changes)
    )


def unexplained_loss(
    job_metrics: dict,
    queue_drops: dict | None,
    faults: list,
    rx_overflows: int | None = None,
    emulator_drops: dict | None = None,
    crux: dict | None = None,
) -> dict | None:
    """Packets lost inside the emulator itself (a switch or host short of
    CPU), not by the network being emulated: frames the kernel counted as
    dropped outside any modeled queue (the traffic agents' receive sockets
    that were not read in time, Open vSwitch's packet sockets, the CPUs'
    input backlogs: `emulator_drops`, from testbed/drill/cost.py), known
    even beside modeled drops and faults; or PSN gaps while no modeled
    queue dropped a packet, no link failed and no class change of the job
    reordered its frames (`crux`: metrics.crux). A frame the emulator lost at
    the end of a transfer leaves no gap, only a timeout: the counters catch
    it. None when the emulated network accounts for every loss (or there
    was none)."""
    moved = class_changes(crux)
    gaps = {
        name: left
        for name, jm in job_metrics.items()
        if (left := (jm.get("gaps_seen") or 0) - _reordered(jm, moved.get(name, []))) > 0
    }
    dropped = {k: n for k, n in (emulator_drops or {}).items() if n and k in EMULATOR_DROPS}
    if rx_overflows or dropped:
        said = (
            [f"the traffic agents' receive sockets dropped {rx_overflows} frames they did not read in time"]
            if rx_overflows
            else []
        ) + [f"{EMULATOR_DROPS[k]} dropped {n} frames" for k, n in sorted(dropped.items())]
        return {
            "gaps_seen": gaps,
            "rx_overflows": rx_overflows or 0,
            "dropped": dropped,
            "note": "; ".join(said) + " (outside any modeled queue, as the kernel counted: "
            "the machine was short of CPU)",
        }
    if not gaps or queue_drops or faults:
        return None
    return {
        "gaps_seen": gaps,
        "note": "receivers saw lost packets that no modeled queue dropped and no fault "
        "explains: the emulator lost them (see gap_events per job)",
    }


def emulator_hold(fabric: Fabric, held_bytes: dict | None) -> dict | None:
    """{"worst_s", "port", "ports": {switch port: s}}: how long, at least,
    the oldest frame held unread in Open vSwitch's socket of a switch port
    had waited (this machine's seconds, like every measured time before
    results/dilation.py); None when not measured (the kernel datapath has
    no such sockets, or a run that never sampled).

    Frames come in at the link's rate, except that the peer's shaper may
    send a burst back to back after an idle moment: the bytes beyond that
    burst took their time at the link's rate to arrive, and none was read
    meanwhile. Counting the burst too would charge a slow link the time
    its first frames never waited: at 5 Mbit/s a 9000-byte frame is 14 ms,
    and two that arrived together read as 29 ms of holding."""
    if held_bytes is None:
        return None
    rate = {e.ifname: fabric.scaled_bps(link) for link in fabric.links for e in (link.a, link.b)}
    burst = shaper_burst_bytes(fabric.mtu)
    ports = {
        name: round(max(0, n - burst) * 8 / rate[name], 4)
        for name, n in held_bytes.items()
        if name in rate and n > burst
    }
    worst = max(ports, key=lambda name: ports[name], default=None)
    return {"worst_s": ports[worst] if worst else 0.0, "port": worst, "ports": ports}
