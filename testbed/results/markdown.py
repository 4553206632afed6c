"""summary.md: a drill's results as a Markdown report a person reads first.

Renders the results dict the runner assembled; every section tolerates
missing keys and None values, because a drill that broke half-way still
deserves a readable report of what it did measure.
"""

import os

from .dilation import note
from .jobs import STALL_FACTOR
from .text import fmt, md_table, md_text, pct
from .trust import FIDELITY_THRESHOLD, low_fidelity, reasons, verdict


def _count(x):
    """Fabric sizes may come as counts or as lists of names."""
    if isinstance(x, (list, tuple, dict)):
        return len(x)
    return x


def _headline(results):
    exps = results.get("expectations") or []
    ok = sum(1 for e in exps if e.get("passed"))
    word = verdict(results)
    if word == "UNTRUSTWORTHY":
        word = "FAILED (untrustworthy run)"
    return f"## Result: {word} - {ok}/{len(exps)} expectations met"


def _warning_block(results):
    return "\n".join(
        ["> **WARNING: THE EMULATION DID NOT HOLD - THESE RESULTS ARE NOT TRUSTWORTHY**", ">"]
        + [f"> - {r}" for r in reasons(results)]
        + [
            ">",
            "> The machine could not emulate this fabric faithfully, so no expectation is "
            "allowed to pass. Use a smaller fabric, a larger rate scale-down, a time dilation "
            "(`hpnlab plan` suggests one) or a less loaded machine, and re-run.",
        ]
    )


def _scope(e):
    """What an expectation measured: a host, a job, a job relative to another."""
    if e.get("class"):
        return f"class {e['class']}"
    if e.get("fault"):
        return f"fault {e['fault']}"
    if e.get("job"):
        text = f"job {e['job']}"
        return text + (f" / job {e['relative_to']}" if e.get("relative_to") else "")
    return e.get("host") or "(all)"


def _section_expectations(results):
    exps = results.get("expectations") or []
    if not exps:
        return "No expectations were declared."
    rows = [
        [
            md_text(e.get("name") or "-"),
            e.get("metric") or "-",
            _scope(e),
            e.get("expected") or "-",
            e.get("measured"),
            (e.get("status") or "-").upper(),
            e.get("reason") or "",
        ]
        for e in exps
    ]
    header = ["expectation", "metric", "of", "expected", "measured", "status", "note"]
    return md_table(header, rows)


def _link_text(link):
    return " - ".join(str(n) for n in link) if link else "-"


def _section_faults(results):
    faults = results.get("faults") or []
    if not faults:
        return "No faults were injected."
    rows = []
    for f in faults:
        at, applied = f.get("at"), f.get("applied_at")
        lag = None if at is None or applied is None else (applied - at) * 1000
        conv = f.get("converged_s")
        link = _link_text(f.get("link")) + (f" ({f['name']})" if f.get("name") else "")
        rows.append([f.get("action") or "-", link, at, applied, lag, None if conv is None else conv * 1000])
    text = md_table(
        ["action", "link", "scheduled (s)", "applied (s)", "lag (ms)", "routes converged (ms)"], rows
    )
    text += (
        "\n\n*routes converged*: time from the fault until the first routes version that "
        "includes it was acknowledged by every switch and installed in the hosts that "
        "needed it. The switches repair some faults on their own before that (fast-failover "
        "groups); probes show what traffic saw."
    )
    outages = (results.get("metrics") or {}).get("outages") or []
    if outages:
        text += "\n\nOutage windows: " + "; ".join(
            f"{_link_text(w.get('link'))} {fmt(w.get('start'))}-{fmt(w.get('end'))} s"
            + ("" if w.get("restored", True) else " (never restored)")
            for w in outages
        )
    return text


NO_FLOWS = "No iperf3 flows in this drill."


def _no_iperf_flows(metrics):
    """A drill that only ran training jobs: its flow tables would be empty."""
    return bool(metrics.get("jobs")) and not metrics.get("flows")


def _section_hosts(metrics):
    if _no_iperf_flows(metrics):
        return NO_FLOWS
    hosts = metrics.get("hosts") or {}
    if not hosts:
        return "No per-host metrics."

    def row(label, nflows, m):
        return [label, nflows] + [
            m.get(k)
            for k in (
                "mean_mbit",
                "before_mbit",
                "during_mbit",
                "after_mbit",
                "fault_throughput_ratio",
                "max_silence_s",
                "recovery_s",
                "recovered_throughput_ratio",
            )
        ]

    rows = [row(h, len(m.get("flows") or []), m) for h, m in hosts.items()]
    overall = metrics.get("overall") or {}
    if overall:
        rows.append(row("(all)", len(metrics.get("flows") or {}), overall))
    return md_table(
        [
            "source host",
            "flows",
            "mean Mbit/s",
            "before Mbit/s",
            "during Mbit/s",
            "after Mbit/s",
            "during/before",
            "max silence (s)",
            "recovery (s)",
            "end/before",
        ],
        rows,
    )


