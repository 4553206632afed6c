"""Running one command in each of several hosts' network namespaces, all at
once: how a fabric configures its hosts, loads their queues, probes their
reachability and changes their routes, each in a fraction of the time one
host after another would take."""

import subprocess
from dataclasses import dataclass

from .procs import end


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_in_hosts(ns_argv, commands: dict, timeout: float | None = None) -> dict[str, Ran]:
    """{host: Ran} for commands {host: (argv, stdin text or None)}, each run
    by `ns_argv(host, argv)` with "/" as its working folder. They run side by
    side; the answers are collected in the order given. On any failure,
    timeout or Ctrl-C, none is left running."""
    procs = {
        host: (
            subprocess.Popen(
                ns_argv(host, argv),
                stdin=subprocess.PIPE if text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd="/",
            ),
            text,
        )
        for host, (argv, text) in commands.items()
    }
    ran = {}
    try:
        for host, (proc, text) in procs.items():
            out, err = proc.communicate(text, timeout)
            ran[host] = Ran(proc.returncode, out, err)
    finally:
        for proc, _ in procs.values():
            end(proc, 1.0)
    return ran


def first_failure(ran: dict[str, Ran], what: str) -> str | None:
    """'<what> in <host> failed: <the end of what it said>' for the first
    host whose command failed, None when all succeeded."""
    for host, r in ran.items():
        if r.returncode != 0:
            said = (r.stderr.strip() or r.stdout.strip())[-300:]
            return f"{what} in {host} failed: {said}"
    return None
