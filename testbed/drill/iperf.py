"""The iperf3 flows of a drill, as processes in the emulated hosts: servers
started and waited for until they listen, clients started on the drill's
timeline, all waited for or ended, and their reports read back."""

import json
import os
import socket
import subprocess
import time

from testbed.emulation import netlink
from testbed.emulation.procs import end
from traffic.iperf import client_argv, cport_window, receiver_series, server_argv, spread_cport
from traffic.nic import kernel_oifs


class IperfFlows:
    def __init__(self, fnet, pairs, duration, run_dir):
        self.fnet = fnet
        self.pairs = pairs
        self.duration = duration
        self.dir = os.path.join(run_dir, "iperf3")
        os.makedirs(self.dir, exist_ok=True)
        self.servers, self.clients = {}, {}
        self.client_started = {}
        self.cports = {}  # pair -> its streams' first source port (absent: the kernel's choice)

    def _out(self, kind, pair):
        return os.path.join(self.dir, f"{kind}-{pair.src}-{pair.dst}-{pair.port}.json")

    def start_servers(self, timeout=10.0):
        for p in self.pairs:
            with open(self._out("server", p), "w") as fh:
                self.servers[p] = self.fnet.popen_in(
                    p.dst, server_argv(p), stdout=fh, stderr=subprocess.STDOUT
                )
        # Wait until every server listens (an event, polled), not a fixed sleep.
        deadline = time.monotonic() + timeout
        for p in self.pairs:
            try:
                left = max(0.0, deadline - time.monotonic())
                self.fnet.wait_listening(p.dst, p.port, self.servers[p], left)
            except RuntimeError as e:
                raise RuntimeError(f"iperf3 server in {p.dst} exited: see {self._out('server', p)}") from e
        self._choose_source_ports()

    def _choose_source_ports(self):
        """Each pair's first source port, read off its host's kernel (which
        port each candidate would leave by, all ports up) so that the pair's
        streams spread evenly over them (traffic/iperf.py spread_cport). A
        pair whose kernel cannot be asked keeps the kernel's ports."""
        pairs_of = {}
        for p in self.pairs:
            index = pairs_of[p.src] = pairs_of.get(p.src, -1) + 1
            window = cport_window(index)
            if window is None or p.parallel < 2:
                continue
            src_ip = self.fnet.fabric.nic_on_rail(p.src, p.rail).ip
            try:
                oifs = netlink.in_namespace(
                    self.fnet.netns_of(p.src),
                    lambda p=p, src_ip=src_ip, window=window: kernel_oifs(
                        src_ip, p.dst_ip, p.port, socket.IPPROTO_TCP, window
                    ),
                )
            except OSError:
                continue
            cport = spread_cport(oifs, p.parallel)
            if cport is not None:
                self.cports[p] = cport

    def start_client(self, p, t0):
        """Start the client of pair `p`; `t0` is the run clock's zero."""
        with open(self._out("client", p), "w") as fh:
            self.clients[p] = self.fnet.popen_in(
                p.src, client_argv(p, self.duration, self.cports.get(p)), stdout=fh, stderr=subprocess.STDOUT
            )
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
                    problems.append(
                        f"iperf3 {name} {p.src}->{p.dst} failed (status {rc}): see {self._out(name, p)}"
                    )
        return problems

    def stop(self):
        for proc in list(self.clients.values()) + list(self.servers.values()):
            end(proc)

    def series(self):
        """Per-flow receiver throughput: {flow id: [(t_end, mbit), ...]} on
        the run clock, plus {flow id: {src, dst}}."""
        flows, info = {}, {}
        for p in self.pairs:
            offset = self.client_started.get(p, p.start)
            flows.update(receiver_series(_load_json(self._out("server", p)), p, offset))
            for fid in p.flow_ids():
                info[fid] = {"src": p.src, "dst": p.dst}
        return flows, info


def _load_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None
