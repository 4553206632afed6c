"""`hpnlab lab`: the course labs (list, start, check, grade, reset)."""

import argparse
import os

from testbed.fabric.problems import ConfigError, printable
from testbed.lab import files as lab_files
from testbed.lab.params import describe

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
    _add_student_option(start)
    start.set_defaults(run=run_start)
    reset = lab.add_parser(
        "reset", help="put a lab's starter files back in a work folder (yours are replaced)"
    )
    reset.add_argument("lab", metavar="N")
    reset.add_argument("dir", nargs="?", metavar="DIR", help="default: ./lab-N-topic")
    _add_student_option(reset)
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
    _add_student_option(check)
    _add_checks_option(check)
    check.set_defaults(run=run_check_lab)
    grade = lab.add_parser(
        "grade",
        help="check every student's folder and write the grader's summary (root)",
        description="Run 'lab check' on each DIR (one per student), one after the other, then print a "
        "line per student (score, status, the checks not passed) and, with --csv, every check of every "
        "student as CSV. In a lab that gives each student their own numbers, a folder's name is its "
        "student's id (name the folders you collect after your students). Exit status 0 once every "
        "folder was judged, passed or not; 4 when a run of one was untrustworthy (grade that folder "
        "again on a quieter machine).",
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


def _add_student_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--student",
        metavar="ID",
        help="your id, as your instructor names you: in a lab with parameters it picks your own "
        "numbers (start writes it into the folder; check and reset read it from there)",
    )


STUDENT_FILE = ".hpnlab-student"


def _student(lab, folder, given):
    """(the student's id or None for a lab without parameters, None) or
    (None, exit status) once said why not."""
    from testbed.lab.params import STUDENT

    if not lab.parameters:
        return None, None
    student = given if given is not None else _read_student_file(folder)
    if student is None:
        return None, err(
            f"lab {lab.slug} gives each student their own numbers: add --student ID "
            "(the id your instructor knows you by)",
            INVALID,
        )
    if not STUDENT.match(student):
        return None, err(
            f"--student: expected letters, digits and . _ @ - (at most 64), got {student!r}", INVALID
        )
    return student, None


def _read_student_file(folder):
    """The id `lab start --student` wrote into `folder`, or None."""
    try:
        fd = os.open(os.path.join(folder, STUDENT_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(100).decode("utf-8", "replace").strip() or None


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


def _copy_starter(lab, folder, replace, student=None):
    """Copy the starter's files into `folder`, a student's numbers written
    in where they have {{placeholders}}; the names copied."""
    os.makedirs(folder, exist_ok=True)
    copied = lab_files.copy_filled(lab.starter, folder, lab.values(student) if student else {}, replace)
    if student is not None:
        lab_files.write_text(os.path.join(folder, STUDENT_FILE), student + "\n")
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
    student, status = _student(lab, folder, args.student)
    if status is not None:
        return status
    _copy_starter(lab, folder, replace=False, student=student)
    handout = lab.path / "README.md"
    print(
        printable(
            f"lab {lab.slug} in {folder}: read {handout}, then 'sudo hpnlab lab check {args.lab} {folder}'"
        )
    )
    if student is not None:
        print(printable(f"your numbers ({student}): {describe(lab.values(student))}"))
    return OK


def run_reset(args: argparse.Namespace) -> int:
    lab, status = _lab(args.lab)
    if lab is None:
        return status
    folder = _work_dir(lab, args.dir)
    student, status = _student(lab, folder, args.student)
    if status is not None:
        return status
    copied = _copy_starter(lab, folder, replace=True, student=student)
    print(printable(f"put back in {folder}: {', '.join(copied)}"))
    return OK


def _judged(lab, folder, student=None):
    """Run the student's scenarios in `folder` and judge the lab's checks,
    with the student's own numbers when the lab has parameters."""
    from testbed.lab.checker import judge, run_all

    if student is not None:
        lab = lab.for_student(student)
        print(printable(f"{student}'s numbers: {describe(lab.values(student))}"))
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
    student, status = _student(lab, folder, args.student)
    if status is not None:
        return status
    if need_root("lab check"):
        return NOT_RUN
    report = _judged(lab, folder, student)
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
    students = []
    for folder in args.dirs:  # the instructor names the folders: a student's own file is not asked
        student, status = _student(lab, folder, os.path.basename(os.path.normpath(folder)))
        if status is not None:
            return status
        students.append(student)
    if need_root("lab grade"):
        return NOT_RUN
    reports = []
    for i, (folder, student) in enumerate(zip(args.dirs, students), 1):
        print(printable(f"[{i}/{len(args.dirs)}] {folder}"))
        reports.append(_judged(lab, folder, student))
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
