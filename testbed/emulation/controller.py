"""Run the HPN controller (os-ken) as a child process and follow its events.

The controller prints JSON lines (see controllers/hpn_app.py); a reader
thread collects them so the testbed can wait on real events (every switch
connected, routes acknowledged) instead of sleeping.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

from .procs import end


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControllerProcess:
    def __init__(self, fabric_json, log_path, on_routes=None):
        self.port = free_port()
        self.log_path = log_path
        self.argv = [sys.executable, "-m", "controllers.run", "--fabric", fabric_json,
                     "--host", "127.0.0.1", "--port", str(self.port)]
        self.events = []
        self.cond = threading.Condition()
        self.on_routes = on_routes
        self.proc = None

    def start(self):
        self._log = open(self.log_path, "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, env=env, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        return self.proc.pid

    def _read(self):
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            event["t"] = time.monotonic()
            if event.get("event") == "routes" and self.on_routes:
                try:
                    self.on_routes(event)
                except Exception as e:  # keep following events; the runner reports it
                    event["apply_error"] = f"{type(e).__name__}: {e}"
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()
        with self.cond:
            self.events.append({"event": "exit", "t": time.monotonic()})
            self.cond.notify_all()

    def wait_for(self, predicate, timeout, what):
        """Block until an event satisfies `predicate`; raise with `what` on
        timeout or when the controller exits."""
        deadline = time.monotonic() + timeout
        with self.cond:
            seen = 0
            while True:
                for ev in self.events[seen:]:
                    if predicate(ev):
                        return ev
                    if ev["event"] == "exit":
                        raise RuntimeError(f"controller exited while waiting for {what}; "
                                           f"see {self.log_path}")
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}; "
                                       f"controller log: {self.log_path}")
                self.cond.wait(left)

    def stop(self):
        if self.proc:
            end(self.proc)
            self._log.close()
