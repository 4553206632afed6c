"""The drill's probes as processes: a receiver in each destination host,
started and bound before the drill's clock starts, and a sender in each
source host that starts sending at the drill's zero (traffic/probe.py)."""

import json
import os
import subprocess

from testbed.emulation.procs import end as end_process
from testbed.emulation.procs import own_module
from traffic.probe import SPORT_CANDIDATES

BASE_PORT = 7100  # UDP destination port of probe i: BASE_PORT + i
SOURCE_BASE = 20000  # probe i picks its UDP source ports from SOURCE_BASE + SPORT_CANDIDATES * i on
LINGER_S = 0.5  # receivers keep listening this long after the senders stop


class Probes:
    def __init__(self, fnet, probes, run_dir):
        self.fnet, self.probes, self.run_dir = fnet, list(probes), run_dir
        self.receivers, self.senders = [], []

    def _file(self, i, what):
        return os.path.join(self.run_dir, f"probe{i}-{what}.json")

    def _nics(self, p):
        src = self.fnet.fabric.nics_of(p["src"])[0]
        dst = self.fnet.fabric.nic_on_rail(p["dst"], src.rail)
        return src, dst

    def start_receivers(self):
        """Bind every receiver and wait until each says so; each listens
        until the deadline start_senders() gives it."""
        for i, p in enumerate(self.probes):
            _, dst = self._nics(p)
            proc = self.fnet.popen_in(
                p["dst"],
                own_module(
                    "traffic.probe",
                    "recv",
                    "--bind",
                    dst.ip,
                    "--port",
                    BASE_PORT + i,
                    "--out",
                    self._file(i, "recv"),
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.receivers.append(proc)
        for i, proc in enumerate(self.receivers):
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(
                    f"probe {i} receiver in {self.probes[i]['dst']} did not start (status {proc.poll()})"
                )

    def start_senders(self, t0, until):
        """Senders send from `t0` to `until` (monotonic); receivers listen
        until LINGER_S after, for what is still in flight."""
        for proc in self.receivers:
            proc.stdin.write(f"{until + LINGER_S:.6f}\n")
            proc.stdin.close()
        for i, p in enumerate(self.probes):
            src, dst = self._nics(p)
            self.senders.append(
                self.fnet.popen_in(
                    p["src"],
                    own_module(
                        "traffic.probe",
                        "send",
                        "--src",
                        src.ip,
                        "--dst",
                        dst.ip,
                        "--port",
                        BASE_PORT + i,
                        "--sport",
                        SOURCE_BASE + SPORT_CANDIDATES * i,
                        "--rate",
                        p["rate"],
                        "--flows",
                        p["flows"],
                        "--start",
                        f"{t0:.6f}",
                        "--until",
                        f"{until:.6f}",
                        "--out",
                        self._file(i, "send"),
                    ),
                )
            )

    def wait(self, timeout):
        """Wait for every probe process to finish on its own; the problems."""
        problems = []
        for proc in self.senders + self.receivers:
            try:
                code = proc.wait(timeout)
            except Exception:
                code = end_process(proc, 1.0)
            if code != 0:
                problems.append(f"a probe process exited with status {code} (see {self.run_dir})")
        return problems

    def stop(self):
        for proc in self.senders + self.receivers:
            end_process(proc, 1.0)

    def records(self):
        """[{src, dst, rate, flows, sent: {flow: [t]}, arrivals: {flow: [[seq, t]]}}]
        with times in seconds of the machine's monotonic clock."""
        out = []
        for i, p in enumerate(self.probes):
            rec = dict(p)
            for what in ("send", "recv"):
                try:
                    with open(self._file(i, what)) as fh:
                        rec.update(json.load(fh))
                except (OSError, ValueError):
                    pass
            out.append(rec)
        return out
