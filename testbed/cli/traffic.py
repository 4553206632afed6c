"""`hpnlab traffic start`: a scenario's traffic on the fabric a running
`hpnlab up` owns (testbed/drill/live_traffic.py), with its report as
`hpnlab run` writes it."""

import argparse
import contextlib
import os

from testbed.fabric.problems import ConfigError, printable
from testbed.fabric.scenario import load_scenario
from testbed.results import store

from .common import (
    EXIT_STATUSES,
    INVALID,
    NOT_RUN,
    add_topology_dir_option,
    err,
    interrupted_status,
    print_problems,
)
from .drill import outcome_text, run_status
from .live import running_or_status
from .machine import default_dir


def add_traffic(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "traffic",
        help="play a scenario's traffic on the running fabric (pull cables meanwhile with 'hpnlab link')",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    start = verbs.add_parser(
        "start",
        help="run SCENARIO's jobs, flows, probes and faults on the running fabric; wait; write the report",
        description="Play SCENARIO's traffic (jobs, iperf flows, probes, its fault timeline) on the fabric "
        "a running 'hpnlab up' owns, printing progress, then write its report as 'hpnlab run' does. The "
        "scenario's fabric must be the one running: start it with 'hpnlab up SCENARIO'. Cables pulled "
        "meanwhile with 'hpnlab link' show in the throughput and the controller's events, not in the "
        "report's fault list. Ctrl-C here leaves the traffic to finish; its report still lands in --out. "
        "Example: hpnlab up scenarios/crux-classes.yaml --detach; "
        "hpnlab traffic start scenarios/crux-classes.yaml --out /tmp/live-crux",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    start.add_argument("scenario", metavar="SCENARIO.yaml")
    start.add_argument("--out", default=None, help="report folder, new or empty (default: results/NAME-TIME)")
    start.add_argument("--force", action="store_true", help="replace an earlier report in --out")
    add_topology_dir_option(start)
    start.set_defaults(run=run_traffic_start)


def run_traffic_start(args: argparse.Namespace) -> int:
    from testbed.drill.live_traffic import request
    from testbed.emulation.rundir import FolderError, prepare_report_dir

    try:
        sc = load_scenario(args.scenario, args.topology_dir)
    except ConfigError as e:
        return print_problems(e)
    live, status = running_or_status("traffic start")
    if live is None:
        return status
    out = args.out or default_dir("results", sc.name)
    try:
        out = prepare_report_dir(out, args.force)
    except FolderError as e:
        return err(f"--out: {e}", INVALID)
    except OSError as e:
        return err(f"--out: cannot use {out}: {e.strerror or e}", INVALID)
    ended: dict = {}

    def on_line(msg: dict) -> None:
        if "log" in msg:
            print(printable(msg["log"]), flush=True)
        else:
            ended.update(msg)

    dirs = [os.path.abspath(d) for d in args.topology_dir or ()]
    try:
        request(live.run_dir, os.path.abspath(args.scenario), out, dirs, on_line)
    except KeyboardInterrupt as e:
        err(f"no longer watching; the traffic goes on, and its report will be in {out}")
        return interrupted_status(e)
    except (OSError, ValueError) as e:
        return err(f"cannot reach the fabric's owner (pid {live.record.get('owner')}) in {live.run_dir}: {e}")
    if "error" in ended:
        with contextlib.suppress(OSError):  # a refused run leaves no folder behind
            os.rmdir(out)
        for line in str(ended["error"]).splitlines():
            err(line)
        return INVALID if ended.get("invalid") else NOT_RUN
    if not ended.get("done"):
        return err("the fabric's owner ended the connection before the traffic did (was it taken down?)")
    results = store.load_results(out)
    print(outcome_text(results, os.path.join(out, "summary.md")))
    return run_status(results)


COMMANDS = (add_traffic,)
