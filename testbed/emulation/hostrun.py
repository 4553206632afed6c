"""Running one command in each of several hosts' network namespaces, all at
once: how a fabric configures its hosts, loads their queues, probes their
reachability and changes their routes, each in a fraction of the time one
host after another would take."""

import subprocess
import time
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
    side; the answers are collected in the order given. A command still
    running `timeout` s after they started is ended and answers as failed,
    saying so. On any failure or Ctrl-C, none is left running."""
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
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for host, (proc, text) in procs.items():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out, err = proc.communicate(text, left)
            except subprocess.TimeoutExpired:
                if proc.poll() is None:
                    end(proc, 1.0)
                    ran[host] = Ran(-1, "", f"still running after {timeout:g} s: ended")
                    continue
                out, err = proc.communicate()  # it ended in time; only its answer was waiting
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
