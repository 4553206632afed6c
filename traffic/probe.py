"""A constant-rate UDP probe: the longest gap in delivery is how long a
failure cut a path off, as a user of the fabric would see it.

    python -m traffic.probe recv --bind IP --port P --out FILE    (reads T from stdin)
    python -m traffic.probe send --src IP --dst IP --port P --sport BASE
                                 --rate PPS --flows N --start T --until T --out FILE

Times T are CLOCK_MONOTONIC seconds, which network namespaces share, so the
sender, the receiver and the drill's clock agree. The sender sends one
packet on each of `flows` UDP source ports every flows/rate seconds, each
port its own 5-tuple and so its own path through hashing hosts and
switches. It picks the ports among BASE..BASE+99 so that they take turns
over the NIC ports its kernel would send them by;
each packet carries its flow number, its sequence number in that flow and
when it was sent. The receiver prints "ready" once bound, then reads the
time to stop listening from its standard input (the runner knows it only
once every receiver is ready) and, at the end,
writes every arrival; the sender writes every send time. Both are run by
testbed/drill/probes.py; the gaps are computed by testbed/results/probe.py.
"""

import argparse
import json
import math
import socket
import struct
import sys
import time

from . import nic

HEADER = struct.Struct("!IId")  # flow, sequence number in the flow, send time
PAYLOAD = 64  # bytes of UDP payload: small, like a keepalive
SPORT_CANDIDATES = 100  # the flows' source ports are chosen among BASE..BASE+99
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # asm-generic/socket.h; also its cmsg type
TIMESPEC = struct.Struct("@qq")  # struct timespec on a 64-bit kernel


def receive(bind: str, port: int, out: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    # The kernel stamps each datagram as it reaches the socket: a receiver
    # waiting for a core must not stretch a gap the fabric did not make.
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((bind, port))
    print("ready", flush=True)
    until = float(sys.stdin.readline())
    arrivals = {}  # flow -> [[seq, arrival time], ...]
    cmsg_space = socket.CMSG_SPACE(TIMESPEC.size)
    while True:
        left = until - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(min(left, 0.5))
        try:
            data, ancillary, _flags, _addr = sock.recvmsg(2048, cmsg_space)
        except TimeoutError:
            continue
        if len(data) < HEADER.size:
            continue
        flow, seq, _sent = HEADER.unpack_from(data)
        arrivals.setdefault(flow, []).append([seq, round(arrival_time(ancillary), 6)])
    _write(out, {"arrivals": {str(k): v for k, v in sorted(arrivals.items())}})


def arrival_time(ancillary) -> float:
    """CLOCK_MONOTONIC time of the kernel's stamp (CLOCK_REALTIME) among a
    datagram's ancillary data; the time now when it carries none."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            # the two clocks read back to back: their offset moves only by
            # a slew of parts per million over a drill
            offset = time.clock_gettime(time.CLOCK_REALTIME) - time.monotonic()
            return sec + nsec * 1e-9 - offset
    return time.monotonic()


def spread_sports(oif_of: dict[int, int | None], flows: int) -> list[int]:
    """`flows` source ports out of `oif_of`'s candidates (in their order),
    taking turns among the NIC ports the kernel sends them out of, so that
    every port carries flows whatever the host's hash seed. Left to chance,
    all 8 flows of a dual-port host take one port about 1 time in 128, and
    a drill that fails the other port sees no flow cut. Candidates the
    kernel had no answer for (None) come last."""
    by_port: dict[int | None, list[int]] = {}
    for sport, oif in oif_of.items():
        by_port.setdefault(oif, []).append(sport)
    unrouted = by_port.pop(None, [])
    routed = list(by_port.values())
    chosen: list[int] = []
    while len(chosen) < flows and any(routed):
        for queue in routed:
            if queue and len(chosen) < flows:
                chosen.append(queue.pop(0))
    return chosen + unrouted[: flows - len(chosen)]


def pick_sports(src: str, dst: str, port: int, base: int, flows: int) -> list[int]:
    """The flows' source ports (see spread_sports); consecutive from `base`
    when the kernel cannot be asked."""
    try:
        oifs = nic.kernel_oifs(src, dst, port, socket.IPPROTO_UDP, range(base, base + SPORT_CANDIDATES))
    except OSError:
        return list(range(base, base + flows))
    return spread_sports(oifs, flows)


def send(
    src: str, dst: str, port: int, sport: int, rate: float, flows: int, start: float, until: float, out: str
) -> None:
    sports = pick_sports(src, dst, port, sport, flows)
    socks = []
    for i in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src, sports[i]))
        s.connect((dst, port))
        socks.append(s)
    sent = {i: [] for i in range(flows)}
    seq = [0] * flows
    pad = bytes(PAYLOAD - HEADER.size)
    # One packet of every flow at once, a round every flows/rate seconds:
    # each flow is probed as often as when they take turns, but a switch
    # reads a round's packets from a port in one go. Open vSwitch's
    # userspace datapath polls every port of every switch at each wakeup:
    # sent in turns, failover-probe's 2,000 probes/s alone kept its main
    # thread 70-79% busy on HPN-mini, in rounds 30-48%.
    period = flows / rate
    # Late to start (a slow interpreter): begin with the round due now
    # rather than sending the missed ones in a burst.
    k = max(0, math.ceil((time.monotonic() - start) / period))
    errors = 0
    while True:
        due = start + k * period
        if due >= until:
            break
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for flow in range(flows):
            now = time.monotonic()
            try:
                socks[flow].send(HEADER.pack(flow, seq[flow], now) + pad)
            except OSError:
                errors += 1  # e.g. no route for a moment: the gap shows it
            sent[flow].append(round(now, 6))
            seq[flow] += 1
        k += 1
    _write(out, {"sent": {str(k): v for k, v in sent.items()}, "send_errors": errors, "sports": sports})


def _write(path, doc):
    with open(path, "w") as fh:
        json.dump(doc, fh)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--out", required=True)
    s = sub.add_parser("send")
    for name in ("--src", "--dst", "--out"):
        s.add_argument(name, required=True)
    for name in ("--port", "--sport", "--rate", "--flows"):
        s.add_argument(name, type=int, required=True)
    s.add_argument("--start", type=float, required=True)
    s.add_argument("--until", type=float, required=True)
    args = ap.parse_args(argv)
    if args.mode == "recv":
        receive(args.bind, args.port, args.out)
    else:
        send(
            args.src, args.dst, args.port, args.sport, args.rate, args.flows, args.start, args.until, args.out
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
