"""The packets per second a scenario asks of the emulator (pure), at time
dilation 1 and while its traffic is communicating.

Every sender of packets is counted at the rate its NIC lets it send: a
training job's rank, or an iperf3 client. The emulator must keep up with
that rate whenever the traffic runs, so compute phases are not averaged
in. Senders overlap in time as the scenario says: an iperf3 client from
its start to the end of the run, a job from its start for as long as its
iterations take on an idle fabric (testbed/results/analytical.py, a lower
bound: a slowed job may overlap more). The load of a moment is that of
the senders running then; the plan prices every moment a sender starts.

  * a rank sends one frame of the largest RoCE payload the MTU allows
    (plus its headers) per packet; it talks to one peer at a time (ring,
    halving-doubling, hierarchical, pipeline: one flow, so one NIC port),
    or to all its peers at once (all-to-all: as many ports as it has
    peers); pinned to a port, it uses that one;
  * an iperf3 client sends MTU-sized frames over as many ports as it has
    TCP streams;
  * a host's senders together never exceed what its NIC's ports carry.

Each packet crosses some switches on its way (the switch hops along the
routes of the healthy fabric, testbed/fabric/paths.py); the switches'
work is the packet-hops per second. Acknowledgements are not counted
apart: the per-packet costs a calibration measures fold them in.
"""

import dataclasses
from collections import deque
from dataclasses import dataclass

from testbed.results.analytical import (
    analytical_iteration_s,
    frame_bytes,
    goodput_bps,
    path_latency_s,
    schedule_of,
)

ETHERNET_HEADER = 14  # an IP MTU's frame on the wire carries it too
# Collectives whose ranks keep a transfer in flight to several peers at
# once; every other one sends to one peer at a time.
CONCURRENT_PEERS = frozenset({"all-to-all"})


@dataclass(frozen=True)
class Sender:
    """One source of packets on a host."""

    host: str
    what: str  # e.g. "ring8 rank 0", "iperf3 to s1h0 (8 streams)"
    bps: float  # the rate its NIC ports let it send at
    frame_bytes: int  # one packet on the wire, Ethernet header included
    switch_hops: float  # switches a packet crosses, averaged over its bytes
    start_s: float = 0.0
    end_s: float = float("inf")
    rails: tuple[int, ...] = (0,)  # the host's NICs it sends from

    @property
    def pps(self):
        return self.bps / (self.frame_bytes * 8)

    @property
    def packet_hops_per_s(self):
        return self.pps * self.switch_hops

    def running_at(self, t):
        return self.start_s <= t < self.end_s


@dataclass(frozen=True)
class Load:
    """What the senders running at one moment ask, each host's senders
    together held to what its NIC's ports carry."""

    t: float
    senders: tuple

    def host_pps(self):
        """{host: packets per second its senders ask}, in sender order."""
        out = {}
        for s in self.senders:
            out[s.host] = out.get(s.host, 0.0) + s.pps
        return out

    @property
    def total_pps(self):
        return sum(s.pps for s in self.senders)

    @property
    def packet_hops_per_s(self):
        return sum(s.packet_hops_per_s for s in self.senders)

    @property
    def mean_switch_hops(self):
        return self.packet_hops_per_s / self.total_pps if self.total_pps else 0.0


def senders(sc):
    """Every Sender of undilated Scenario `sc`, with when it runs."""
    fabric = sc.fabric
    hops = _Hops(fabric)
    out = []
    for job in sc.jobs:
        out += _job_senders(fabric, job, hops, sc.duration_s)
    for entry in sc.traffic:
        out.append(_iperf_sender(fabric, entry, hops, sc.duration_s))
    return out


def agent_hosts(sc):
    """The hosts the traffic agents play, in the order a drill deals them
    out to its agent processes (scenario order: each job's hosts)."""
    return list(dict.fromkeys(h for job in sc.jobs for h in job.hosts))


def loads(sc):
    """The Load of every moment a sender of `sc` starts, in time order (a
    scenario without traffic has one empty Load)."""
    every = senders(sc)
    moments = sorted({s.start_s for s in every}) or [0.0]
    return [Load(t, tuple(_capped(sc.fabric, [s for s in every if s.running_at(t)]))) for t in moments]


def _port_rates(fabric, host, rail=0):
    """The rates of the ports of `host`'s NIC on `rail` (a job's traffic
    uses the first)."""
    ports = set(fabric.nics_of(host)[rail].ports)
    return [fabric.scaled_bps(l) for l in fabric.links_of(host) if l.end(host).ifname in ports]


