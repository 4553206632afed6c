"""What every subcommand shares: exit statuses and how problems are printed."""

import os
import sys

from testbed.fabric.problems import printable

# Exit statuses, so that a script or a CI job can tell "the network
# regressed" from "the machine could not judge" from "the file is wrong":
OK = 0  # done; for a drill, every expectation held
FAILED = 1  # a drill ran faithfully and an expectation failed
INVALID = 2  # an invalid file or command line (argparse's usage errors too)
USAGE = INVALID
CANNOT_RUN_HERE = 3  # this machine lacks a kernel feature or a service the file needs
UNTRUSTWORTHY = 4  # the drill ran, but the emulation did not hold: nothing was judged
NOT_RUN = 5  # could not run: not root, another fabric is up, a folder refused,
# a tool failed, hosts unreachable before traffic
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
TERMINATED = 143  # SIGTERM, e.g. from `hpnlab down` (128 + SIGTERM)

EXIT_STATUSES = f"""exit status:
  {OK}    done; for a drill, every expectation held
  {FAILED}    a drill ran faithfully and an expectation failed
  {INVALID}    invalid file or command line
  {CANNOT_RUN_HERE}    this machine lacks a kernel feature or service the file needs
  {UNTRUSTWORTHY}    the drill ran but the emulation did not hold (untrustworthy: nothing judged)
  {NOT_RUN}    could not run (not root, another fabric up, folder refused, a tool failed)
  {INTERRUPTED}  interrupted (Ctrl-C); {TERMINATED} stopped by SIGTERM"""


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound like Ctrl-C so that the same teardown runs."""


def interrupted_status(exc):
    return TERMINATED if isinstance(exc, Terminated) else INTERRUPTED


def print_problems(error):
    """Every problem of a ConfigError, one line each, on stderr."""
    for problem in error.problems:
        print(problem, file=sys.stderr)
    return INVALID


def err(msg, status=NOT_RUN):
    """Say what went wrong, on one line of stderr; returns `status`."""
    print(printable(f"hpnlab: error: {msg}"), file=sys.stderr)
    return status


def need_root(cmd):
    """An error status when not root; None when root."""
    if os.geteuid() != 0:
        return err(
            f"'hpnlab {cmd}' needs root (it creates network namespaces, veths and "
            f"Open vSwitch bridges); run it as root or with sudo"
        )
    return None


def add_topology_dir_option(parser):
    parser.add_argument(
        "--topology-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder a scenario's 'topology:' may name files in, besides "
        "the scenario's own folder and hpnlab's topologies (repeatable)",
    )
