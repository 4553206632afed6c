"""Write a drill's results: results.json, summary.md, throughput.png and,
when the drill ran training jobs, iterations.png.

The runner assembles the results dict; this module only renders it. Every
renderer tolerates missing keys and None values, because a drill that broke
half-way still deserves a readable report of what it did measure.
"""
import dataclasses
import io
import json
import math
import os
import tempfile

from .expectations import FIDELITY_THRESHOLD
from .jobs import STALL_FACTOR
from .metrics import aggregate, as_faults, as_series, link_outages

RESULTS_JSON, SUMMARY_MD, PLOT_PNG = "results.json", "summary.md", "throughput.png"
ITERATIONS_PNG = "iterations.png"
FLOW_STYLES = ("-", "--", ":", "-.")


# ------------------------------------------------------------------ files

def _atomic_write(path, data):
    """Write `data` (str or bytes) so readers never see a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    if isinstance(data, str):
        data = data.encode("utf-8")
    # The temp file lives in the target directory: os.replace is only atomic
    # within one filesystem.
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)   # mkstemp's 0600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def jsonable(obj):
    """`obj` as plain JSON data: dataclasses and tuples unpacked, NaN and
    infinities turned into None (strict JSON has no spelling for them)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def write_results(out_dir, results):
    """Write results.json and summary.md into `out_dir`; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    data = jsonable(results)
    paths = {"results": os.path.join(out_dir, RESULTS_JSON),
             "summary": os.path.join(out_dir, SUMMARY_MD)}
    _atomic_write(paths["results"], json.dumps(data, indent=2, allow_nan=False) + "\n")
    _atomic_write(paths["summary"], render_summary(data))
    return paths


def load_results(path):
    """Read a results.json, given the file or the run directory holding it."""
    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_JSON)
    with open(path) as fh:
        return json.load(fh)


# --------------------------------------------------------------- numbers

def fmt(x, unit=""):
    """A number for humans: 3 significant digits, no exponent for big rates,
    '-' for no value."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if not math.isfinite(x):
        return "-"
    text = f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"
    return f"{text}{unit}"


def _cell(x):
    """Markdown table cell: no pipes or newlines may leak into the layout."""
    text = x if isinstance(x, str) else fmt(x)
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header, rows):
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _count(x):
    """Fabric sizes may come as counts or as lists of names."""
    if isinstance(x, (list, tuple, dict)):
        return len(x)
    return x


# --------------------------------------------------------------- summary

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
    or the training jobs' traffic generators could not keep up."""
    fid = fidelity_min(results)
    return (results.get("trustworthy") is False or (fid is not None and fid < FIDELITY_THRESHOLD)
            or bool(_generator_problems(results)))


def verdict(results):
    """PASSED / FAILED / UNTRUSTWORTHY (the latter never counts as a pass)."""
    if results.get("trustworthy") is False:
        return "UNTRUSTWORTHY"
    return "PASSED" if results.get("passed") else "FAILED"


def _headline(results):
    exps = results.get("expectations") or []
    ok = sum(1 for e in exps if e.get("passed"))
    word = verdict(results)
    if word == "UNTRUSTWORTHY":
        word = "FAILED (untrustworthy run)"
    return f"## Result: {word} - {ok}/{len(exps)} expectations met"


def _warning_block(results):
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
    return "\n".join([
        "> **WARNING: LOW EMULATION FIDELITY - THESE RESULTS ARE NOT TRUSTWORTHY**",
        ">",
        "> " + " ".join(causes) + " The host could not emulate this "
        "fabric faithfully, so no expectation is allowed to pass. Use a smaller "
        "fabric, a larger rate scale-down, or a less loaded machine, and re-run.",
    ])


def _scope(e):
    """What an expectation measured: a host, a job, a job relative to another."""
    if e.get("job"):
        text = f"job {e['job']}"
        return text + (f" / job {e['relative_to']}" if e.get("relative_to") else "")
    return e.get("host") or "(all)"


