"""`hpnlab crux plan` (no root, nothing runs): Crux's intensities, paths,
priorities and compressed classes for a scenario's jobs, computed by the
same pure code the controller schedules with (testbed/schedule); given a
finished run's folder instead, what Crux measured and decided as it ran."""

import json
import os

from testbed.drill.announce import announcement
from testbed.fabric.paths import compute_routes
from testbed.fabric.problems import ConfigError, printable
from testbed.fabric.queues import MAX_CLASSES
from testbed.fabric.scenario import load_scenario
from testbed.plan.crux import render_crux_plan
from testbed.results.markdown_jobs import section_crux
from testbed.results.store import load_results
from testbed.results.text import terminal_text
from testbed.schedule.placement import crux_plan

from .common import INVALID, OK, add_topology_dir_option, err, print_problems


def add_crux(sub):
    p = sub.add_parser("crux", help="Crux's schedule for a scenario's jobs (no root needed)")
    cmds = p.add_subparsers(dest="crux_command", metavar="COMMAND", required=True)
    plan = cmds.add_parser(
        "plan", help="intensities, paths, priorities and compressed classes, without running anything"
    )
    plan.add_argument(
        "scenario",
        metavar="SCENARIO.yaml|RUN_DIR",
        help="a scenario to plan, or a finished run's folder (its results.json) to show what Crux did",
    )
    plan.add_argument(
        "--levels",
        type=int,
        default=None,
        metavar="K",
        help="priority levels to compress into (default: the scenario's queue "
        f"classes, or {MAX_CLASSES} without queues)",
    )
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    plan.add_argument(
        "--markdown", action="store_true", help="the plan as Markdown (tables to paste), not aligned text"
    )
    add_topology_dir_option(plan)
    plan.set_defaults(run=run_crux_plan)


def run_crux_plan(args):
    if os.path.isdir(args.scenario):
        return _show_run(args.scenario, args.json, args.markdown)
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
        text = render_crux_plan(sc.name, plan, source)
        print(text if args.markdown else terminal_text(text), end="")
    return OK


def _show_run(run_dir, as_json, markdown=False):
    """What Crux measured and decided during a finished run."""
    try:
        results = load_results(run_dir)
    except (OSError, ValueError) as e:
        return err(
            f"{run_dir}: expected a run folder holding results.json ({type(e).__name__}: {e})", INVALID
        )
    ran = (results.get("metrics") or {}).get("crux") if isinstance(results, dict) else None
    if not isinstance(ran, dict):
        return err(
            f"{run_dir}: this run did not schedule with Crux as it runs (its scenario has no crux: block)",
            INVALID,
        )
    if as_json:
        print(json.dumps(ran, indent=1, sort_keys=True))
    else:
        text = f"# Crux as it ran: {printable(str(results.get('scenario')))}\n\n{section_crux(ran)}"
        print(text if markdown else terminal_text(text))
    return OK


COMMANDS = (add_crux,)