def _section_flows(metrics):
    if _no_iperf_flows(metrics):
        return NO_FLOWS
    flows = metrics.get("flows") or {}
    if not flows:
        return "No flows."
    rows = [
        [fid, m.get("src") or "-", m.get("dst") or "-", m.get("mean_mbit"), m.get("max_silence_s")]
        for fid, m in flows.items()
    ]
    return md_table(["flow", "src", "dst", "mean Mbit/s", "max silence (s)"], rows)


_STATUS = {True: "ok", False: "FAILED", None: "not judged"}


def _check_status(check):
    if check.get("ok") is False and check.get("severity") == "warn":
        return "WARNING"
    return _STATUS[check.get("ok")]


def _trust_table(trust):
    rows = [
        [
            c.get("name"),
            c.get("measures"),
            c.get("value"),
            c.get("expected") or "-",
            _check_status(c),
            c.get("reason") or c.get("note") or "",
        ]
        for c in trust.get("checks") or []
    ]
    return md_table(["check", "measures", "measured", "expected", "status", "why"], rows)


def _links_table(links):
    rows = [
        [
            name,
            v.get("node") or "-",
            v.get("configured_mbit"),
            v.get("achieved_mbit"),
            v.get("busy_s"),
            v.get("fidelity"),
        ]
        for name, v in links.items()
    ]
    return md_table(
        ["egress", "of", "configured Mbit/s", "sent while busy Mbit/s", "busy (s)", "fidelity"], rows
    )


def _generators_text(gen):
    missing = gen.get("missing_results") or []
    worst = gen.get("worst")
    text = (
        f"Traffic generators: {fmt(gen.get('packets_sent'))} packets sent, "
        f"{fmt(gen.get('late_packets'))} late, max lag {fmt(gen.get('max_lag_s'), ' s')}, "
        f"{fmt(gen.get('lost_s'), ' s')} lost behind the pacing; the worst port was on time "
        f"**{fmt(gen.get('on_time'))}** of the time it had packets ready"
    )
    if worst:
        text += f" ({worst.get('host')} {worst.get('port')})"
    if gen.get("mean_on_time") is not None:
        text += f", all ports together {fmt(gen['mean_on_time'])}"
    if missing:
        text += f"; no results from {', '.join(map(str, missing))}"
    return text + "."


def _ports_table(ports):
    rows = [
        [
            host,
            name,
            p.get("tx_s"),
            p.get("lost_s"),
            p.get("on_time"),
            "yes" if p.get("judged") else "too little",
        ]
        for host, per_port in ports.items()
        for name, p in per_port.items()
    ]
    return md_table(
        ["agent", "port", "sent at line rate (s)", "idle while ready (s)", "on time", "judged"], rows
    )


def _section_trust(results):
    """The checks that decide trust, then the measurements behind them."""
    metrics = results.get("metrics") or {}
    fid = metrics.get("fidelity") or {}
    links = fid.get("links") or {}
    parts = []
    if low_fidelity(results):
        parts.append(_warning_block(results))
    if results.get("trust"):
        parts.append(_trust_table(results["trust"]))
    parts.append(
        f"Minimum fidelity over busy egresses and agent ports: **{fmt(fid.get('min'))}** "
        f"(trustworthy at >= {fmt(FIDELITY_THRESHOLD)})."
    )
    if links:
        parts.append(_links_table(links))
        parts.append(
            "*fidelity*: bytes an egress delivered over the bytes it owed in the 0.1 s "
            "intervals that began with packets waiting (what waited, up to what its rate "
            "allows)."
        )
    else:
        parts.append("No egress was busy long enough to measure its fidelity.")
    gen = metrics.get("generators")
    if gen:
        parts.append(_generators_text(gen))
        if gen.get("ports"):
            parts.append(_ports_table(gen["ports"]))
    drops = metrics.get("queue_drops")
    if drops:
        parts.append(
            "Packets dropped by modeled queues: "
            + ", ".join(f"{name} {n}" for name, n in sorted(drops.items()))
            + "."
        )
    lost = fid.get("unexplained_loss")
    if lost:
        gaps = ", ".join(f"{job}: {n} gaps" for job, n in sorted(lost["gaps_seen"].items()))
        parts.append(
            "**Loss outside the modeled network:** "
            + lost["note"]
            + (f" ({gaps})." if gaps else ".")
            + _emulator_drops_text(lost)
        )
    cpu = metrics.get("host_cpu")
    if cpu:
        parts.append(
            f"Host CPU: {pct(cpu.get('mean_busy'))} busy on average, every core "
            f"saturated in {pct(cpu.get('saturated_share'))} of the samples."
        )
    return "\n\n".join(parts)