def _section_expectations(results):
    exps = results.get("expectations") or []
    if not exps:
        return "No expectations were declared."
    rows = [[e.get("name") or "-", e.get("metric") or "-", _scope(e),
             e.get("expected") or "-", e.get("measured"), (e.get("status") or "-").upper(),
             e.get("reason") or ""] for e in exps]
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
        rows.append([f.get("action") or "-", _link_text(f.get("link")), at, applied, lag,
                     None if conv is None else conv * 1000])
    text = md_table(["action", "link", "scheduled (s)", "applied (s)", "lag (ms)",
                     "routes converged (ms)"], rows)
    text += ("\n\n*routes converged*: time from the fault until the controller's recomputed "
             "routes were acknowledged by every switch and installed in the hosts that needed them.")
    outages = (results.get("metrics") or {}).get("outages") or []
    if outages:
        text += "\n\nOutage windows: " + "; ".join(
            f"{_link_text(w.get('link'))} {fmt(w.get('start'))}-{fmt(w.get('end'))} s"
            + ("" if w.get("restored", True) else " (never restored)") for w in outages)
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
        return [label, nflows] + [m.get(k) for k in ("mean_mbit", "before_mbit", "during_mbit",
                                                      "after_mbit", "fault_throughput_ratio",
                                                      "max_silence_s", "recovery_s")]

    rows = [row(h, len(m.get("flows") or []), m) for h, m in hosts.items()]
    overall = metrics.get("overall") or {}
    if overall:
        rows.append(row("(all)", len(metrics.get("flows") or {}), overall))
    return md_table(["source host", "flows", "mean Mbit/s", "before Mbit/s", "during Mbit/s",
                     "after Mbit/s", "during/before", "max silence (s)", "recovery (s)"], rows)


def _section_flows(metrics):
    if _no_iperf_flows(metrics):
        return NO_FLOWS
    flows = metrics.get("flows") or {}
    if not flows:
        return "No flows."
    rows = [[fid, m.get("src") or "-", m.get("dst") or "-", m.get("mean_mbit"),
             m.get("max_silence_s")] for fid, m in flows.items()]
    return md_table(["flow", "src", "dst", "mean Mbit/s", "max silence (s)"], rows)


def _section_fidelity(results):
    fid = (results.get("metrics") or {}).get("fidelity") or {}
    links = fid.get("links") or {}
    parts = []
    if low_fidelity(results):
        parts.append(_warning_block(results))
    parts.append(f"Minimum fidelity over loaded links: **{fmt(fid.get('min'))}** "
                 f"(trustworthy at >= {fmt(FIDELITY_THRESHOLD)}).")
    if links:
        rows = [[name, v.get("configured_mbit"), v.get("achieved_mbit"), v.get("fidelity")]
                for name, v in links.items()]
        parts.append(md_table(["link", "configured Mbit/s", "achieved Mbit/s", "fidelity"], rows))
    else:
        parts.append("No link was loaded enough to measure fidelity.")
    metrics = results.get("metrics") or {}
    gen = metrics.get("generators")
    if gen:
        missing = gen.get("missing_results") or []
        parts.append(
            f"Traffic generators: {fmt(gen.get('packets_sent'))} packets sent, "
            f"{fmt(gen.get('late_packets'))} late, max lag {fmt(gen.get('max_lag_s'), ' s')}, "
            f"{fmt(gen.get('lost_s'), ' s')} lost behind the pacing, on time "
            f"**{fmt(gen.get('on_time'))}** of the time"
            + (f"; no results from {', '.join(map(str, missing))}" if missing else "") + ".")
    drops = metrics.get("queue_drops")
    if drops:
        parts.append("Packets dropped by modeled queues: " + ", ".join(
            f"{name} {n}" for name, n in sorted(drops.items())) + ".")
    lost = fid.get("unexplained_loss")
    if lost:
        parts.append("**Loss outside the modeled network:** " + lost["note"] + " ("
                     + ", ".join(f"{job}: {n} gaps" for job, n in sorted(lost["gaps_seen"].items()))
                     + ").")
    cpu = metrics.get("host_cpu")
    if cpu:
        parts.append(f"Host CPU: {_pct(cpu.get('mean_busy'))} busy on average, every core "
                     f"saturated in {_pct(cpu.get('saturated_share'))} of the samples.")
    return "\n\n".join(parts)


