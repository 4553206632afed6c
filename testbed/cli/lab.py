"""`hpnlab lab`: the course labs (list, start, check, grade, reset)."""

import argparse
import os
import shutil

from testbed.fabric.problems import ConfigError, printable

from .common import (
    FAILED,
    INVALID,
    NOT_RUN,
    OK,
    UNTRUSTWORTHY,
    err,
    link_refused,
    need_root,
    print_problems,
    write_output_file,
)


def add_lab(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="course labs: list, start, check, grade, reset")
    lab = p.add_subparsers(dest="lab_command", metavar="SUBCOMMAND", required=True)
    ls = lab.add_parser("list", help="the labs, with their time on a 2-core laptop")
    ls.set_defaults(run=run_list)
    start = lab.add_parser("start", help="copy a lab's starter files into a work folder")
    start.add_argument("lab", metavar="N")
    start.add_argument("dir", nargs="?", metavar="DIR", help="default: ./lab-N-topic")
    start.set_defaults(run=run_start)
    reset = lab.add_parser(
        "reset", help="put a lab's starter files back in a work folder (yours are replaced)"
    )
    reset.add_argument("lab", metavar="N")
    reset.add_argument("dir", nargs="?", metavar="DIR", help="default: ./lab-N-topic")
    reset.set_defaults(run=run_reset)
    check = lab.add_parser(
        "check",
        help="run your files and judge the lab's checks on what they measured (root)",
        description="Run every scenario the lab's checks name from DIR (each with 'hpnlab run', its "
        "report in DIR/results/NAME), judge each check on the measured results, and print a line per "
        "check with a hint for each that failed. Exit status 0: all passed; 1: a check failed; 4: a "
        "run was untrustworthy (run it again on a quieter machine).",
    )
    check.add_argument("lab", metavar="N")
    check.add_argument("dir", nargs="?", metavar="DIR", help="default: ./lab-N-topic")
    check.add_argument("--junit", metavar="FILE", help="also write the report as JUnit XML")
    check.add_argument("--failed-only", action="store_true", help="list only the checks that did not pass")
    _add_checks_option(check)
    check.set_defaults(run=run_check_lab)
    grade = lab.add_parser(
        "grade",
        help="check every student's folder and write the grader's summary (root)",
        description="Run 'lab check' on each DIR (one per student), one after the other, then print a "
        "line per student (score, status, the checks not passed) and, with --csv, every check of every "
        "student as CSV. Exit status 0 once every folder was judged, passed or not; 4 when a run of one "
        "was untrustworthy (grade that folder again on a quieter machine).",
    )
    grade.add_argument("lab", metavar="N")
    grade.add_argument("dirs", nargs="+", metavar="DIR")
    grade.add_argument("--csv", metavar="FILE", help="write every check of every student as CSV")
    grade.add_argument("--failed-only", action="store_true", help="list only the students who did not pass")
    _add_checks_option(grade)
    grade.set_defaults(run=run_grade)


def _add_checks_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checks",
        metavar="FILE",
        help="judge with these checks instead of the lab's (an instructor's copy students never see; "
        "the checks.yaml format, title and minutes optional)",
    )


def _lab(which, checks_file=None):
    """(the lab, None) or (None, exit status) once said why not."""
    from testbed.lab.catalog import find_lab

    try:
        return find_lab(which, checks_file=checks_file), None
    except LookupError as e:
        return None, err(str(e), INVALID)
    except ConfigError as e:
        return None, print_problems(e)


def _work_dir(lab, given):
    return given or f"lab-{lab.slug}"


def run_list(args: argparse.Namespace) -> int:
    from testbed.lab.catalog import all_labs

    try:
        labs = all_labs()
    except ConfigError as e:
        return print_problems(e)
    for lab in labs:
        print(
            printable(f"{lab.number:02d}  {lab.title}  (about {lab.minutes} min, {len(lab.checks)} checks)")
        )
    return OK


def _copy_starter(lab, folder, replace):
    os.makedirs(folder, exist_ok=True)
    copied = []
    for entry in sorted(lab.starter.iterdir()):
        target = os.path.join(folder, entry.name)
        if os.path.lexists(target) and not replace:
            continue
        if os.path.islink(target):
            os.unlink(target)  # never write through a link
        shutil.copyfile(entry, target)
        copied.append(entry.name)
    return copied


