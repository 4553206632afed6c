"""The job channel's server end: a Unix socket only root can use (0600; a
local file, never a network port), one JSON request per connection, one
JSON line back when the controller has an answer.

    {"announce": {"jobs": [...]}}  ->  {"version": n, "jobs": [...]}  (placed, installed)
                                   ->  {"error": "..."}                 (refused)
"""

import json
import os
import socket
import threading
from collections.abc import Callable

MAX_REQUEST = 16 << 20  # bytes: a few thousand connections' worth


class Reply:
    """Answers one request, once, then closes its connection."""

    def __init__(self, conn):
        self.conn = conn
        self.sent = False

    def __call__(self, obj):
        if self.sent:
            return
        self.sent = True
        try:
            self.conn.sendall((json.dumps(obj, sort_keys=True) + "\n").encode())
        except OSError:
            pass  # the asker gave up; nothing to tell
        finally:
            self.conn.close()


def serve(path: str, handle: Callable[[dict, Callable[[dict], None]], None]) -> socket.socket:
    """Listen on `path` (a stale socket there is replaced) and call
    handle(request dict, reply) for every request, from a daemon thread."""
    directory, name = os.path.split(os.path.abspath(path))
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # A socket path is limited to about 100 bytes: bind by the short name,
    # from its directory, and never let anyone but root connect.
    old_mask = os.umask(0o177)
    cwd = os.getcwd()
    try:
        os.chdir(directory)
        server.bind(name)
    finally:
        os.chdir(cwd)
        os.umask(old_mask)
    os.chmod(path, 0o600)
    server.listen(8)
    threading.Thread(target=_accept, args=(server, handle), daemon=True).start()
    return server


def _accept(server, handle):
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # closed: the controller is going away
        threading.Thread(target=_one, args=(conn, handle), daemon=True).start()


def _one(conn, handle):
    conn.settimeout(10)  # a request comes at once; never hold a thread for a silent peer
    reply = Reply(conn)
    data = b""
    while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    try:
        request = json.loads(data)
        if not isinstance(request, dict):
            raise ValueError("a request is a JSON object")
    except ValueError as e:
        reply({"error": f"unreadable request: {e}"})
        return
    try:
        handle(request, reply)
    except Exception as e:  # a bad request must not take the controller down
        reply({"error": f"{type(e).__name__}: {e}"})