def _pct(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def _duration_text(results):
    ran, planned = results.get("duration_s"), results.get("duration_planned_s")
    if ran is None or planned is None or ran >= planned:
        return fmt(ran)
    return f"{fmt(ran)} (of {fmt(planned)} planned: every job had finished)"


def _section_jobs(results):
    """Training jobs: one row per job, the fault phases, the aggregates."""
    metrics = results.get("metrics") or {}
    jobs = metrics.get("jobs") or {}
    rows = []
    for name, j in jobs.items():
        rows.append([name, j.get("collective") or "-", j.get("ranks"),
                     f"{fmt(j.get('iterations_completed'))}/{fmt(j.get('iterations_planned'))}",
                     j.get("iteration_time_s"), j.get("iteration_time_p50_s"),
                     j.get("iteration_time_p99_s"), j.get("analytical_iteration_s"),
                     j.get("iteration_time_vs_analytical"), j.get("job_completion_s"),
                     j.get("bytes_per_rank_expected"), j.get("bytes_per_rank_ratio"),
                     j.get("retransmissions"), j.get("timeouts"),
                     _pct(j.get("gpu_utilization")), j.get("stalled_iterations")])
    parts = [md_table(["job", "collective", "ranks", "iterations", "mean iter (s)",
                       "p50 (s)", "p99 (s)", "analytical (s)", "measured/analytical",
                       "completion (s)", "bytes/rank/iter expected", "bytes ratio (worst)",
                       "retransmissions", "timeouts", "GPU util", "stalled"], rows)]
    parts.append("*iter*: job-level iteration time (an iteration ends when its last rank "
                 "ends it); mean, p50 and p99 skip the first iteration (start-up skew). "
                 "*bytes ratio*: the received bytes of the rank-iteration furthest from the "
                 "expected volume, over that volume. *GPU util*: compute time over iteration "
                 f"time (a proxy). *stalled*: iterations longer than {fmt(STALL_FACTOR)}x the "
                 "median.")
    for name, j in jobs.items():
        events = j.get("gap_events") or []
        if events:
            lines = [f"- {fmt(e['t'], ' s')}: {e['from']} -> {e['to']}, iteration {e['iter']}, "
                     f"expected PSN {e['expected_psn']}, got {e['got_psn']}" for e in events[:5]]
            parts.append(f"Packet gaps seen by the receivers of {name} "
                         f"({fmt(j.get('gaps_seen'))} in all; first {len(lines)}):\n\n"
                         + "\n".join(lines))
    phased = {name: j for name, j in jobs.items()
              if any(f"iteration_{k}_s" in j for k in ("before", "during", "after"))}
    if phased:
        rows = []
        for name, j in phased.items():
            before, during = j.get("iteration_before_s"), j.get("iteration_during_s")
            slowdown = j.get("fault_iteration_slowdown")
            if slowdown is None and before and during is not None:
                slowdown = during / before
            rows.append([name, before, during, j.get("iteration_after_s"), slowdown])
        parts.append("Iteration time around the faults (mean of the iterations that ended "
                     "before the first outage, overlapped one, or started after the last):\n\n"
                     + md_table(["job", "before (s)", "during (s)", "after (s)",
                                 "during/before"], rows))
    if any(j.get("dci_bytes") or j.get("crossing_bytes_per_iteration") for j in jobs.values()):
        rows = [[name, j.get("dci_bytes"), j.get("crossing_bytes_per_iteration")]
                for name, j in jobs.items()]
        parts.append(md_table(["job", "DCI bytes while it ran", "schedule's crossing bytes "
                               "per iteration"], rows))
    lines = [f"GPU utilization over all jobs (weighted by GPUs): "
             f"**{_pct(metrics.get('gpu_utilization'))}**."]
    if metrics.get("dci_bytes") is not None:
        lines.append(f"Bytes over the DC interconnect: {fmt(metrics['dci_bytes'])}.")
    parts.append(" ".join(lines))
    plot = (results.get("files") or {}).get("iterations")
    if plot:
        parts.append(f"![iterations]({os.path.basename(plot)})")
    return "\n\n".join(parts)


def _section_fabric(results):
    fabric = results.get("fabric") or {}
    if not fabric:
        return "No fabric description."
    rows = [[key, _count(fabric.get(key))]
            for key in ("kind", "datapath", "hosts", "switches", "links")]
    return md_table(["fabric", "value"], rows)


def render_summary(results):
    """summary.md as a string."""
    metrics = results.get("metrics") or {}
    parts = [f"# Drill: {results.get('scenario') or '(unnamed)'}"]
    if results.get("description"):
        parts.append(str(results["description"]).strip())
    parts.append(_headline(results))
    if results.get("problems"):
        parts.append("> **Problems during the run (the run cannot pass):**\n"
                     + "\n".join(f"> - {p}" for p in results["problems"]))
    if low_fidelity(results):
        parts.append(_warning_block(results))
    parts.append(md_table(["run", ""], [
        ["scenario file", results.get("scenario_file") or "-"],
        ["started", results.get("started") or "-"],
        ["traffic duration (s)", _duration_text(results)]]))
    plot = (results.get("files") or {}).get("plot")
    if plot:
        parts.append(f"![throughput]({os.path.basename(plot)})")
    sections = [("Expectations", _section_expectations(results)),
                ("Fault timeline", _section_faults(results))]
    if metrics.get("jobs"):
        sections.append(("Training jobs", _section_jobs(results)))
    sections += [("Per-host throughput", _section_hosts(metrics)),
                 ("Per-flow", _section_flows(metrics)),
                 ("Fidelity", _section_fidelity(results)),
                 ("Fabric", _section_fabric(results))]
    for title, body in sections:
        parts.append(f"## {title}\n\n{body}")
    notes = metrics.get("settings")
    if notes:
        parts.append(
            f"_Before/during/after skip the first {fmt(notes.get('warmup_s'))} s of traffic "
            f"(TCP slow start) and {fmt(notes.get('settle_s'))} s after every fault edge; "
            f"recovery is the time until the aggregate is back to "
            f"{fmt(100 * (notes.get('recovered_fraction') or 0))}% of before._")
    return "\n\n".join(parts) + "\n"


# ------------------------------------------------------------------ plot

def _host_of(flow_id, flow_info):
    """Source host of a flow; falls back to the 'src->dst#n' id convention."""
    info = flow_info.get(flow_id) or {}
    return info.get("src") or flow_id.split("->")[0]


def _nan(values):
    # matplotlib draws NaN as a gap, which is exactly what "no sample" means.
    return [float("nan") if v is None else v for v in values]


def _draw_flows(ax, series, flow_info):
    """Thin per-flow lines and a thick aggregate per source host."""
    by_host = {}
    for fid in series.flows:
        by_host.setdefault(_host_of(fid, flow_info), []).append(fid)
    colors = [f"C{i % 10}" for i in range(len(by_host))]
    label_flows = len(series.flows) <= 8   # beyond that the legend drowns the plot
    for color, (host, ids) in zip(colors, sorted(by_host.items())):
        total = aggregate([series.values(f) for f in ids], len(series.t))
        ax.plot(series.t, _nan(total), color=color, linewidth=2.6, alpha=0.6, zorder=2,
                label=f"{host} total")
        # Flows of one host share its colour; line styles tell them apart,
        # and they sit above the thick total so they stay visible.
        for k, fid in enumerate(ids):
            ax.plot(series.t, _nan(series.values(fid)), color=color, linewidth=1.0,
                    linestyle=FLOW_STYLES[k % len(FLOW_STYLES)], zorder=3,
                    label=fid if label_flows else None)


def _draw_faults(ax, faults, duration):
    """Shade outage windows; mark every fault edge with a labelled line."""
    for i, w in enumerate(link_outages(faults, duration)):
        ax.axvspan(w["start"], w["end"], color="red", alpha=0.10,
                   label="link down" if i == 0 else None)
    for f in as_faults(faults):
        down = f.action == "link-down"
        ax.axvline(f.time, color="red" if down else "green", linestyle="--", linewidth=1.1)
        ax.text(f.time, 0.98, f" {'down' if down else 'up'} {'-'.join(map(str, f.link))}",
                transform=ax.get_xaxis_transform(), rotation=90, va="top", ha="right",
                fontsize=7, color="red" if down else "green")


def _new_axes():
    """A figure on the Agg canvas and its single axes.

    matplotlib's object API with the Agg canvas never needs a display and
    never touches pyplot's global state. Imported here: writing JSON and
    markdown should not pay matplotlib's import time, nor fail on a machine
    that only reads results.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _finish_plot(fig, ax, out_dir, filename, title, xlabel, ylabel, duration):
    """Title, labels, limits and legend; write the PNG and return its path."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlim(0, max(duration, 1e-3))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()

    png = io.BytesIO()
    fig.canvas.print_png(png)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, filename)
    _atomic_write(path, png.getvalue())
    return path


