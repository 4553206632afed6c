"""Subcommands about drills: run (needs root) and compare (reads results)."""

import argparse
import json
import os
import sys

from testbed.fabric.dilation import dilate
from testbed.fabric.problems import ConfigError, printable
from testbed.fabric.scenario import load_scenario
from testbed.plan import budget, calibration
from testbed.results import store
from testbed.results.compare import render_side_by_side, side_by_side_data
from testbed.results.findings import findings
from testbed.results.junit import drill_cases, suite
from testbed.results.text import fmt
from testbed.results.trust import WARN
from testbed.results.verdicts import failed_checks, verdict

from .common import (
    CANNOT_RUN_HERE,
    EXIT_STATUSES,
    FAILED,
    INVALID,
    NOT_RUN,
    OK,
    UNTRUSTWORTHY,
    add_topology_dir_option,
    err,
    interrupted_status,
    link_refused,
    need_root,
    print_problems,
    write_output_file,
)
from .machine import default_dir, prepare_report, sigterm_as_interrupt
from .plan import add_calibration_option, agent_processes_asked, dilation_arg
from .progress import Progress

# --- run / compare ----------------------------------------------------------


def add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a drill scenario and write its report",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO.yaml")
    p.add_argument("--out", default=None, help="report folder, new or empty (default: results/NAME-TIME)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier report in --out (only a folder holding nothing but hpnlab's report files)",
    )
    add_topology_dir_option(p)
    p.add_argument(
        "--dilation",
        type=dilation_arg,
        default=None,
        metavar="N|auto",
        help="time dilation: rates /N and times xN on this machine, reported in "
        "emulated time; auto: the capacity plan's choice (overrides the "
        "scenario's time_dilation)",
    )
    add_calibration_option(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="progress on stderr; on stdout, one JSON object: verdict, findings, expectations, report folder",
    )
    p.add_argument(
        "--junit",
        metavar="FILE",
        help="also write the outcome as JUnit XML: each expectation, problem and trust check a test case",
    )
    p.set_defaults(run=run_run)


def run_run(args: argparse.Namespace) -> int:
    try:
        emulated = load_scenario(args.scenario, args.topology_dir)
        n, choice = budget.resolve(
            emulated,
            args.dilation,
            lambda: calibration.load_or_defaults(args.calibration),
            agent_processes_asked(),
        )
    except ConfigError as e:
        return print_problems(e)
    except ValueError as e:  # HPNLAB_AGENT_PROCESSES that is not a count
        return err(str(e), INVALID)
    refused = link_refused(args.junit, "--junit")
    if refused is not None:
        return refused
    if need_root("run"):
        return NOT_RUN
    from testbed.drill.runner import ReachabilityError, run_scenario
    from testbed.emulation.realize import CapabilityError

    sc = dilate(emulated, n)
    out, status = prepare_report(args.out or default_dir("results", sc.name), args.force)
    if out is None:
        return status
    say = Progress(sys.stderr if args.json else sys.stdout)
    if choice["from"] == "auto":
        plan = choice["plan"]
        say(
            f"time dilation auto: {n:g} ({fmt(plan['cores_asked'])} cores asked at dilation 1, "
            f"budget {fmt(plan['budget_cores'])}; capacity: {plan['capacity']})"
        )
    say(f"running {sc.name}: {_length(emulated, sc)}, {len(sc.faults)} faults; report in {out}")
    sigterm_as_interrupt()
    try:
        results = run_scenario(sc, out, log=say, dilation_choice=choice)
    except KeyboardInterrupt as e:
        err("interrupted; the fabric was torn down")
        return interrupted_status(e)
    except CapabilityError as e:
        return err(str(e), CANNOT_RUN_HERE)
    except (ReachabilityError, RuntimeError, TimeoutError) as e:
        return err(str(e))
    except OSError as e:  # a full disk, a folder gone: one line, not a traceback
        return err(f"{e.filename or out}: {e.strerror or e}")
    if args.json:
        print(json.dumps(outcome_data(results, out), indent=1))
    else:
        print(outcome_text(results, os.path.join(out, "summary.md")))
    _calibrate_from_first_run(results, args.calibration, out, say)
    if args.junit:
        refused = write_output_file(
            args.junit, suite(f"hpnlab run {sc.name}", drill_cases(results)), "--junit"
        )
        if refused is not None:
            return refused
    return run_status(results)


def outcome_data(results: dict, out: str) -> dict:
    """What `run --json` prints: the verdict and what the drill found, for scripts."""
    return {
        "scenario": results.get("scenario"),
        "verdict": verdict(results),
        "passed": results.get("passed"),
        "trustworthy": results.get("trustworthy"),
        "fidelity": results["metrics"]["fidelity"]["min"],
        "findings": findings(results),
        "expectations": [
            {k: e.get(k) for k in ("name", "status", "expected", "measured")} for e in results["expectations"]
        ],
        "problems": results.get("problems") or [],
        "untrusted": [c["name"] for c in failed_checks(results) if c["severity"] != WARN],
        "report": out,
    }


