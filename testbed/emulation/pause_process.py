"""Run the pause daemon (pfc.py) as a child process: start it once the
queue engine is configured, wait until it says it is ready, and collect its
record of every pause when the traffic is over."""

import json
import os
import subprocess

from .procs import end, own_module, wait_for_line
from .queues import PIN_DIR

READY_TIMEOUT_S = 10.0


class PauseProcess:
    def __init__(self, targets, run_dir):
        self.config_path = os.path.join(run_dir, "pfc-config.json")
        self.out_path = os.path.join(run_dir, "pauses.json")
        self.log_path = os.path.join(run_dir, "pfc.log")
        with open(self.config_path, "w") as fh:
            json.dump({"pin_dir": PIN_DIR, "ports": targets}, fh)
        self.argv = own_module("testbed.emulation.pfc", self.config_path, self.out_path)
        self.proc = None
        self.ready = None
        self.result = None

    def start(self):
        """Start the daemon (again, on a fabric that lives on after a run):
        the record a stop reads is only ever the one this start will write."""
        if os.path.lexists(self.out_path):
            os.unlink(self.out_path)
        self.result = None
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True
        )
        line, _ = wait_for_line(self.proc.stdout, lambda l: l.startswith("{"), READY_TIMEOUT_S)
        if line is None:
            self.stop()
            raise RuntimeError(f"the pause daemon did not start; see {self.log_path}")
        self.ready = json.loads(line)
        return self.proc.pid

    def stop(self):
        """End the daemon and read what it recorded (None if it wrote nothing)."""
        if self.proc is not None:
            end(self.proc)
            self.proc.stdout.close()
            self.proc = None
            self._log.close()
            if os.path.exists(self.out_path):
                with open(self.out_path) as fh:
                    self.result = dict(json.load(fh), scheduling=(self.ready or {}).get("scheduling"))
        return self.result