def run_start(args: argparse.Namespace) -> int:
    lab, status = _lab(args.lab)
    if lab is None:
        return status
    folder = _work_dir(lab, args.dir)
    if os.path.isdir(folder) and os.listdir(folder):
        return err(
            f"{folder} is not empty: choose a new folder, or 'hpnlab lab reset {args.lab}' to start over",
            INVALID,
        )
    _copy_starter(lab, folder, replace=False)
    handout = lab.path / "README.md"
    print(
        printable(
            f"lab {lab.slug} in {folder}: read {handout}, then 'sudo hpnlab lab check {args.lab} {folder}'"
        )
    )
    return OK


def run_reset(args: argparse.Namespace) -> int:
    lab, status = _lab(args.lab)
    if lab is None:
        return status
    folder = _work_dir(lab, args.dir)
    copied = _copy_starter(lab, folder, replace=True)
    print(printable(f"put back in {folder}: {', '.join(copied)}"))
    return OK


def _judged(lab, folder):
    """Run the student's scenarios in `folder` and judge the lab's checks."""
    from testbed.lab.checker import judge, run_all

    outcomes = run_all(
        lab, folder, os.path.join(folder, "results"), _run_drill, log=lambda m: print(printable(m))
    )
    return judge(lab, folder, outcomes)


def run_check_lab(args: argparse.Namespace) -> int:
    from testbed.lab.checker import PASSED, junit, render
    from testbed.lab.checker import UNTRUSTWORTHY as LAB_UNTRUSTED

    lab, status = _lab(args.lab, args.checks)
    if lab is None:
        return status
    folder = _work_dir(lab, args.dir)
    if not os.path.isdir(folder):
        return err(f"{folder}: no such folder (start the lab with 'hpnlab lab start {args.lab}')", INVALID)
    refused = link_refused(args.junit, "--junit")
    if refused is not None:
        return refused
    if need_root("lab check"):
        return NOT_RUN
    report = _judged(lab, folder)
    print("\n".join(printable(line) for line in render(report, args.failed_only).split("\n")))
    if args.junit:
        refused = write_output_file(args.junit, junit(report), "--junit")
        if refused is not None:
            return refused
    if report.status == PASSED:
        return OK
    return UNTRUSTWORTHY if report.status == LAB_UNTRUSTED else FAILED


def run_grade(args: argparse.Namespace) -> int:
    from testbed.lab.checker import UNTRUSTWORTHY as LAB_UNTRUSTED
    from testbed.lab.checker import grade_csv, grade_summary

    lab, status = _lab(args.lab, args.checks)
    if lab is None:
        return status
    missing = [d for d in args.dirs if not os.path.isdir(d)]
    if missing:
        return err(f"{missing[0]}: no such folder", INVALID)
    refused = link_refused(args.csv, "--csv")
    if refused is not None:
        return refused
    if need_root("lab grade"):
        return NOT_RUN
    reports = []
    for i, folder in enumerate(args.dirs, 1):
        print(printable(f"[{i}/{len(args.dirs)}] {folder}"))
        reports.append(_judged(lab, folder))
    print("\n".join(printable(line) for line in grade_summary(reports, args.failed_only).split("\n")))
    if args.csv:
        refused = write_output_file(args.csv, grade_csv(reports), "--csv")
        if refused is not None:
            return refused
    return UNTRUSTWORTHY if any(r.status == LAB_UNTRUSTED for r in reports) else OK


def _run_drill(path, out):
    """One of the student's scenarios through `hpnlab run`, in a child
    process that imports hpnlab's own code only."""
    import subprocess

    from testbed.emulation.procs import own_module
    from testbed.lab.checker import RunOutcome, read_results

    argv = own_module("testbed.cli", "run", os.path.abspath(path), "--out", os.path.abspath(out), "--force")
    r = subprocess.run(argv, capture_output=True, text=True, cwd="/")
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    said = lines[-1].strip() if lines else f"exit status {r.returncode}"
    return RunOutcome(r.returncode, read_results(out), said)


COMMANDS = (add_lab,)
