"""A constant-rate UDP probe: the longest gap in delivery is how long a
failure cut a path off, as a user of the fabric would see it.

    python -m traffic.probe recv --bind IP --port P --out FILE    (reads T from stdin)
    python -m traffic.probe send --src IP --dst IP --port P --sport BASE
                                 --rate PPS --flows N --start T --until T --out FILE

Times T are CLOCK_MONOTONIC seconds, which network namespaces share, so the
sender, the receiver and the drill's clock agree. The sender spreads its
packets round-robin over `flows` UDP source ports (BASE, BASE+1, ...), each
its own 5-tuple and so its own path through hashing hosts and switches;
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

HEADER = struct.Struct("!IId")  # flow, sequence number in the flow, send time
PAYLOAD = 64  # bytes of UDP payload: small, like a keepalive


def receive(bind: str, port: int, out: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind((bind, port))
    print("ready", flush=True)
    until = float(sys.stdin.readline())
    arrivals = {}  # flow -> [[seq, arrival time], ...]
    buf = bytearray(2048)
    while True:
        left = until - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(min(left, 0.5))
        try:
            n = sock.recv_into(buf)
        except TimeoutError:
            continue
        now = time.monotonic()
        if n < HEADER.size:
            continue
        flow, seq, _sent = HEADER.unpack_from(buf)
        arrivals.setdefault(flow, []).append([seq, round(now, 6)])
    _write(out, {"arrivals": {str(k): v for k, v in sorted(arrivals.items())}})


def send(
    src: str, dst: str, port: int, sport: int, rate: float, flows: int, start: float, until: float, out: str
) -> None:
    socks = []
    for i in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src, sport + i))
        s.connect((dst, port))
        socks.append(s)
    sent = {i: [] for i in range(flows)}
    seq = [0] * flows
    pad = bytes(PAYLOAD - HEADER.size)
    # Late to start (a slow interpreter): begin with the packet due now
    # rather than sending the missed ones in a burst.
    k = max(0, math.ceil((time.monotonic() - start) * rate))
    errors = 0
    while True:
        due = start + k / rate
        if due >= until:
            break
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        flow = k % flows
        now = time.monotonic()
        try:
            socks[flow].send(HEADER.pack(flow, seq[flow], now) + pad)
        except OSError:
            errors += 1  # e.g. no route for a moment: the gap shows it
        sent[flow].append(round(now, 6))
        seq[flow] += 1
        k += 1
    _write(out, {"sent": {str(k): v for k, v in sent.items()}, "send_errors": errors})


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
