"""Bulk TCP flows with iperf3 between emulated hosts (pure: plans, command
lines and the reading of iperf3's reports; testbed/drill/iperf.py runs them).

One iperf3 server per traffic entry, destination and rail, on its own
port, in the destination host (rail r: from the source's NIC r to the destination's
NIC r); the client opens `parallel` TCP streams (each a flow with its own
5-tuple, so the source NIC spreads them over its ports). Per-flow
throughput comes from the receiver's 0.1 s intervals.

A client's streams bind consecutive source ports, chosen so that the
source host's kernel spreads them evenly over its NIC's ports
(spread_cport), as HPN chooses source ports by where their hash leads.
Left to chance they are not: the kernel hashes each stream's 5-tuple onto
a port, so 8 streams over 2 ports all take one port once in 128
placements, and a drill that then pulls or replugs the other port's cable
measures nothing it meant to. An unbound socket is worse still: where
the kernel hashes a random source port at connect() (Linux 6.18 does),
it keeps that random port's path until its route is looked up again, at
the first link change, and only then follows its real 5-tuple's hash.
"""

from dataclasses import dataclass

from testbed.fabric.model import Fabric
from testbed.fabric.records import TrafficFlow

BASE_PORT = 5201
INTERVAL_S = 0.1
SHORTEST_INTERVAL = 0.75  # a receiver interval shorter than this share of INTERVAL_S joins the next
# Every flow's congestion control, whatever the machine's default: a host's
# namespace takes the machine's, and machines differ. Under BBR (the default
# of some kernels) flows whose degraded link was restored kept their old
# bandwidth estimate, and rate, for 3 s with an empty queue before them, in
# 3 runs of 10 of a drill (crossdc-degrade); under CUBIC, none. CUBIC is the
# kernel's own default, built into every kernel; a namespace may not make
# it its default where the machine only allows others, but root may choose
# it per connection, which iperf3 asks for.
TCP_CONGESTION = "cubic"
# Each pair of a host gets a window of source ports to start its streams
# in, below the kernel's ephemeral range (32768 up: iperf3's control
# connection takes one there), where nothing else of a host binds TCP.
CPORT_BASE = 20000
CPORT_WINDOW = 128  # 16 streams at most, so at least 113 starts to choose from
CPORT_END = 32768


@dataclass(frozen=True)
class PairSpec:
    src: str
    dst: str
    dst_ip: str
    parallel: int
    start: float
    port: int
    dscp: int = 0
    rail: int = 0
    first: int = 0  # its first flow's number: a later pair of the same src, dst and rail numbers on

    def flow_ids(self) -> list[str]:
        via = f"/r{self.rail}" if self.rail else ""
        return [f"{self.src}->{self.dst}{via}#{k}" for k in range(self.first, self.first + self.parallel)]


def plan_pairs(fabric: Fabric, traffic: list[TrafficFlow]) -> list[PairSpec]:
    """Scenario traffic entries -> PairSpecs (one per entry, destination and rail)."""
    pairs: list[PairSpec] = []
    # Two entries may join the same hosts (another DSCP, a later start):
    # their flows are numbered on, so that no flow's id names another's.
    flows_so_far: dict[tuple[str, str, int], int] = {}
    for entry in traffic:
        for rail in entry.rails_of(len(fabric.nics_of(entry.src))):
            for dst in entry.dst:
                dst_nic = fabric.nic_on_rail(dst, rail)
                assert dst_nic is not None  # every host of a fabric has one NIC per rail
                first = flows_so_far.get((entry.src, dst, rail), 0)
                flows_so_far[(entry.src, dst, rail)] = first + entry.parallel
                pairs.append(
                    PairSpec(
                        entry.src,
                        dst,
                        dst_nic.ip,
                        entry.parallel,
                        entry.start,
                        BASE_PORT + len(pairs),
                        entry.dscp,
                        rail,
                        first,
                    )
                )
    return pairs