def plot_throughput(out_dir, series, faults, title, flow_info=None):
    """Write throughput.png into `out_dir` and return its path.

    `series` is the results' series dict ({interval_s, t, flows, flow_info})
    or a metrics.Series.
    """
    if flow_info is None:
        flow_info = series.get("flow_info", {}) if isinstance(series, dict) else {}
    series = as_series(series)
    duration = series.t[-1] if series.t else 0.0

    fig, ax = _new_axes()
    _draw_flows(ax, series, flow_info)
    _draw_faults(ax, faults, duration)
    return _finish_plot(fig, ax, out_dir, PLOT_PNG, title, "time since traffic start (s)",
                        "throughput (Mbit/s)", duration)


def plot_iterations(out_dir, results):
    """Write iterations.png into `out_dir`: every job's iteration times at
    the moments the iterations ended, its analytical iteration time as a
    dashed line of the same colour, and the faults. Returns its path, or
    None when the drill ran no training job."""
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    if not jobs:
        return None
    faults = results.get("faults") or []
    ends = [e for j in jobs.values() for e in j.get("iteration_ends_s") or [] if e is not None]
    duration = results.get("duration_s") or max(ends, default=0.0)

    fig, ax = _new_axes()
    for i, (name, j) in enumerate(sorted(jobs.items())):
        color = f"C{i % 10}"
        x = j.get("iteration_ends_s") or []
        y = _nan((j.get("iteration_times_s") or [])[:len(x)])
        ax.plot(x[:len(y)], y, color=color, marker="o", markersize=4, linewidth=1.4,
                zorder=3, label=f"{name} ({j.get('collective') or '?'}, "
                                f"{fmt(j.get('ranks'))} ranks)")
        analytical = j.get("analytical_iteration_s")
        if analytical is not None:
            ax.axhline(analytical, color=color, linestyle="--", linewidth=1.0, zorder=2,
                       label=f"{name} analytical {fmt(analytical, ' s')}")
    _draw_faults(ax, faults, duration)
    tops = [t for j in jobs.values() for t in (j.get("iteration_times_s") or []) + [
        j.get("analytical_iteration_s")] if t is not None]
    if tops:
        ax.set_ylim(0, 1.15 * max(tops) or 1.0)   # room above the first, slowest iteration
    title = f"{results.get('scenario') or '(unnamed)'}: iteration time per job"
    return _finish_plot(fig, ax, out_dir, ITERATIONS_PNG, title,
                        "iteration end, time since traffic start (s)", "iteration time (s)",
                        duration)


