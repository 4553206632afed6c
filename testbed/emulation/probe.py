"""Reachability prober run inside one emulated host (stdlib only, so it
starts fast).

    python probe.py TIMEOUT IFNAME:DST_IP [IFNAME:DST_IP ...]

Sends ICMP echo requests out of a socket bound to IFNAME, one pair at a
time interleaved, resending to the pairs not yet answered after 100 ms,
then twice as long each round up to 1 s (a switch that is slow to handle
the first packets of a flow is not flooded with more), and listens on an
unbound socket:
the reply may come back over the other port of the NIC (the destination
hashes its own flows), which a `ping -I IFNAME` would never see.
Prints one JSON object: {"IFNAME:DST": rtt_ms or null}.
"""

import json
import os
import select
import socket
import struct
import sys
import time

ICMP_ECHO, ICMP_REPLY = 8, 0
RESEND_MAX_S = 1.0


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def echo(ident, seq):
    head = struct.pack("!BBHHH", ICMP_ECHO, 0, 0, ident, seq)
    payload = b"hpnlab-probe"
    return struct.pack("!BBHHH", ICMP_ECHO, 0, checksum(head + payload), ident, seq) + payload


def main(argv):
    timeout = float(argv[0])
    pairs = argv[1:]
    ident = os.getpid() & 0xFFFF
    rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    senders = {}
    for pair in pairs:
        ifname = pair.split(":", 1)[0]
        if ifname not in senders:
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
            senders[ifname] = s
    result = {p: None for p in pairs}
    sent_at = {}
    start = time.monotonic()
    next_round = start
    gap = 0.1  # seconds to the next round of resends, doubled up to RESEND_MAX_S
    while time.monotonic() - start < timeout and any(v is None for v in result.values()):
        now = time.monotonic()
        if now >= next_round:
            for seq, pair in enumerate(pairs):
                if result[pair] is None:
                    ifname, dst = pair.split(":", 1)
                    try:
                        senders[ifname].sendto(echo(ident, seq), (dst, 0))
                    except OSError:
                        pass  # e.g. port down: counts as unreachable unless a later try works
                    sent_at.setdefault(pair, now)
            next_round = now + gap
            gap = min(2 * gap, RESEND_MAX_S)
        ready, _, _ = select.select([rx], [], [], max(0.0, next_round - time.monotonic()))
        if ready:
            pkt = rx.recv(2048)
            ihl = (pkt[0] & 0x0F) * 4
            typ, _, _, rid, seq = struct.unpack("!BBHHH", pkt[ihl : ihl + 8])
            if typ == ICMP_REPLY and rid == ident and seq < len(pairs):
                pair = pairs[seq]
                if result[pair] is None:
                    result[pair] = round((time.monotonic() - sent_at[pair]) * 1e3, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
