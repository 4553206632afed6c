"""Sample queue counters at 10 Hz while a drill runs.

Every shaped egress is an HTB root qdisc; its byte counter is what left the
port, its backlog is what waits for the rate, and its drops are what the
modeled queue dropped (results/counters.py says what they mean).
Root-namespace ports (switch side) are read with one netlink dump per
sample, and the egress of the hosts that send with one dump in each of
their namespaces, on sockets opened once: no process is started, where a
`tc` per namespace cost 3-5 ms of CPU each (a third of a core for 8 hosts
at 10 Hz, taken from the emulation). CPU busy time is sampled alongside.
"""

import threading
import time

from testbed.emulation import netlink
from testbed.fabric.model import HOST


class LinkSampler:
    def __init__(self, fnet, hosts, interval=0.1, on_sample=None):
        self.fnet = fnet
        self.hosts = list(hosts)
        self.interval = interval
        self.on_sample = on_sample
        self.samples = []  # (t, {dev: (bytes, backlog, drops)})
        self.cpu = []  # (t, busy fraction of all cores since the last sample)
        self._cpu_last = None
        self.error = None
        self._stop = threading.Event()
        self._thread = None
        self._spaces = []
        self.t0 = None

    def start(self, t0):
        self.t0 = t0
        self._spaces = [netlink.Namespace(None)] + [
            netlink.Namespace(self.fnet.netns_of(h)) for h in self.hosts
        ]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self):
        counters = {}
        for space in self._spaces:
            counters.update(space.root_qdisc_counters())
        return counters

    def _cpu_busy(self):
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
        idle = fields[3] + fields[4]
        total = sum(fields)
        last, self._cpu_last = self._cpu_last, (idle, total)
        if last is None or total == last[1]:
            return None
        return 1.0 - (idle - last[0]) / (total - last[1])

    def _run(self):
        try:
            self._loop()
        except Exception as e:  # reported by the runner: a run without samples cannot pass
            self.error = f"{type(e).__name__}: {e}"

    def _loop(self):
        next_t = time.monotonic()
        while not self._stop.is_set():
            counters = self._read()
            t = time.monotonic() - self.t0
            busy = self._cpu_busy()
            if busy is not None:
                self.cpu.append((t, busy))
            self.samples.append((t, counters))
            if self.on_sample:
                self.on_sample(t, self)
            next_t += self.interval
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        for space in self._spaces:
            space.close()
        self._spaces = []

    def rate_mbit(self, dev, window=1.0):
        """Mean egress rate of `dev` over the last `window` seconds."""
        if len(self.samples) < 2:
            return 0.0
        t1, c1 = self.samples[-1]
        older = [s for s in self.samples if s[0] <= t1 - window] or self.samples[:1]
        t0, c0 = older[-1]
        if dev not in c0 or dev not in c1 or t1 <= t0:
            return 0.0
        return (c1[dev][0] - c0[dev][0]) * 8 / (t1 - t0) / 1e6


def host_ports(fabric, host):
    return [l.end(host).ifname for l in fabric.links_of(host) if fabric.nodes[host].kind == HOST]