def server_argv(pair: PairSpec) -> list[str]:
    """A one-shot server on the pair's port, reporting JSON every interval."""
    return ["iperf3", "-s", "-1", "-J", "-i", str(INTERVAL_S), "-p", str(pair.port)]


def cport_window(index: int) -> range | None:
    """The source ports the `index`-th pair of a host (counting from 0) may
    start its streams at; None past the last window."""
    start = CPORT_BASE + index * CPORT_WINDOW
    return range(start, start + CPORT_WINDOW) if start + CPORT_WINDOW <= CPORT_END else None


def spread_cport(oif_of: dict[int, int | None], parallel: int) -> int | None:
    """The first source port C (in `oif_of`'s order) such that the kernel
    sends C, C+1, ..., C+parallel-1 out of its ports as evenly as any run of
    the candidates does; `oif_of` is {source port: the interface the kernel
    chose for it (None: no answer)}. None when there is nothing to spread
    (one stream, or every candidate leaves by one port) or no run of
    candidates has an answer for each of its ports."""
    ports = {oif for oif in oif_of.values() if oif is not None}
    if parallel < 2 or len(ports) < 2:
        return None
    best, best_gap = None, None
    fair = 0 if parallel % len(ports) == 0 else 1  # the least gap a run can have
    for start in oif_of:
        run = [oif_of.get(start + k) for k in range(parallel)]
        if None in run:
            continue
        counts = [run.count(oif) for oif in ports]
        gap = max(counts) - min(counts)
        if best_gap is None or gap < best_gap:
            best, best_gap = start, gap
            if gap == fair:
                break
    return best


def client_argv(pair: PairSpec, duration: float, cport: int | None = None) -> list[str]:
    """The client of `pair`, sending until the drill's `duration` is over;
    its streams from source ports `cport`, `cport`+1, ... when given (else
    the kernel's ephemeral ones)."""
    length = max(1, int(round(duration - pair.start)))
    return (
        [
            "iperf3",
            "-c",
            pair.dst_ip,
            "-p",
            str(pair.port),
            "-t",
            str(length),
            "-P",
            str(pair.parallel),
            "-i",
            str(INTERVAL_S),
            "-J",
            "--connect-timeout",
            "3000",
            "-C",
            TCP_CONGESTION,
        ]
        + (["-S", str(pair.dscp << 2)] if pair.dscp else [])
        + (  # TOS byte: DSCP in its upper 6 bits
            ["--cport", str(cport)] if cport is not None else []
        )
    )


def receiver_series(report: dict | None, pair: PairSpec, offset: float) -> dict[str, list]:
    """{flow id: [(t_end, Mbit/s), ...]} from a server's JSON report, on the
    drill's clock (`offset`: when the client started). Streams beyond the
    pair's `parallel` are ignored; a missing report gives empty series."""
    ids = pair.flow_ids()
    flows: dict[str, list] = {fid: [] for fid in ids}
    short: dict[
        int, tuple[float, float]
    ] = {}  # stream -> (bytes, seconds) of intervals too short to stand alone
    for interval in (report or {}).get("intervals", []):
        for k, stream in enumerate(interval.get("streams", [])[: len(ids)]):
            if "bytes" not in stream or "seconds" not in stream:
                flows[ids[k]].append((offset + stream["end"], stream["bits_per_second"] / 1e6))
                continue
            # A server whose interval timer fired late reports, next, an
            # interval of a few milliseconds: its rate is a spike (one read
            # over a sliver of time) and its end falls in the bin of the
            # interval before. Its bytes join the next interval instead.
            nbytes, seconds = short.pop(k, (0.0, 0.0))
            nbytes, seconds = nbytes + stream["bytes"], seconds + stream["seconds"]
            if seconds < SHORTEST_INTERVAL * INTERVAL_S:
                short[k] = (nbytes, seconds)
                continue
            flows[ids[k]].append((offset + stream["end"], nbytes * 8 / seconds / 1e6))
    return flows
