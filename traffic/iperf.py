"""Bulk TCP flows with iperf3 between emulated hosts.

One iperf3 server per (src, dst) pair, on its own port, in the destination
host; the client opens `parallel` TCP streams (each a flow with its own
5-tuple, so the source NIC spreads them over its ports). Per-flow
throughput comes from the receiver's 0.1 s intervals.
"""
import json
import os
import subprocess
import time
from dataclasses import dataclass

from testbed.procs import end

BASE_PORT = 5201
INTERVAL_S = 0.1


@dataclass(frozen=True)
class PairSpec:
    src: str
    dst: str
    dst_ip: str
    parallel: int
    start: float
    port: int

    def flow_ids(self):
        return [f"{self.src}->{self.dst}#{k}" for k in range(self.parallel)]


def plan_pairs(fabric, traffic):
    """Scenario traffic entries -> PairSpecs (one per src/dst pair)."""
    pairs = []
    for entry in traffic:
        src_nic = fabric.nics_of(entry["src"])[0]
        for dst in entry["dst"]:
            dst_nic = next(n for n in fabric.nics_of(dst) if n.rail == src_nic.rail)
            pairs.append(PairSpec(entry["src"], dst, dst_nic.ip, int(entry.get("parallel", 1)),
                                  float(entry.get("start", 0.0)), BASE_PORT + len(pairs)))
    return pairs


class IperfFlows:
    def __init__(self, fnet, pairs, duration, run_dir):
        self.fnet = fnet
        self.pairs = pairs
        self.duration = duration
        self.dir = os.path.join(run_dir, "iperf3")
        os.makedirs(self.dir, exist_ok=True)
        self.servers, self.clients = {}, {}
        self.client_started = {}

    def _out(self, kind, pair):
        return os.path.join(self.dir, f"{kind}-{pair.src}-{pair.dst}-{pair.port}.json")

    def start_servers(self, timeout=10.0):
        for p in self.pairs:
            argv = ["iperf3", "-s", "-1", "-J", "-i", str(INTERVAL_S), "-p", str(p.port)]
            with open(self._out("server", p), "w") as fh:
                self.servers[p] = self.fnet.popen_in(p.dst, argv, stdout=fh,
                                                     stderr=subprocess.STDOUT)
        # Wait until every server listens (an event, polled), not a fixed sleep.
        deadline = time.monotonic() + timeout
        for p in self.pairs:
            while not self._listening(p):
                if self.servers[p].poll() is not None:
                    raise RuntimeError(f"iperf3 server in {p.dst} exited: see {self._out('server', p)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"iperf3 server in {p.dst} not listening on {p.port}")
                time.sleep(0.02)

    def _listening(self, p):
        r = self.fnet.run_in(p.dst, ["ss", "-Hltn", f"sport = :{p.port}"], check=False)
        return bool(r.stdout.strip())

    def start_client(self, p, t0):
        """Start the client of pair `p`; `t0` is the run clock's zero."""
        length = max(1, int(round(self.duration - p.start)))
        argv = ["iperf3", "-c", p.dst_ip, "-p", str(p.port), "-t", str(length), "-P", str(p.parallel),
                "-i", str(INTERVAL_S), "-J", "--connect-timeout", "3000"]
        with open(self._out("client", p), "w") as fh:
            self.clients[p] = self.fnet.popen_in(p.src, argv, stdout=fh, stderr=subprocess.STDOUT)
        self.client_started[p] = time.monotonic() - t0

    def wait(self, timeout):
        """Wait for every iperf3 to finish (ending any still running at the
        deadline); returns a list of problems (empty when all finished)."""
        problems = []
        deadline = time.monotonic() + timeout
        for name, procs in (("client", self.clients), ("server", self.servers)):
            for p, proc in procs.items():
                try:
                    rc = proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    end(proc)
                    problems.append(f"iperf3 {name} {p.src}->{p.dst} did not finish in time")
                    continue
                if rc != 0:
                    problems.append(f"iperf3 {name} {p.src}->{p.dst} failed (status {rc}): see "
                                    f"{self._out(name, p)}")
        return problems

    def stop(self):
        for proc in list(self.clients.values()) + list(self.servers.values()):
            end(proc)

    def series(self):
        """Per-flow receiver throughput: {flow id: [(t_end, mbit), ...]} on
        the run clock, plus {flow id: {src, dst}}."""
        flows, info = {}, {}
        for p in self.pairs:
            ids = p.flow_ids()
            for fid in ids:
                flows[fid] = []
                info[fid] = {"src": p.src, "dst": p.dst}
            doc = _load_json(self._out("server", p))
            offset = self.client_started.get(p, p.start)
            for interval in (doc or {}).get("intervals", []):
                for k, stream in enumerate(interval.get("streams", [])[:len(ids)]):
                    flows[ids[k]].append((offset + stream["end"], stream["bits_per_second"] / 1e6))
        return flows, info


def _load_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None
