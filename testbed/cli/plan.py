"""`hpnlab plan` (no root): the packets per second a scenario asks of this
machine, against its measured capacity, and the time dilation that fits;
and the options every command that chooses a dilation shares."""

import argparse
import json
import os

from testbed.fabric.dilation import AUTO, parse_setting
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario
from testbed.plan import budget, calibration
from testbed.plan.processes import PROCESSES_ENV, process_count
from testbed.plan.report import render_plan

from .common import INVALID, OK, add_topology_dir_option, err, print_problems


def dilation_arg(text):
    """argparse type of --dilation: 'auto' or a number from 1 to 64."""
    try:
        return parse_setting(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def agent_processes_asked():
    """The environment's HPNLAB_AGENT_PROCESSES (None when unset), checked
    before anything is built: ValueError names it and what it expects."""
    asked = os.environ.get(PROCESSES_ENV)
    process_count(1, 1, asked)
    return asked


def add_calibration_option(parser):
    parser.add_argument(
        "--calibration",
        default=calibration.default_path(),
        metavar="FILE",
        help=f"this machine's stored capacity (default: {calibration.DEFAULT_PATH}, "
        f"or the file {calibration.PATH_ENV} names)",
    )


def add_plan(sub):
    p = sub.add_parser(
        "plan",
        help="the packets/s a scenario asks of this machine and the time dilation that fits (no root needed)",
    )
    p.add_argument("scenario", metavar="SCENARIO.yaml")
    p.add_argument(
        "--dilation", type=dilation_arg, default=None, metavar="N", help="also say how dilation N would fare"
    )
    add_calibration_option(p)
    add_topology_dir_option(p)
    p.add_argument("--json", action="store_true", help="the plan's numbers as JSON")
    p.set_defaults(run=run_plan)


def run_plan(args):
    try:
        sc = load_scenario(args.scenario, args.topology_dir)
        cal = calibration.load_or_defaults(args.calibration)
    except ConfigError as e:
        return print_problems(e)
    try:
        p = budget.plan(sc, cal, agent_processes_asked())
    except ValueError as e:  # HPNLAB_AGENT_PROCESSES that is not a count
        return err(str(e), INVALID)
    if args.json:
        print(json.dumps(p.to_dict(), indent=1))
        return OK
    asked = args.dilation if args.dilation not in (None, AUTO) else None
    if asked is None and sc.time_dilation not in (1, AUTO):
        asked = sc.time_dilation
    print(render_plan(p, asked))
    return OK


COMMANDS = (add_plan,)