def _duration_text(results):
    ran, planned = results.get("duration_s"), results.get("duration_planned_s")
    if ran is None or planned is None or ran >= planned:
        return fmt(ran)
    return f"{fmt(ran)} (of {fmt(planned)} planned: every job had finished)"


def _dilation_text(results):
    """The time dilation, what it means and how it was chosen."""
    n = results.get("time_dilation")
    choice = results.get("time_dilation_choice") or {}
    text = f"{fmt(n)}: {note(n)}" if note(n) else "1 (none: this machine ran at emulated speed)"
    how = choice.get("from")
    plan = choice.get("plan") or {}
    if how == "auto" and plan:
        text += (
            f"; chosen by the capacity plan: {fmt(plan.get('cores_asked'))} cores asked at "
            f"dilation 1, budget {fmt(plan.get('budget_cores'))} cores "
            f"(capacity: {plan.get('capacity') or '-'})"
        )
        if plan.get("fits") is False:
            text += "; the scenario does not fit even at this dilation"
    elif how in _CHOSEN_BY:
        text += f"; {_CHOSEN_BY[how]}"
    return text


_CHOSEN_BY = {"scenario": "set in the scenario", "command line": "set by --dilation"}


def _section_jobs(results):
    """Training jobs: one row per job, the fault phases, the aggregates."""
    metrics = results.get("metrics") or {}
    jobs = metrics.get("jobs") or {}
    rows = []
    for name, j in jobs.items():
        rows.append(
            [
                name,
                j.get("collective") or "-",
                j.get("ranks"),
                f"{fmt(j.get('iterations_completed'))}/{fmt(j.get('iterations_planned'))}",
                j.get("iteration_time_s"),
                j.get("iteration_time_p50_s"),
                j.get("iteration_time_p99_s"),
                j.get("analytical_iteration_s"),
                j.get("iteration_time_vs_analytical"),
                j.get("job_completion_s"),
                j.get("bytes_per_rank_expected"),
                j.get("bytes_per_rank_ratio"),
                j.get("retransmissions"),
                j.get("timeouts"),
                pct(j.get("gpu_utilization")),
                j.get("stalled_iterations"),
            ]
        )
    parts = [
        md_table(
            [
                "job",
                "collective",
                "ranks",
                "iterations",
                "mean iter (s)",
                "p50 (s)",
                "p99 (s)",
                "analytical (s)",
                "measured/analytical",
                "completion (s)",
                "bytes/rank/iter expected",
                "bytes ratio (worst)",
                "retransmissions",
                "timeouts",
                "GPU util",
                "stalled",
            ],
            rows,
        )
    ]
    parts.append(
        "*iter*: job-level iteration time (an iteration ends when its last rank "
        "ends it); mean, p50 and p99 skip the first iteration (start-up skew). "
        "*bytes ratio*: the payload bytes receivers counted in the rank-iteration "
        "furthest from the algorithm's formula, over the formula (no formula, no "
        "ratio). *GPU util*: compute time over iteration "
        f"time (a proxy). *stalled*: iterations longer than {fmt(STALL_FACTOR)}x the "
        "median."
    )
    for name, j in jobs.items():
        events = j.get("gap_events") or []
        if events:
            lines = [
                f"- {fmt(e['t'], ' s')}: {e['from']} -> {e['to']}, iteration {e['iter']}, "
                f"expected PSN {e['expected_psn']}, got {e['got_psn']}"
                for e in events[:5]
            ]
            parts.append(
                f"Packet gaps seen by the receivers of {name} "
                f"({fmt(j.get('gaps_seen'))} in all; first {len(lines)}):\n\n" + "\n".join(lines)
            )
    phased = {
        name: j
        for name, j in jobs.items()
        if any(f"iteration_{k}_s" in j for k in ("before", "during", "after"))
    }
    if phased:
        rows = []
        for name, j in phased.items():
            before, during = j.get("iteration_before_s"), j.get("iteration_during_s")
            slowdown = j.get("fault_iteration_slowdown")
            if slowdown is None and before and during is not None:
                slowdown = during / before
            rows.append([name, before, during, j.get("iteration_after_s"), slowdown])
        parts.append(
            "Iteration time around the faults (mean of the iterations that ended "
            "before the first outage, overlapped one, or started after the last):\n\n"
            + md_table(["job", "before (s)", "during (s)", "after (s)", "during/before"], rows)
        )
    if any(j.get("dci_bytes") or j.get("crossing_bytes_per_iteration") for j in jobs.values()):
        rows = [[name, j.get("dci_bytes"), j.get("crossing_bytes_per_iteration")] for name, j in jobs.items()]
        parts.append(
            md_table(["job", "DCI bytes while it ran", "schedule's crossing bytes per iteration"], rows)
        )
    lines = [f"GPU utilization over all jobs (weighted by GPUs): **{pct(metrics.get('gpu_utilization'))}**."]
    if metrics.get("dci_bytes") is not None:
        lines.append(f"Bytes over the DC interconnect: {fmt(metrics['dci_bytes'])}.")
    parts.append(" ".join(lines))
    plot = (results.get("files") or {}).get("iterations")
    if plot:
        parts.append(f"![iterations]({os.path.basename(plot)})")
    return "\n\n".join(parts)


