"""Entering a host's network namespace for a moment: an agent process that
plays several hosts opens each host's sockets inside that host's namespace
(a socket stays in the namespace it was made in) and comes back."""

import contextlib
import ctypes
import os
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12 on
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"entering a network namespace: {os.strerror(err)}")


@contextlib.contextmanager
def entered(path: str | None) -> Iterator[None]:
    """Inside the network namespace at `path` (for example /proc/PID/ns/net)
    for the block, back in this thread's own after it; `path` None: stay."""
    if path is None:
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(path, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)
