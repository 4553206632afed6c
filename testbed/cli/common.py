"""What every subcommand shares: exit statuses and how problems are printed."""

import os
import stat
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


def write_output_file(path: str, text: str | bytes, option: str) -> int | None:
    """Write a file the user named (`--junit`, `--csv`) as root would want
    it written: never through a symbolic link or into a file with another
    name linked to it (a student's folder may hold either, aimed at a file
    of root's), replacing an ordinary file's content. None when written,
    else the exit status after one line naming the option and the reason."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        return link_refused(path, option) or err(f"{option}: cannot write {path}: {e.strerror or e}", INVALID)
    with os.fdopen(
        fd, "wb" if isinstance(text, bytes) else "w", **({} if isinstance(text, bytes) else {"newline": ""})
    ) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            return err(f"{option}: {path} is not a plain file of its own; name a new file", INVALID)
        fh.truncate(0)
        fh.write(text)
    return None


def link_refused(path: str | None, option: str) -> int | None:
    """The exit status after one line when the file an option names is a
    symbolic link (checked before a long run, so that it fails at once;
    write_output_file refuses it again when it writes); None otherwise."""
    if path and os.path.islink(path):
        return err(f"{option}: {path} is a symbolic link; name a new file", INVALID)
    return None
