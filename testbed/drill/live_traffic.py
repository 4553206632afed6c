"""A scenario's traffic played on the fabric a running `hpnlab up` owns,
so that a user (or a lab) can pull cables by hand while jobs run.

The process that owns the fabric serves a Unix socket in its run folder;
`hpnlab traffic start FILE` connects, sends one request line, and reads
the run's progress and then its end, one JSON object per line:

  -> {"scenario": PATH, "out": DIR, "topology_dirs": [...]}
  <- {"log": "..."} ...   then   {"done": true}   or   {"error": "...", "invalid": bool}

The owner loads the scenario itself (every check `hpnlab run` makes),
plays it at the running fabric's time dilation only if its fabric is the
one running, and writes the report into DIR as `hpnlab run` does. One run
at a time; only root may connect (the peer's credentials are checked).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from collections.abc import Callable

from testbed.emulation.jobchannel import socket_name
from testbed.emulation.rundir import write_private
from testbed.fabric.dilation import dilate
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario

SOCKET_NAME = "traffic.sock"
RUNNING_NAME = "traffic.json"
MAX_REQUEST = 64 * 1024


def fabric_difference(running: dict, wanted: dict) -> str | None:
    """What differs between the running fabric and a scenario's, as the
    model's fields name it (pure); None when the scenario's fabric is the
    one running (its name aside: a scenario names its fabric after itself)."""
    keys = sorted((set(running) | set(wanted)) - {"name"})
    differ = [k for k in keys if running.get(k) != wanted.get(k)]
    return ", ".join(differ) if differ else None


def socket_path(run_dir: str) -> str:
    return os.path.join(run_dir, SOCKET_NAME)


def running_path(run_dir: str) -> str:
    """The file that says which traffic runs on the fabric, while it runs."""
    return os.path.join(run_dir, RUNNING_NAME)


def running(run_dir: str) -> dict | None:
    """The traffic running on the fabric of `run_dir`, if any."""
    try:
        fd = os.open(running_path(run_dir), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            about = json.load(fh)
    except (OSError, ValueError):
        return None
    return about if isinstance(about, dict) else None


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[2]


def _send(conn: socket.socket, obj: dict) -> None:
    """One line to the client; a client gone (Ctrl-C) does not stop the run."""
    try:
        conn.sendall((json.dumps(obj) + "\n").encode())
    except OSError:
        pass


class TrafficServer:
    """The owner's side: accept requests, play one scenario at a time on
    `fnet`. `log`: where the owner's own output goes (up.log)."""

    def __init__(self, fnet, log: Callable[[str], None] = print):
        self.fnet = fnet
        self.log = log
        self.path = socket_path(fnet.run_dir)
        self.busy = threading.Lock()
        self.sock: socket.socket | None = None

    def start(self) -> None:
        if os.path.lexists(self.path):
            os.unlink(self.path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name, dirfd = socket_name(self.path)
        old = os.umask(0o077)  # root's alone, whatever folder the run is in
        try:
            self.sock.bind(name)
        finally:
            os.umask(old)
            if dirfd is not None:
                os.close(dirfd)
        self.sock.listen(4)
        threading.Thread(target=self._accept, daemon=True, name="traffic-server").start()

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if os.path.lexists(self.path):
            os.unlink(self.path)

    def _accept(self) -> None:
        while self.sock is not None:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the fabric is going down
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="traffic-run").start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            if _peer_uid(conn) != 0:
                _send(conn, {"error": "only root may start traffic on the fabric"})
                return
            try:
                request = _read_request(conn)
            except (ValueError, OSError) as e:
                _send(conn, {"error": f"a request this fabric cannot read: {e}"})
                return
            if not self.busy.acquire(blocking=False):
                _send(conn, {"error": "traffic is already running on this fabric; wait until it ends"})
                return
            try:
                self._play(conn, request)
            finally:
                self.busy.release()

    def _play(self, conn: socket.socket, request: dict) -> None:
        from .runner import ReachabilityError, run_scenario

        path, out = request["scenario"], request["out"]
        try:
            emulated = load_scenario(path, request.get("topology_dirs") or ())
        except ConfigError as e:
            _send(conn, {"error": "\n".join(str(p) for p in e.problems), "invalid": True})
            return
        n = self.fnet.fabric.time_dilation
        sc = dilate(emulated, n) if n != 1 else emulated
        differ = fabric_difference(self.fnet.fabric.to_dict(), sc.fabric.to_dict())
        if differ:
            _send(
                conn,
                {
                    "error": f"{path}: its fabric is not the one running ({differ} differ); "
                    f"start that fabric with 'hpnlab up {path}'",
                    "invalid": True,
                },
            )
            return

        def log(line: str) -> None:
            self.log(line)
            _send(conn, {"log": line})

        log(f"traffic of {sc.name} on the running fabric; report in {out}")
        now = running_path(self.fnet.run_dir)
        if os.path.lexists(now):
            os.unlink(now)
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        about = {"scenario": path, "out": out, "started": started, "jobs": [j.name for j in sc.jobs]}
        write_private(now, json.dumps(about))  # what `hpnlab status` shows meanwhile
        try:
            run_scenario(sc, out, log=log, dilation_choice={"from": "running fabric"}, live=self.fnet)
        except (ReachabilityError, RuntimeError, TimeoutError, OSError) as e:
            _send(conn, {"error": f"the traffic stopped: {e}"})
            return
        finally:
            os.unlink(now)
        _send(conn, {"done": True})


def _read_request(conn: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError("request too long")
    request = json.loads(data.decode())
    if not isinstance(request, dict) or not all(isinstance(request.get(k), str) for k in ("scenario", "out")):
        raise ValueError("a request names a scenario and a report folder")
    return request


def request(
    run_dir: str, scenario: str, out: str, topology_dirs: list[str], on_line: Callable[[dict], None]
) -> None:
    """The client's side: send the request and hand every answer line to
    `on_line` until the owner closes the connection."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name, dirfd = socket_name(socket_path(run_dir))
    try:
        sock.connect(name)
        asked = {"scenario": scenario, "out": out, "topology_dirs": topology_dirs}
        sock.sendall((json.dumps(asked) + "\n").encode())
        with sock.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                on_line(json.loads(line))
    finally:
        sock.close()
        if dirfd is not None:
            os.close(dirfd)