def _section_paths(results):
    """Where the controller put each job's connections (its answer on the
    job channel) and the bytes each link the jobs could use carried."""
    placement = results.get("placement") or {}
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    parts = []
    rows = []
    for job in placement.get("jobs", []):
        flows = job.get("flows", [])
        pinned = [f for f in flows if f.get("port")]
        unreachable = sum(1 for f in flows if f.get("unreachable"))
        rows.append(
            [
                job["name"],
                job.get("paths"),
                len(flows),
                len(pinned),
                unreachable,
                jobs.get(job["name"], {}).get("link_load_max_mean"),
            ]
        )
    parts.append(
        "What the controller chose (ecmp: the host and every switch hash each "
        "connection; precise: each connection pinned, NIC port included), and how "
        "evenly each job's bytes spread over the switch-to-switch links it could "
        "use (max/mean of their egress byte counters while it ran; 1 = even):\n\n"
        + md_table(["job", "paths", "connections", "pinned", "unreachable", "link load max/mean"], rows)
    )
    pinned = [
        [job["name"], f["name"], " > ".join(f["path"])]
        for job in placement.get("jobs", [])
        for f in job.get("flows", [])
        if f.get("path")
    ]
    if pinned:
        parts.append(
            "Pinned connections (the egress interfaces of each path):\n\n"
            + md_table(["job", "connection", "path"], pinned)
        )
    loaded = [name for name, j in jobs.items() if j.get("link_load")]
    if loaded:
        links = sorted({link for name in loaded for link in jobs[name]["link_load"]})
        rows = [[link] + [_mb(jobs[name]["link_load"].get(link)) for name in loaded] for link in links]
        parts.append(
            "Bytes per link while each job ran (MB, egress counters):\n\n"
            + md_table(["link (egress)"] + loaded, rows)
        )
    return "\n\n".join(parts)


def _mb(nbytes):
    return None if nbytes is None else round(nbytes / 1e6, 2)


def _section_queues(results):
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
        f"over {_count(stats['n'])}"
    )


def _section_controller(ctl):
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


def _section_probes(probe):
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
        table + f"\n\n_{_count(probe.get('flows'))} probe flows sent "
        f"{probe.get('sent')} packets and {probe.get('received')} arrived. The gap is the longest "
        f"time any flow went without a delivery between the fault and the next one; before the "
        f"first fault it was at most {fmt(probe.get('base_gap_ms'))} ms (the sending interval "
        f"and this machine's jitter). A fault whose links carried no probe before it gets no "
        f"gap: its links were not on the probes' paths._"
    )


