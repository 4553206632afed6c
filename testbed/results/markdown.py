"""summary.md: a drill's results as a Markdown report a person reads first.

Renders the results dict the runner assembled; every section tolerates
missing keys and None values, because a drill that broke half-way still
deserves a readable report of what it did measure.
"""

import os

from .dilation import note
from .findings import findings
from .markdown_fabric import (
    section_controller,
    section_fabric,
    section_pauses,
    section_probes,
    section_queues,
)
from .markdown_jobs import section_crux, section_jobs, section_paths
from .text import fmt, md_table, md_text, pct
from .trust import FIDELITY_THRESHOLD
from .verdicts import low_fidelity, reasons, verdict


def _headline(results):
    exps = results.get("expectations") or []
    ok = sum(1 for e in exps if e.get("passed"))
    word = verdict(results)
    if word == "UNTRUSTWORTHY":
        # the same word as the terminal's verdict and exit status 4: the
        # machine fell short, which says nothing about the network
        return (
            f"## Result: UNTRUSTWORTHY - none of the {len(exps)} expectations judged (the machine fell short)"
        )
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


def section_expectations(results: dict) -> str:
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


def section_faults(results: dict) -> str:
    faults = results.get("faults") or []
    if not faults:
        return "No faults were injected."
    rows = []
    for f in faults:
        at, applied = f.get("at"), f.get("applied_at")
        lag = None if at is None or applied is None else (applied - at) * 1000
        conv = f.get("converged_s")
        link = _link_text(f.get("link")) + (f" ({f['name']})" if f.get("name") else "")
        if f.get("by_hand"):  # `hpnlab link` or `switch` while the traffic ran: nothing was scheduled
            at, lag, link = None, None, link + " (by hand)"
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


def section_hosts(metrics: dict) -> str:
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


def section_flows(metrics: dict) -> str:
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
    """The checks that judged this run; those with nothing to judge here
    (no lossless class, no fault, ...) on one line under the table."""
    checks = trust.get("checks") or []
    judged = [c for c in checks if c.get("ok") is not None]
    rows = [
        [
            c.get("name"),
            c.get("measures"),
            c.get("value"),
            c.get("expected") or "-",
            _check_status(c),
            c.get("reason") or c.get("note") or "",
        ]
        for c in judged
    ]
    text = md_table(["check", "measures", "measured", "expected", "status", "why"], rows) if rows else ""
    idle = [c for c in checks if c.get("ok") is None]
    if idle:
        names = "; ".join(
            f"{c.get('name')} ({c.get('note') or c.get('reason') or 'nothing to judge'})" for c in idle
        )
        text += ("\n\n" if text else "") + f"Not judged in this run: {names}."
    return text


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


def _played_by(gen):
    """' (8 hosts in 2 processes)' when the agents said how they ran."""
    n, hosts = gen.get("agent_processes"), len(gen.get("ports") or {})
    if not n or not hosts:
        return ""
    return f" ({hosts} host{'s' if hosts > 1 else ''} in {n} process{'es' if n > 1 else ''})"


def _generators_text(gen):
    missing = gen.get("missing_results") or []
    worst = gen.get("worst")
    text = (
        f"Traffic generators{_played_by(gen)}: {fmt(gen.get('packets_sent'))} packets sent, "
        f"{fmt(gen.get('late_packets'))} late, max lag {fmt(gen.get('max_lag_s'), ' s')}, "
        f"{fmt(gen.get('lost_s'), ' s')} lost behind the pacing; the worst port was on time "
        f"**{fmt(gen.get('on_time'))}** of the time it had packets ready"
    )
    if worst:
        text += f" ({worst.get('host')} {worst.get('port')})"
    if gen.get("mean_on_time") is not None:
        text += f", all ports together {fmt(gen['mean_on_time'])}"
    reading = gen.get("reading_worst")
    if reading:
        text += (
            f"; the latest reader read its frames in time {fmt(reading.get('on_time'))} of its "
            f"receiving ({reading.get('host')}, longest wait {fmt(reading.get('max_wait_s'), ' s')})"
        )
        if gen.get("reading_median") is not None:
            text += f", the median agent {fmt(gen['reading_median'])}"
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


