"""The testbed's end of the job channel: announce a drill's jobs to the
controller over its Unix socket and wait for its answer (the paths and
classes it chose, installed and acknowledged by every switch)."""

import json
import os
import socket

# Longer socket paths do not fit a sockaddr_un; reach those through a
# descriptor of their directory instead.
MAX_SOCKET_PATH = 100


class JobChannelError(RuntimeError):
    pass


def socket_name(path):
    """(a name `connect` and `bind` accept for the Unix socket at `path`,
    the descriptor of its folder to close afterwards or None): a path too
    long for a sockaddr_un is reached through that descriptor."""
    if len(path) <= MAX_SOCKET_PATH:
        return path, None
    dirfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{dirfd}/{os.path.basename(path)}", dirfd


def announce(path, jobs, timeout=30.0):
    """Send {"announce": jobs}; return the controller's answer dict."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    dirfd = None
    try:
        target, dirfd = socket_name(path)
        try:
            sock.connect(target)
            sock.sendall((json.dumps({"announce": jobs}) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            raise JobChannelError(
                f"the controller did not answer the job announcement within {timeout:.0f} s (socket {path})"
            ) from None
        except OSError as e:
            raise JobChannelError(f"cannot reach the controller's job channel {path}: {e}") from None
    finally:
        sock.close()
        if dirfd is not None:
            os.close(dirfd)
    try:
        answer = json.loads(data)
    except ValueError:
        raise JobChannelError(
            f"the controller closed the job channel without an answer (socket {path})"
        ) from None
    if "error" in answer:
        raise JobChannelError(f"the controller refused the jobs: {answer['error']}")
    return answer