def _job_senders(fabric, job, hops, duration_s):
    sched = schedule_of(job)
    frame = frame_bytes(fabric)
    iteration = analytical_iteration_s(job, goodput_bps(fabric), path_latency_s(fabric, job))
    end = min(duration_s, job.start + job.iterations * iteration)
    out = []
    for rank, host in enumerate(job.hosts):
        sends = sched.send_steps(rank)
        if not sends:
            continue
        rates = _port_rates(fabric, host)
        peers = {s.peer for s in sends}
        if all(s.port is not None for s in sends):
            ports = 1
        elif job.collective in CONCURRENT_PEERS:
            ports = min(len(peers), len(rates))
        else:
            ports = 1
        total = sum(s.nbytes for s in sends)
        mean_hops = sum(s.nbytes * hops(host, job.hosts[s.peer]) for s in sends) / total
        out.append(
            Sender(host, f"{job.name} rank {rank}", ports * min(rates), frame, mean_hops, job.start, end)
        )
    return out


def _iperf_sender(fabric, entry, hops, duration_s):
    src, dsts = entry.src, list(entry.dst)
    streams = entry.parallel * len(dsts)  # per rail
    rails = entry.rails_of(len(fabric.nics_of(src)))
    bps = 0.0
    for rail in rails:  # each rail's streams fill as many of its NIC's ports as they can
        rates = _port_rates(fabric, src, rail)
        bps += min(streams, len(rates)) * min(rates)
    mean_hops = sum(hops(src, d) for d in dsts) / len(dsts)
    total = streams * len(rails)
    on = f", {len(rails)} rails" if len(rails) > 1 else ""
    what = f"iperf3 to {short_names(dsts)} ({total} TCP stream{'s' if total > 1 else ''}{on})"
    return Sender(src, what, bps, fabric.mtu + ETHERNET_HEADER, mean_hops, entry.start, duration_s, rails)


def short_names(hosts, most=3):
    """Hosts for a line of text: all of them, or the first few and how many."""
    hosts = list(hosts)
    return ", ".join(hosts) if len(hosts) <= most else f"{', '.join(hosts[:most])}, ... ({len(hosts)})"


def _capped(fabric, senders):
    """The senders, each host's scaled down together to what its NIC's
    ports carry when they ask more (two jobs on one host share its NIC)."""
    asked, rails = {}, {}
    for s in senders:
        asked[s.host] = asked.get(s.host, 0.0) + s.bps
        rails.setdefault(s.host, set()).update(s.rails)
    out = []
    for s in senders:
        cap = sum(sum(_port_rates(fabric, s.host, r)) for r in rails[s.host])
        share = min(1.0, cap / asked[s.host]) if asked[s.host] else 1.0
        out.append(s if share == 1.0 else dataclasses.replace(s, bps=s.bps * share))
    return out


class _Hops:
    """Switches a packet crosses from one host to another, averaged over the
    source NIC's ports: the shortest switch path from the switch a port
    hangs off to the nearest switch the destination NIC hangs off, which is
    the path the controller's routes take on the healthy fabric
    (testbed/fabric/paths.py; a unit test holds the two together). One
    breadth-first search per source switch, so that large fabrics plan fast."""

    def __init__(self, fabric):
        self.fabric = fabric
        self.neighbours = {s.name: [] for s in fabric.switches()}
        self.attached = {}  # NIC port ifname -> the switch at its other end
        for link in fabric.links:
            a, b = link.a.node, link.b.node
            if a in self.neighbours and b in self.neighbours:
                self.neighbours[a].append(b)
                self.neighbours[b].append(a)
            elif b in self.neighbours:
                self.attached[link.a.ifname] = b
            elif a in self.neighbours:
                self.attached[link.b.ifname] = a
        self.distances = {}
        self.known = {}

    def __call__(self, src, dst):
        if (src, dst) not in self.known:
            self.known[(src, dst)] = self._measure(src, dst)
        return self.known[(src, dst)]

    def _measure(self, src, dst):
        f = self.fabric
        nic = f.nics_of(src)[0]
        dst_nic = f.nic_on_rail(dst, nic.rail)
        if dst_nic is None:
            return 0.0
        ends = {self.attached[p] for p in dst_nic.ports if p in self.attached}
        lengths = []
        for port in nic.ports:
            if port not in self.attached:
                continue
            dist = self._from(self.attached[port])
            reach = [dist[e] for e in ends if e in dist]
            if reach:
                lengths.append(min(reach) + 1)  # the switches along, both ends included
        return sum(lengths) / len(lengths) if lengths else 0.0

    def _from(self, switch):
        if switch not in self.distances:
            dist, queue = {switch: 0}, deque([switch])
            while queue:
                here = queue.popleft()
                for nb in self.neighbours[here]:
                    if nb not in dist:
                        dist[nb] = dist[here] + 1
                        queue.append(nb)
            self.distances[switch] = dist
        return self.distances[switch]
