"""The `hpnlab` command line.

Each subcommand is a pair of functions: one that adds its parser, one that
runs it and returns the exit status. Adding a subcommand means writing the
pair and listing the first in its module's COMMANDS.

Exit statuses: see common.EXIT_STATUSES (printed by --help).
"""

import argparse
import os
import sys

from . import crux, drill, files, lab, live, machine, plan, tables, traffic
from .common import EXIT_STATUSES, USAGE, err

COMMANDS = (
    files.COMMANDS
    + plan.COMMANDS
    + crux.COMMANDS
    + machine.COMMANDS
    + live.COMMANDS
    + tables.COMMANDS
    + traffic.COMMANDS
    + drill.COMMANDS
    + lab.COMMANDS
)


def _version() -> str:
    """The installed package's version (a clone not installed says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hpnlab")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser():
    parser = argparse.ArgumentParser(
        prog="hpnlab",
        description="Packet-level emulation testbed for AI-training data-center networks.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hpnlab {_version()}")
    parser.add_argument(
        "--fabric",
        metavar="NAME",
        help="work on the fabric of this name, which runs beside the machine's and any other "
        "name's, in namespaces and an Open vSwitch of its own (default: $HPNLAB_FABRIC, else "
        "the machine's fabric); e.g. sudo hpnlab --fabric alice up topologies/hpn-mini.yaml --detach",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(subparsers)
    for name, sub in subparsers.choices.items():
        _with_example(sub, name)
    return parser


# What `hpnlab COMMAND --help` ends with: whether it needs root, and one
# line to copy (the README's commands, as typed).
ROOT_COMMANDS = {
    "doctor",
    "up",
    "down",
    "status",
    "exec",
    "link",
    "switch",
    "pingall",
    "flows",
    "queues",
    "traffic",
    "run",
}
EXAMPLES = {
    "check": "hpnlab check scenarios/dual-tor-link-failure.yaml topologies/hpn-mini.yaml",
    "topo": "hpnlab topo draw topologies/hpn-mini.yaml --out fabric.svg",
    "plan": "hpnlab plan scenarios/allreduce-ring.yaml",
    "crux": "hpnlab crux plan scenarios/crux-contention.yaml",
    "doctor": "sudo hpnlab doctor",
    "up": "sudo hpnlab up topologies/hpn-mini.yaml --detach",
    "down": "sudo hpnlab down",
    "status": "sudo hpnlab status --draw fabric.svg",
    "exec": "sudo hpnlab exec s0h0 -- ping -c 3 10.0.1.1",
    "link": "sudo hpnlab link s0h0 t0r0k0 down",
    "switch": "sudo hpnlab switch t0r0k0 down",
    "pingall": "sudo hpnlab pingall",
    "flows": "sudo hpnlab flows t0r0k0",
    "queues": "sudo hpnlab queues t0r0k0 --count 0",
    "traffic": "sudo hpnlab traffic start scenarios/crux-classes.yaml --out /tmp/live",
    "run": "sudo hpnlab run scenarios/dual-tor-link-failure.yaml --out results/dual",
    "compare": "hpnlab compare results/dual results/single",
    "lab": "hpnlab lab start 1; sudo hpnlab lab check 1 lab-01-dual-tor",
}


def _with_example(sub: argparse.ArgumentParser, name: str) -> None:
    head = "needs root (sudo)" if name in ROOT_COMMANDS else "no root needed"
    if name == "lab":
        head = "lab check and lab grade need root (sudo), the others do not"
    example = EXAMPLES.get(name)
    text = f"{head}; example:\n  {example}" if example else head
    sub.epilog = f"{text}\n\n{sub.epilog}" if sub.epilog else text
    sub.formatter_class = _Formatter


class _Formatter(argparse.HelpFormatter):
    """Fills a one-line description to the terminal's width, as argparse
    does; keeps text laid out in lines (the examples, the exit statuses)."""

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def main(argv=None):
    """Run the command line; returns the exit status instead of exiting."""
    # Progress lines must reach a pipe (make, a test, a log) as they happen.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        # argparse exits on --help (0) and on usage errors (2); report, not exit.
        return e.code if isinstance(e.code, int) else USAGE
    if args.fabric or os.environ.get("HPNLAB_FABRIC"):
        status = _serve_named(args, sys.argv[1:] if argv is None else list(argv))
        if status is not None:
            return status
    return args.run(args)


# The commands that build a fabric (in new namespaces, when it is named) and
# those that work on a running one (in its namespaces).
BUILDING = {"up", "run", "doctor"}
ENTERING = {"status", "exec", "link", "switch", "pingall", "flows", "queues", "traffic"}


def _serve_named(args, argv):
    """For a named fabric (testbed/emulation/named.py): run the command in
    its namespaces, replacing this process; an exit status when the name is
    refused; None to run the command here (already inside, not root, or a
    command that needs no namespace: down, lab, the file commands)."""
    from testbed.emulation import named

    name = args.fabric or os.environ["HPNLAB_FABRIC"]
    problem = named.name_problem(name)
    if problem:
        return err(problem, USAGE)
    os.environ["HPNLAB_FABRIC"] = name  # what every child process serves too
    if named.inside() or os.geteuid() != 0 or args.command not in BUILDING | ENTERING:
        return None
    return named.reexec(argv, owning=args.command in BUILDING)