def outcome_text(results: dict, summary_path: str) -> str:
    """What a drill found, for the terminal: each expectation, problem and
    failed trust check, then the verdict. Names and messages come from the
    scenario file: shown, never obeyed (no control characters pass)."""
    lines = [f"  {line}" for line in findings(results)]
    lines += [
        f"  {e['status'].upper():13} {e['name']}: expected {e['expected']}, measured {fmt(e['measured'])}"
        for e in results["expectations"]
    ]
    lines += [f"  PROBLEM       {problem}" for problem in results.get("problems") or []]
    for check in failed_checks(results):
        word = "WARNING" if check["severity"] == WARN else "UNTRUSTED"
        lines.append(f"  {word:13} {check['name']}: {check['reason']}")
    fid = results["metrics"]["fidelity"]["min"]
    lines.append(f"fidelity {fmt(fid)}; {verdict(results)}; report: {summary_path}")
    return "\n".join(printable(line) for line in lines)


def run_status(results: dict) -> int:
    """The exit status a drill's results call for (see common.py)."""
    if results["passed"]:
        return OK
    if results.get("problems"):
        return NOT_RUN  # it did not do what the scenario asked
    if not results.get("trustworthy", True):
        return UNTRUSTWORTHY  # the machine could not judge
    return FAILED


def _length(emulated, sc):
    """How long the traffic runs, in emulated time and, when dilated, here."""
    text = f"{'up to ' if sc.jobs_only else ''}{emulated.duration_s:g} s of traffic"
    n = sc.fabric.time_dilation
    if n == 1:
        return text
    return f"{text} (emulated), {sc.duration_s:g} s on this machine at time dilation {n:g}"


def _calibrate_from_first_run(results, path, out, say=print):
    """A machine without a calibration takes it from its first undilated run
    like the calibration ring (calibration.unlike_the_ring) that measured
    enough packets (`doctor --calibrate` measures it on purpose), and so
    does one whose calibration is stale (measured by other code or on
    another kernel: Calibration.stale)."""
    if results.get("time_dilation", 1) != 1:
        return
    old = None
    if os.path.lexists(path):
        old = _stale_calibration(path)
        if old is None:
            return  # current, or not a file this run may replace
    unlike = calibration.unlike_the_ring(results)
    if unlike is not None:
        if (results.get("metrics") or {}).get("cpu_per_packet"):  # a run with agents
            say(
                f"(no calibration taken from this run, which is unlike the ring a calibration measures: "
                f"{unlike}; 'sudo hpnlab doctor --calibrate' measures one)"
            )
        return
    try:
        cal = calibration.from_results(
            results, f"hpnlab run {results.get('scenario_file')}", os.path.join(out, store.RESULTS_JSON)
        )
        cal = calibration.save(cal, path)
    except ValueError:
        return  # this run measured too little to calibrate on
    except OSError as e:
        say(f"(could not store this machine's calibration in {path}: {e.strerror or e})")
        return
    replaced = f" (the one before was {old})" if old else ""
    say(f"stored this machine's calibration in {path}, from this run{replaced}: {cal.describe()}")


def _stale_calibration(path):
    """Why the calibration at `path` is stale, or None: current, or a file
    that is not a calibration this run may replace (left alone: a link, or
    a file that is not one)."""
    if os.path.islink(path):
        return None
    try:
        cal = calibration.load(path)
    except ConfigError:
        return None
    return cal.stale() if cal else None


def add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="print several drill results side by side")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.add_argument("--json", action="store_true", help="the same numbers as JSON, one object per run")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw the runs on one pair of axes: each sending host's throughput, or each job's "
        "iteration times when no run has iperf3 flows; each run in its colour, its outages shaded",
    )
    p.set_defaults(run=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    refused = link_refused(args.plot, "--plot")
    if refused is not None:
        return refused
    results = []
    for d in args.dirs:
        try:
            res = store.load_results(d)
        except (OSError, ValueError) as e:
            return err(f"{d}: cannot read results: {e}", INVALID)
        if not isinstance(res, dict):
            return err(f"{d}: not the results of an hpnlab drill (expected a JSON object)", INVALID)
        results.append(res)
    try:
        if args.json:
            data = side_by_side_data(results)
            for d, run in zip(args.dirs, data):
                run["dir"] = d
            print(json.dumps(data, indent=1))
        else:
            print(render_side_by_side(results))
        if args.plot:
            from testbed.results.overlay import overlay_png

            refused = write_output_file(args.plot, overlay_png(list(zip(args.dirs, results))), "--plot")
            if refused is not None:
                return refused
            print(f"plot: {args.plot}", file=sys.stderr if args.json else sys.stdout)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        return err(f"results not in hpnlab's shape ({type(e).__name__}: {e})", INVALID)
    return OK


COMMANDS = (add_run, add_compare)
