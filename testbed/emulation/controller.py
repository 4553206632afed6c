"""Run the HPN controller (os-ken) as a child process and follow its events.

The controller prints JSON lines (see controllers/hpn_app.py); a reader
thread collects them so the testbed can wait on real events (every switch
connected, routes acknowledged) instead of sleeping.
"""

import json
import subprocess
import threading
import time

from .procs import end, own_module


class ControllerProcess:
    def __init__(self, fabric_json, log_path, listen, on_routes=None, on_exit=None, jobs_socket=None):
        # listen: the Unix socket the switches connect to (in the run's
        # private folder: see controllers/run.py); on_routes: called from
        # the reader thread with each "overrides" and "routes" event, before
        # the event is recorded
        self.listen = listen
        self.target = f"unix:{listen}"  # what Open vSwitch connects to
        self.log_path = log_path
        self.jobs_socket = jobs_socket
        self.argv = own_module("controllers.run", "--fabric", fabric_json, "--listen", listen)
        if jobs_socket:
            self.argv += ["--jobs-socket", jobs_socket]
        self.events = []
        self.cond = threading.Condition()
        self.on_routes = on_routes
        self.on_exit = on_exit  # called from the reader thread with the exit event
        self.proc = None
        self.starts = 0
        self.asked_to_stop = set()  # PIDs stopped by stop(): their exit is no surprise

    def start(self):
        """Start the controller (again, after stop(): same port, so the
        switches find it on their next reconnection attempt; the log goes on)."""
        self._log = open(self.log_path, "a" if self.starts else "w")
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True, cwd="/"
        )
        self.starts += 1
        with self.cond:
            self.events.append({"event": "start", "pid": self.proc.pid, "t": time.monotonic()})
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()
        return self.proc.pid

    def _read(self, proc):
        log = self._log
        for line in proc.stdout:
            _keep(log, line)  # the events in the log too: what a timed-out wait saw
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            event["t"] = time.monotonic()
            if event.get("event") in ("overrides", "routes") and self.on_routes:
                try:
                    self.on_routes(event)
                except Exception as e:  # keep following events; the runner reports it
                    event["apply_error"] = f"{type(e).__name__}: {e}"
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()
        code = proc.wait()
        exit_event = {
            "event": "exit",
            "pid": proc.pid,
            "code": code,
            "t": time.monotonic(),
            "asked": proc.pid in self.asked_to_stop,
        }
        with self.cond:
            self.events.append(exit_event)
            self.cond.notify_all()
        if self.on_exit:
            self.on_exit(exit_event)

    def wait_for(self, predicate, timeout, what, since=0):
        """Block until an event (from index `since` on) satisfies `predicate`;
        raise with `what` on timeout or when the controller exits."""
        deadline = time.monotonic() + timeout
        with self.cond:
            seen = since
            while True:
                for ev in self.events[seen:]:
                    if predicate(ev):
                        return ev
                    if ev["event"] == "exit":
                        raise RuntimeError(f"controller exited while waiting for {what}; see {self.log_path}")
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"timed out after {timeout:.0f} s waiting for {what}; controller log: {self.log_path}"
                    )
                self.cond.wait(left)

    def stop(self):
        if self.proc:
            self.asked_to_stop.add(self.proc.pid)
            end(self.proc)
            self._reader.join(5)  # its exit event is recorded before anything that follows
            self._log.close()
            self.proc = None


def _keep(log, line):
    """Append a line the controller printed to its log (stderr goes there)."""
    try:
        log.write("event " + line)
        log.flush()
    except (OSError, ValueError):  # the log is closed once the controller is stopped
        pass
