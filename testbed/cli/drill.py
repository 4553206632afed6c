"""Subcommands about drills: run (needs root) and compare (reads results)."""
import os

from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario
from testbed.results import store
from testbed.results.compare import render_side_by_side
from testbed.results.text import fmt
from testbed.results.trust import WARN, failed_checks, verdict

from .common import CANNOT_RUN_HERE, FAILED, OK, err, need_root, print_problems
from .machine import default_dir, sigterm_as_interrupt


# --- run / compare ----------------------------------------------------------

def add_run(sub):
    p = sub.add_parser("run", help="run a drill scenario and write its report")
    p.add_argument("scenario", metavar="SCENARIO.yaml")
    p.add_argument("--out", default=None, help="report folder (default: results/NAME-TIME)")
    p.set_defaults(run=run_run)


def run_run(args):
    try:
        sc = load_scenario(args.scenario)
    except ConfigError as e:
        return print_problems(e)
    if need_root("run"):
        return FAILED
    from testbed.drill.runner import ReachabilityError, run_scenario
    from testbed.emulation.realize import CapabilityError
    out = args.out or default_dir("results", sc.name)
    length = f"up to {sc.duration_s:g} s" if sc.jobs_only else f"{sc.duration_s:g} s"
    print(f"running {sc.name}: {length} of traffic, {len(sc.faults)} faults; report in {out}")
    sigterm_as_interrupt()
    try:
        results = run_scenario(sc, out)
    except KeyboardInterrupt:
        return err("interrupted; the fabric was torn down")
    except CapabilityError as e:
        err(str(e))
        return CANNOT_RUN_HERE
    except (ReachabilityError, RuntimeError, TimeoutError) as e:
        return err(str(e))
    for e in results["expectations"]:
        print(f"  {e['status'].upper():13} {e['name']}: expected {e['expected']}, "
              f"measured {fmt(e['measured'])}")
    for problem in results.get("problems") or []:
        print(f"  PROBLEM       {problem}")
    for check in failed_checks(results):
        word = "WARNING" if check["severity"] == WARN else "UNTRUSTED"
        print(f"  {word:13} {check['name']}: {check['reason']}")
    fid = results["metrics"]["fidelity"]["min"]
    print(f"fidelity {fmt(fid)}; {verdict(results)}; "
          f"report: {os.path.join(out, 'summary.md')}")
    return OK if results["passed"] else FAILED


def add_compare(sub):
    p = sub.add_parser("compare", help="print several drill results side by side")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.set_defaults(run=run_compare)


def run_compare(args):
    try:
        results = [store.load_results(d) for d in args.dirs]
    except (OSError, ValueError) as e:
        return err(f"cannot read results: {e}")
    print(render_side_by_side(results))
    return OK


COMMANDS = (add_run, add_compare)
