"""The `hpnlab` command line.

Each subcommand is a pair of functions: one that adds its parser, one that
runs it and returns the exit status. Adding a subcommand means writing the
pair and listing the first in its module's COMMANDS.

Exit statuses: see common.EXIT_STATUSES (printed by --help).
"""

import argparse
import sys

from . import crux, drill, files, lab, live, machine, plan, traffic
from .common import EXIT_STATUSES, USAGE

COMMANDS = (
    files.COMMANDS
    + plan.COMMANDS
    + crux.COMMANDS
    + machine.COMMANDS
    + live.COMMANDS
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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(subparsers)
    return parser


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
    return args.run(args)