def _section_pauses(results):
    """How often and how long each link was paused, and how fast pauses
    took hold and let go (testbed/results/pauses.py)."""
    pfc = (results.get("metrics") or {}).get("pfc") or {}
    rows = [
        [link, e["pauses"], e["paused_s"]]
        for link, e in sorted((pfc.get("links") or {}).items(), key=lambda kv: -kv[1]["paused_s"])
    ]
    parts = [
        f"{_count(pfc.get('pauses'))} pauses, {fmt(pfc.get('paused_s'))} link-seconds paused "
        "in all." + (f" Pause daemon errors: {'; '.join(pfc['errors'])}." if pfc.get("errors") else "")
    ]
    if rows:
        parts.append(md_table(["paused upstream port / class", "pauses", "paused (s)"], rows[:12]))
    parts.append(
        f"- in force (XOFF crossing to the upstream's change acknowledged): {_ms(pfc.get('in_force_ms'))}\n"
        f"- resume (XON crossing to the first frame from the upstream, on the wire): "
        f"{_ms(pfc.get('resume_ms'))}\n"
        f"- most bytes that reached the far end while a pause was in force: "
        f"{_count(pfc.get('max_let_by_bytes'))} (up to two frames: one on its way, one the change lets by)\n"
        f"- the pause daemon ran with {pfc.get('scheduling') or 'unknown'} scheduling; reaction "
        "is in this machine's time."
    )
    plot = (results.get("files") or {}).get("pauses")
    if plot:
        parts.append(f"![pauses]({plot})")
    return "\n\n".join(parts)


def _section_fabric(results):
    fabric = results.get("fabric") or {}
    if not fabric:
        return "No fabric description."
    rows = [[key, _count(fabric.get(key))] for key in ("kind", "datapath", "hosts", "switches", "links")]
    return md_table(["fabric", "value"], rows)


def _emulator_drops_text(lost):
    """Where the kernel counted frames the machine dropped during the traffic."""
    drops = lost.get("emulator_drops") or {}
    said = [
        f"{what} {drops[key]}"
        for key, what in (
            ("ovs_socket_drops", "Open vSwitch's packet sockets dropped"),
            ("backlog_drops", "the CPUs' input backlogs dropped"),
        )
        if drops.get(key) is not None
    ]
    return (" Counted by the kernel meanwhile: " + "; ".join(said) + ".") if said else ""


def render_summary(results: dict) -> str:
    """summary.md as a string."""
    metrics = results.get("metrics") or {}
    # What came from the scenario file is escaped: a description or a name
    # shows as written and cannot add markup (a bold PASSED, a link, HTML).
    parts = [f"# Drill: {md_text(results.get('scenario') or '(unnamed)')}"]
    if results.get("description"):
        parts.append(md_text(results["description"]))
    parts.append(_headline(results))
    if results.get("problems"):
        parts.append(
            "> **Problems during the run (the run cannot pass):**\n"
            + "\n".join(f"> - {md_text(p)}" for p in results["problems"])
        )
    if low_fidelity(results):
        parts.append(_warning_block(results))
    run_rows = [
        ["scenario file", md_text(results.get("scenario_file") or "-")],
        ["started", results.get("started") or "-"],
        ["traffic duration (s)", _duration_text(results)],
    ]
    if results.get("time_dilation") is not None:
        run_rows.append(["time dilation", _dilation_text(results)])
    parts.append(md_table(["run", ""], run_rows))
    plot = (results.get("files") or {}).get("plot")
    if plot:
        parts.append(f"![throughput]({os.path.basename(plot)})")
    sections = [
        ("Expectations", _section_expectations(results)),
        ("Fault timeline", _section_faults(results)),
    ]
    if metrics.get("jobs"):
        sections.append(("Training jobs", _section_jobs(results)))
    if results.get("placement"):
        sections.append(("Paths", _section_paths(results)))
    if metrics.get("classes") is not None:
        sections.append(("Queues", _section_queues(results)))
    if metrics.get("pfc"):
        sections.append(("Pauses (lossless classes)", _section_pauses(results)))
    if metrics.get("probe"):
        sections.append(("Probes: delivery gaps", _section_probes(metrics["probe"])))
    ctl = metrics.get("controller") or {}
    if ctl.get("exits") or ctl.get("restarts"):
        sections.append(("Controller", _section_controller(ctl)))
    sections += [
        ("Per-host throughput", _section_hosts(metrics)),
        ("Per-flow", _section_flows(metrics)),
        ("Trust", _section_trust(results)),
        ("Fabric", _section_fabric(results)),
    ]
    for title, body in sections:
        parts.append(f"## {title}\n\n{body}")
    notes = metrics.get("settings")
    if notes:
        parts.append(
            f"_Before/during/after skip the first {fmt(notes.get('warmup_s'))} s of traffic "
            f"(TCP slow start) and {fmt(notes.get('settle_s'))} s after every fault edge; "
            f"recovery is the time until the aggregate is back to "
            f"{fmt(100 * (notes.get('recovered_fraction') or 0))}% of before; end/before is "
            f"the throughput over the run's last {fmt(notes.get('recovery_window_s'))} s over "
            f"before, once every failed link is back._"
        )
    return "\n\n".join(parts) + "\n"
