"""Ending the child processes a run started (and only those), and holding
interrupts while something must not be cut short."""

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time


def own_module(module, *args):
    """The argv that runs hpnlab's own `module` as a child process.

    Children run as root, so they must import hpnlab's code only: `-I`
    (isolated mode) leaves the working directory off the module path and
    ignores PYTHONPATH, PYTHONSTARTUP and the user's site-packages, so a
    folder named `controllers/` where the user stands, or an environment
    set by someone else, cannot replace a module. `-u`: the child's output
    arrives line by line (-I also ignores PYTHONUNBUFFERED)."""
    return [sys.executable, "-I", "-u", "-m", module, *map(str, args)]


def end(proc, grace=5.0):
    """SIGTERM a child we started, SIGKILL it if it is still there after
    `grace` seconds, and reap it. Returns its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@contextlib.contextmanager
def signals_held(signals=(signal.SIGINT, signal.SIGTERM)):
    """Within the block, SIGINT and SIGTERM are noted instead of acted on;
    at its end the previous handlers come back and the first signal noted
    is handled as if it had just arrived (so Ctrl-C during teardown stops
    the program after the teardown, not half-way through it). Only the main
    thread can change handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: noted.append(signum)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if noted:
            signal.raise_signal(noted[0])


def wait_for_line(pipe, wanted, timeout):
    """The first line a child writes to `pipe` for which `wanted(line)` is
    true, waiting at most `timeout` seconds; None on timeout or end of
    output. Returns (line, everything seen). Reads the descriptor itself:
    select() cannot see lines already pulled into a buffered reader, so a
    readline() after select() misses a second line that came in the same
    read (tcpdump writes two at once when the machine is busy)."""
    fd = pipe.fileno()
    deadline = time.monotonic() + timeout
    seen = b""
    while True:
        *complete, _partial = seen.split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            if wanted(line):
                return line, seen.decode(errors="replace")
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None, seen.decode(errors="replace")
        chunk = os.read(fd, 65536)
        if not chunk:
            return None, seen.decode(errors="replace")
        seen += chunk