# ------------------------------------------------------ side by side

def _comparison_rows(results):
    """Table rows of one run: one per source host, then the overall line."""
    metrics = results.get("metrics") or {}
    name, word, fid = results.get("scenario") or "-", verdict(results), fidelity_min(results)
    scopes = list((metrics.get("hosts") or {}).items())
    scopes.append(("(all)", metrics.get("overall") or {}))
    rows = []
    for i, (host, m) in enumerate(scopes):
        first = i == 0
        rows.append([name if first else "", word if first else "", host,
                     fmt(m.get("before_mbit")), fmt(m.get("during_mbit")),
                     fmt(m.get("after_mbit")), fmt(m.get("max_silence_s")),
                     fmt(m.get("fault_throughput_ratio")), fmt(fid) if first else ""])
    return rows


def _text_table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(row):
        return "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _job_comparison_rows(results):
    """Table rows of one run's training jobs, one per job."""
    jobs = (results.get("metrics") or {}).get("jobs") or {}
    name = results.get("scenario") or "-"
    return [[name if i == 0 else "", job, fmt(j.get("iteration_time_s")),
             fmt(j.get("iteration_time_p99_s")), _pct(j.get("gpu_utilization")),
             fmt(j.get("retransmissions")), fmt(j.get("stalled_iterations"))]
            for i, (job, j) in enumerate(jobs.items())]


def render_side_by_side(results_list):
    """A compact terminal table comparing several runs (e.g. dual vs single ToR),
    and a second one for their training jobs when any ran some."""
    header = ["scenario", "result", "host", "before", "during", "after",
              "silence_s", "ratio", "fidelity"]
    rows = []
    for results in results_list:
        rows += _comparison_rows(results)
    text = _text_table(header, rows) + "\n(throughput in Mbit/s; ratio = during/before)"
    job_rows = [row for results in results_list for row in _job_comparison_rows(results)]
    if job_rows:
        text += "\n\n" + _text_table(["scenario", "job", "iter_s", "p99_s", "gpu_util",
                                       "retx", "stalled"], job_rows)
        text += "\n(iter_s: mean iteration time after the first; retx: retransmissions)"
    return text
