"""summary.md's sections on the fabric's mechanisms: queue classes, pauses
of lossless classes, probes' delivery gaps, controller restarts, and the
fabric itself."""

from .text import count, fmt, md_table


def section_queues(results: dict) -> str:
    """Per class: what every port together sent, dropped and marked, and the
    worst port's backlog; then the busiest ports; then the sampler's cost."""
    metrics = results.get("metrics") or {}
    rows = [
        [name, c["sent_bytes"], c["drops"], c["marks"], c["max_backlog_bytes"], c["p99_backlog_bytes"]]
        for name, c in (metrics.get("classes") or {}).items()
    ]
    parts = [
        md_table(
            ["class", "sent bytes", "drops", "CE marks", "max backlog (B)", "p99 backlog (B, worst port)"],
            rows,
        )
    ]
    ports = []
    for ifname, by_class in ((results.get("queues") or {}).get("ports") or {}).items():
        for name, e in by_class.items():
            if e["max_backlog_bytes"] or e["drops"] or e["marks"]:
                ports.append(
                    [
                        f"{ifname} / {name}",
                        e["max_backlog_bytes"],
                        e["p99_backlog_bytes"],
                        e["mean_backlog_bytes"],
                        e["drops"],
                        e["marks"],
                    ]
                )
    ports.sort(key=lambda r: -r[1])
    if ports:
        parts.append(
            md_table(["port / class", "max (B)", "p99 (B)", "mean (B)", "drops", "marks"], ports[:12])
        )
    tel = metrics.get("queue_telemetry") or {}
    parts.append(
        f"_Sampled from the queue engine's counters at {fmt(tel.get('sample_hz'))} Hz; "
        f"the sampler used {fmt(100 * (tel.get('cpu_share') or 0))}% of one core._"
    )
    files = results.get("files") or {}
    for key, alt in (("queues", "queue backlog"), ("marks", "ECN marks")):
        if files.get(key):
            parts.append(f"![{alt}]({files[key]})")
    return "\n\n".join(parts)


def _ms(stats):
    if not stats:
        return "not measured"
    return (
        f"median {fmt(stats['median'])} ms, p99 {fmt(stats['p99'])} ms, max {fmt(stats['max'])} ms "
        f"over {count(stats['n'])}"
    )


def section_controller(ctl: dict) -> str:
    """When the controller went away and what each restart did."""
    rows = [
        [fmt(e["at"]), "exited" + ("" if e["asked"] else " (not asked: a crash)"), f"status {e['code']}"]
        for e in ctl.get("exits", [])
    ]
    for r in ctl.get("restarts", []):
        if r["s"] is None:
            what = "routes never acknowledged"
        else:
            what = (
                f"adopted {r['adopted_routes']} routes from the switches, removed "
                f"{r['removed']}; routes stood again after {fmt(r['s'])} s with "
                f"{r['changes']} flow/group changes"
            )
        rows.append([fmt(r["at"]), "started", what])
    rows.sort(key=lambda row: float(row[0]))
    return (
        md_table(["at (s)", "controller", "what it did"], rows)
        + f"\n\n_Without a controller for {fmt(ctl.get('without_s'))} s: the switches kept "
        f"their flows (fail-mode secure) and forwarded on them; nothing rerouted "
        f"around a fault in that time._"
    )


def section_probes(probe: dict) -> str:
    """The longest delivery gap around each named fault, and what it rests on."""
    rows = []
    for name, f in probe.get("faults", {}).items():
        gap = fmt(f["gap_ms"]) if f.get("gap_ms") is not None else f"- ({f.get('why_none', 'none')})"
        rows.append(
            [
                name,
                f"{f['action']} x{f['faults']}",
                fmt(f["at"]),
                gap,
                fmt(f.get("send_gap_ms")),
                str(f["lost"]),
                str(f["flows_hit"]),
                fmt(f.get("crossing_pps")),
            ]
        )
    table = md_table(
        [
            "fault",
            "action",
            "at (s)",
            "longest gap (ms)",
            "sender's longest pause (ms)",
            "lost",
            "flows hit",
            "probe pkt/s on the link before",
        ],
        rows,
    )
    return (
        table + f"\n\n_{count(probe.get('flows'))} probe flows sent "
        f"{probe.get('sent')} packets and {probe.get('received')} arrived. The gap is the longest "
        f"time any flow went without a delivery between the fault and the next one; before the "
        f"first fault it was at most {fmt(probe.get('base_gap_ms'))} ms (the sending interval "
        f"and this machine's jitter). A fault whose links carried no probe before it gets no "
        f"gap: its links were not on the probes' paths._"
    )


def section_pauses(results: dict) -> str:
    """How often and how long each link was paused, and how fast pauses
    took hold and let go (testbed/results/pauses.py)."""
    pfc = (results.get("metrics") or {}).get("pfc") or {}
    rows = [
        [link, e["pauses"], e["paused_s"]]
        for link, e in sorted((pfc.get("links") or {}).items(), key=lambda kv: -kv[1]["paused_s"])
    ]
    parts = [
        f"{count(pfc.get('pauses'))} pauses, {fmt(pfc.get('paused_s'))} link-seconds paused "
        "in all." + (f" Pause daemon errors: {'; '.join(pfc['errors'])}." if pfc.get("errors") else "")
    ]
    if rows:
        parts.append(md_table(["paused upstream port / class", "pauses", "paused (s)"], rows[:12]))
    parts.append(
        f"- in force (XOFF crossing to the upstream's change acknowledged): {_ms(pfc.get('in_force_ms'))}\n"
        f"- resume (XON crossing to the first frame from the upstream, on the wire): "
        f"{_ms(pfc.get('resume_ms'))}\n"
        f"- of these reaction times, the machine held the pause daemon (woken late or off its core): "
        f"in force {_ms((pfc.get('machine_held_ms') or {}).get('in_force'))}, resume "
        f"{_ms((pfc.get('machine_held_ms') or {}).get('resume'))}\n"
        f"- most bytes that reached the far end while a pause was in force: "
        f"{count(pfc.get('max_let_by_bytes'))} (up to two frames: one on its way, one the change lets by)\n"
        f"- the pause daemon ran with {pfc.get('scheduling') or 'unknown'} scheduling; reaction "
        "is in this machine's time."
    )
    plot = (results.get("files") or {}).get("pauses")
    if plot:
        parts.append(f"![pauses]({plot})")
    return "\n\n".join(parts)


def section_fabric(results: dict) -> str:
    fabric = results.get("fabric") or {}
    if not fabric:
        return "No fabric description."
    rows = [[key, count(fabric.get(key))] for key in ("kind", "datapath", "hosts", "switches", "links")]
    text = md_table(["fabric", "value"], rows)
    picture = (results.get("files") or {}).get("fabric")
    if picture:
        text += (
            f"\n\n![the fabric]({picture})\n\n_Failed links are red with a cross; a link's width "
            "is what its switch ports sent over the run, and the busiest carry their share of "
            "the most any link carried._"
        )
    return text
