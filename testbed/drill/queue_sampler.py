"""Sample every port's class counters from the queue engine at 100 Hz.

The engine's counters live in one mmap-ed BPF array, so a sample is a copy
of memory: no process, no netlink dump, no system call. The thread measures
its own CPU time, which the results report as the telemetry's cost.
"""

import threading
import time

import numpy as np

from testbed.emulation.queues import CLASSES, STAT_FIELDS

ENQ_B, ENQ_P, DEQ_B, DEQ_P, DROP_B, DROP_P, MARKS, ECT = range(len(STAT_FIELDS))
INTERVAL_S = 0.01


class QueueSampler:
    def __init__(self, engine, interval=INTERVAL_S):
        self.engine = engine
        self.interval = interval
        n = len(engine.fabric.queues.classes)
        self.names = [c.name for c in engine.fabric.queues.classes]
        # one row per (port, class), in a fixed order
        self.rows = [(ifname, c) for ifname in sorted(engine.slots, key=engine.slots.get) for c in range(n)]
        self.index = np.array([engine.slots[i] * CLASSES + c for i, c in self.rows])
        self.t, self.backlog_b, self.backlog_p, self.marks = [], [], [], []
        self.first = self.last = None
        self.cpu_s = 0.0
        self.error = None
        self.t0 = None
        self._stop = threading.Event()
        self._thread = None

    def _read(self):
        table = np.frombuffer(self.engine.counters(), dtype=np.uint64)
        return table.reshape(-1, len(STAT_FIELDS))[self.index].astype(np.int64)

    def start(self, t0):
        self.t0 = t0
        self.first = self._read()
        self._thread = threading.Thread(target=self._run, daemon=True, name="queue-sampler")
        self._thread.start()

    def _run(self):
        cpu0 = time.thread_time()
        due = time.monotonic()
        try:
            while not self._stop.is_set():
                snap = self._read()
                self.t.append(time.monotonic() - self.t0)
                self.backlog_b.append(np.maximum(snap[:, ENQ_B] - snap[:, DEQ_B], 0))
                self.backlog_p.append(np.maximum(snap[:, ENQ_P] - snap[:, DEQ_P], 0))
                self.marks.append(snap[:, MARKS])
                self.last = snap
                due += self.interval
                self._stop.wait(max(0.0, due - time.monotonic()))
        except Exception as e:  # reported with the run's problems
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.cpu_s = time.thread_time() - cpu0

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.first is not None:
            self.last = self._read()

    def result(self):
        """What results.json keeps: per port and class, totals over the run and
        backlog statistics; the backlog series of every class that queued;
        the sampler's rate and CPU cost."""
        if self.first is None or not self.t:
            return None
        wall = max(self.t[-1], 1e-9)
        b, p = np.array(self.backlog_b), np.array(self.backlog_p)
        total = self.last - self.first
        ports, series, marks = {}, {}, {}
        cum = np.array(self.marks) - self.first[:, MARKS]
        for r, (ifname, c) in enumerate(self.rows):
            col = b[:, r]
            entry = {
                "sent_bytes": int(total[r, DEQ_B]),
                "sent_pkts": int(total[r, DEQ_P]),
                "drops": int(total[r, DROP_P]),
                "drop_bytes": int(total[r, DROP_B]),
                "marks": int(total[r, MARKS]),
                "ect_pkts": int(total[r, ECT]),
                "max_backlog_bytes": int(col.max()),
                "mean_backlog_bytes": float(col.mean()),
                "p99_backlog_bytes": float(np.percentile(col, 99)),
                "max_backlog_pkts": int(p[:, r].max()),
            }
            if entry["sent_pkts"] or entry["drops"]:
                ports.setdefault(ifname, {})[self.names[c]] = entry
            if entry["max_backlog_bytes"] > 0:
                series[f"{ifname}/{self.names[c]}"] = [int(x) for x in col]
            if entry["marks"] > 0:  # cumulative CE marks since the start
                marks[f"{ifname}/{self.names[c]}"] = [int(x) for x in cum[:, r]]
        return {
            "classes": self.names,
            "samples": len(self.t),
            "sample_hz": round(len(self.t) / wall, 1),
            "cpu_share": round(self.cpu_s / wall, 4),
            "ports": ports,
            "series": {"t": [round(t, 4) for t in self.t], "backlog_bytes": series, "marks": marks},
        }
