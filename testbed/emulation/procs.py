"""Ending the child processes a run started (and only those)."""
import subprocess


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
