"""What every subcommand shares: exit statuses and how problems are printed."""
import os
import sys

# Exit status: 0 success, 1 invalid input or a failed run, 2 usage error
# (argparse's own), 3 this kernel lacks a feature the file needs.
OK, INVALID, FAILED, USAGE, CANNOT_RUN_HERE = 0, 1, 1, 2, 3


def print_problems(error):
    """Every problem of a ConfigError, one line each, on stderr."""
    for problem in error.problems:
        print(problem, file=sys.stderr)
    return INVALID


def err(msg):
    print(f"hpnlab: error: {msg}", file=sys.stderr)
    return FAILED


def need_root(cmd):
    """An error (and FAILED) when not root; None when root."""
    if os.geteuid() != 0:
        return err(f"'hpnlab {cmd}' needs root (it creates network namespaces, veths and "
                   f"Open vSwitch bridges); run it as root or with sudo")
    return None