def section_trust(results: dict) -> str:
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


_CHOSEN_BY = {
    "scenario": "set in the scenario",
    "command line": "set by --dilation",
    "running fabric": "the running fabric's (hpnlab traffic start)",
}


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
    found = findings(results)
    if found:
        parts.append("\n".join(f"- {md_text(line)}" for line in found))
    if results.get("problems"):
        parts.append(
            "> **Problems during the run (the run cannot pass):**\n"
            + "\n".join(f"> - {md_text(p)}" for p in results["problems"])
        )
    if low_fidelity(results):
        parts.append(_warning_block(results))
    parts.append(_run_table(results))
    plot = (results.get("files") or {}).get("plot")
    if plot and not _no_iperf_flows(metrics):  # a jobs-only drill's would be empty
        parts.append(f"![throughput]({os.path.basename(plot)})")
    for key, alt in (("ports", "what each NIC port sent"), ("links", "link utilization over time")):
        picture = (results.get("files") or {}).get(key)
        if picture:
            parts.append(f"![{alt}]({os.path.basename(picture)})")
    for title, body in _sections(results, metrics):
        parts.append(f"## {title}\n\n{body}")
    notes = metrics.get("settings")
    if notes:
        parts.append(_settings_note(notes))
    return "\n\n".join(parts) + "\n"


def _run_table(results):
    rows = [
        ["scenario file", md_text(results.get("scenario_file") or "-")],
        ["started", results.get("started") or "-"],
        ["traffic duration (s)", _duration_text(results)],
    ]
    if results.get("time_dilation") is not None:
        rows.append(["time dilation", _dilation_text(results)])
    return md_table(["run", ""], rows)


def _sections(results, metrics):
    """(title, body) of every section the results have something for, in order."""
    sections = [
        ("Expectations", section_expectations(results)),
        ("Fault timeline", section_faults(results)),
    ]
    if metrics.get("jobs"):
        sections.append(("Training jobs", section_jobs(results)))
    if results.get("placement"):
        sections.append(("Paths", section_paths(results)))
    if metrics.get("crux"):
        sections.append(("Crux as it ran", section_crux(metrics["crux"])))
    if metrics.get("classes") is not None:
        sections.append(("Queues", section_queues(results)))
    if metrics.get("pfc"):
        sections.append(("Pauses (lossless classes)", section_pauses(results)))
    if metrics.get("probe"):
        picture = (results.get("files") or {}).get("probes")
        body = section_probes(metrics["probe"]) + (f"\n\n![probe gaps]({picture})" if picture else "")
        sections.append(("Probes: delivery gaps", body))
    ctl = metrics.get("controller") or {}
    if ctl.get("exits") or ctl.get("restarts"):
        sections.append(("Controller", section_controller(ctl)))
    return sections + [
        ("Per-host throughput", section_hosts(metrics)),
        ("Per-flow", section_flows(metrics)),
        ("Trust", section_trust(results)),
        ("Fabric", section_fabric(results)),
    ]


def _settings_note(notes):
    """How the before/during/after aggregates and recovery were taken."""
    return (
        f"_Before/during/after skip the first {fmt(notes.get('warmup_s'))} s of traffic "
        f"(TCP slow start) and {fmt(notes.get('settle_s'))} s after every fault edge; "
        f"recovery is the time until the aggregate is back to "
        f"{fmt(100 * (notes.get('recovered_fraction') or 0))}% of before; end/before is "
        f"the throughput over the run's last {fmt(notes.get('recovery_window_s'))} s over "
        f"before, once every failed link is back._"
    )
