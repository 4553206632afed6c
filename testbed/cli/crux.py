"""`hpnlab crux plan` (no root, nothing runs): Crux's intensities, paths,
priorities and compressed classes for a scenario's jobs, computed by the
same pure code the controller schedules with (testbed/schedule)."""

import json

from testbed.drill.announce import announcement
from testbed.fabric.paths import compute_routes
from testbed.fabric.problems import ConfigError
from testbed.fabric.queues import MAX_CLASSES
from testbed.fabric.scenario import load_scenario
from testbed.plan.crux import render_crux_plan
from testbed.schedule.placement import crux_plan

from .common import INVALID, OK, add_topology_dir_option, err, print_problems


def add_crux(sub):
    p = sub.add_parser("crux", help="Crux's schedule for a scenario's jobs (no root needed)")
    cmds = p.add_subparsers(dest="crux_command", metavar="COMMAND", required=True)
    plan = cmds.add_parser(
        "plan", help="intensities, paths, priorities and compressed classes, without running anything"
    )
    plan.add_argument("scenario", metavar="SCENARIO.yaml")
    plan.add_argument(
        "--levels",
        type=int,
        default=None,
        metavar="K",
        help="priority levels to compress into (default: the scenario's queue "
        f"classes, or {MAX_CLASSES} without queues)",
    )
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    add_topology_dir_option(plan)
    plan.set_defaults(run=run_crux_plan)


def run_crux_plan(args):
    try:
        sc = load_scenario(args.scenario, args.topology_dir)
    except ConfigError as e:
        return print_problems(e)
    if not sc.jobs:
        return err(f"{args.scenario}: jobs: expected at least one training job to plan, got none", INVALID)
    if args.levels is not None and args.levels < 1:
        return err(f"--levels: expected a whole number >= 1, got {args.levels}", INVALID)
    if args.levels is not None:
        levels, source = args.levels, "--levels"
    elif sc.fabric.queues is not None:
        levels, source = len(sc.fabric.queues.classes), "the scenario's queue classes"
    else:
        levels, source = MAX_CLASSES, "no queues in the scenario: the switch maximum"
    try:
        plan = crux_plan(sc.fabric, compute_routes(sc.fabric), announcement(sc.fabric, sc.jobs), levels)
    except ValueError as e:
        return err(f"{args.scenario}: crux: {e}", INVALID)
    if args.json:
        print(json.dumps(plan, indent=1, sort_keys=True))
    else:
        print(render_crux_plan(sc.name, plan, source), end="")
    return OK


COMMANDS = (add_crux,)
