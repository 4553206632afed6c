"""Reachability prober run inside one emulated host (stdlib only, so it
starts fast).

    python probe.py TIMEOUT WINDOW IFNAME:DST_IP [IFNAME:DST_IP ...]

Sends ICMP echo requests out of a socket bound to IFNAME and listens on an
unbound socket: the reply may come back over the other port of the NIC (the
destination hashes its own flows), which a `ping -I IFNAME` would never see.
Prints one JSON object: {"IFNAME:DST": rtt_ms or null}, the time from the
pair's first request to its first reply.

At most WINDOW pairs are in flight at once. Every host of a fabric probes
at the same time, and a large fabric's switches forward only so many
packets a second: offered all pairs at once, with resends on top, they
drop most of them and answer fewer pairs than they would at their own pace
(a 128-host fabric left 20,584 of its 32,512 pairs unanswered in a 5 s
check that way, against 5,020-5,974 windowed).
A pair is resent when its wait outlasts a few round trips (measured; from
100 ms at first, backing off, at most a second apart); a pair still unanswered after
TIMEOUT s of tries is unreachable. A pair overdue (unanswered for several
round trips) no longer holds its place in the window, so dead destinations
do not stop the others from being tried; and when nothing at all has
answered for TIMEOUT s, every pair not yet tried is sent at once and gets
its TIMEOUT s, so a fabric that answers nothing is judged in twice that.
"""

import json
import os
import select
import socket
import struct
import sys
import time

ICMP_ECHO, ICMP_REPLY = 8, 0
SOL_RAW, ICMP_FILTER = 255, 1  # linux/icmp.h: a mask of ICMP types the socket drops
SO_RCVBUFFORCE = 33  # past rmem_max (the probers run as root)
RCVBUF = 4 << 20
PAYLOAD = b"hpnlab-probe"
RESEND_MIN_S = 0.1
RESEND_MAX_S = 1.0
OVERDUE_MIN_S = 1.0
OVERDUE_MAX_S = 5.0


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def echo(ident, seq, attempt=1):
    """An echo request for pair `seq`; the payload names the attempt (a
    reply echoes it), so that the round trip of a resent pair is measured
    from the request it answers."""
    payload = PAYLOAD + struct.pack("!H", attempt & 0xFFFF)
    head = struct.pack("!BBHHH", ICMP_ECHO, 0, 0, ident, seq)
    return struct.pack("!BBHHH", ICMP_ECHO, 0, checksum(head + payload), ident, seq) + payload


def attempt_of(icmp):
    """The attempt an echo reply (its ICMP bytes) answers, or None."""
    tail = icmp[8:]
    if len(tail) != len(PAYLOAD) + 2 or not tail.startswith(PAYLOAD):
        return None
    return struct.unpack("!H", tail[len(PAYLOAD) :])[0]


class Schedule:
    """Which pairs to send when (pure: the caller passes the clock).

    Pairs are indexed 0..n-1. `due(now)` is what to send now; `answered(i,
    now)` records a reply; `finished(now)` says whether every pair is
    answered or given up; `result()` is {index: rtt_s or None}."""

    def __init__(self, n, timeout, window, start):
        self.n, self.timeout, self.window = n, timeout, max(1, window)
        self.next_new = 0  # pairs below this have been sent at least once
        self.sent = {}  # index -> the send time of each attempt (the first: when it began)
        self.rtt = {}  # index -> seconds from first send to first reply
        self.given_up = set()
        self.srtt = None  # smoothed round trip of answered requests
        self.last_answer = start

    def _resend_after(self, tries):
        # never more than a second between tries: a round trip swollen by
        # slow first answers (each waits for its address to be resolved)
        # must not leave a pair only a few tries in its whole time
        base = RESEND_MIN_S if self.srtt is None else max(RESEND_MIN_S, 3 * self.srtt)
        return min(base * 2 ** (tries - 1), RESEND_MAX_S)

    def _overdue_after(self):
        if self.srtt is None:
            return OVERDUE_MIN_S
        return min(max(OVERDUE_MIN_S, 8 * self.srtt), OVERDUE_MAX_S)

    def _open(self):
        return [i for i in self.sent if i not in self.rtt and i not in self.given_up]

    def _expire(self, now):
        if now - self.last_answer >= self.timeout:
            # Nothing has answered for that long: the window no longer holds
            # back the pairs not yet tried (a fabric that answers nothing
            # ends one timeout later, not one per window of pairs; a block
            # of dead pairs ahead of live ones does not hide the live ones)
            self.window = self.n
        for i in self._open():
            if now - self.sent[i][0] >= self.timeout:
                self.given_up.add(i)

    def due(self, now):
        self._expire(now)
        out = []
        open_ = self._open()
        for i in open_:
            if now - self.sent[i][-1] >= self._resend_after(len(self.sent[i])):
                out.append(i)
        overdue = self._overdue_after()
        in_flight = sum(1 for i in open_ if now - self.sent[i][0] < overdue)
        while self.next_new < self.n and in_flight < self.window:
            i = self.next_new
            self.next_new += 1
            self.sent[i] = []
            out.append(i)
            in_flight += 1
        for i in out:
            self.sent[i].append(now)
        return out

    def attempt(self, i):
        """The number the last request sent for pair i carries (1, 2, ...)."""
        return len(self.sent[i])

    def answered(self, i, now, attempt=None):
        """A reply to pair i, answering its request number `attempt` (None:
        not known, then the round trip estimate is left as it is)."""
        if i in self.rtt or i not in self.sent or i in self.given_up:
            return
        self.rtt[i] = now - self.sent[i][0]
        self.last_answer = now
        if attempt is not None and 1 <= attempt <= len(self.sent[i]):
            sample = now - self.sent[i][attempt - 1]
            self.srtt = sample if self.srtt is None else 0.875 * self.srtt + 0.125 * sample

    def finished(self, now):
        self._expire(now)
        return len(self.rtt) + len(self.given_up) >= self.n

    def result(self):
        return {i: self.rtt.get(i) for i in range(self.n)}


def main(argv):
    timeout, window = float(argv[0]), int(argv[1])
    pairs = argv[2:]
    ident = os.getpid() & 0xFFFF
    rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    # A raw ICMP socket gets a copy of every ICMP packet the host receives,
    # the other hosts' requests too (254 of them at 128 hosts): keep only
    # echo replies, and room for a burst of them while this prober waits
    # for a core.
    rx.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("I", ~(1 << ICMP_REPLY) & 0xFFFFFFFF))
    try:
        rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except OSError:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    senders = {}
    for pair in pairs:
        ifname = pair.split(":", 1)[0]
        if ifname not in senders:
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
            # it only sends: let it queue none of the ICMP the host receives
            s.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("I", 0xFFFFFFFF))
            senders[ifname] = s
    sched = Schedule(len(pairs), timeout, window, time.monotonic())
    while True:
        now = time.monotonic()
        if sched.finished(now):
            break
        for seq in sched.due(now):
            ifname, dst = pairs[seq].split(":", 1)
            try:
                senders[ifname].sendto(echo(ident, seq, sched.attempt(seq)), (dst, 0))
            except OSError:
                pass  # e.g. port down: counts as unreachable unless a later try works
        # a reply refills the window at once; resends and give-ups are due
        # on the resend floor's beat at the latest
        ready, _, _ = select.select([rx], [], [], RESEND_MIN_S)
        while ready:
            pkt = rx.recv(2048)
            ihl = (pkt[0] & 0x0F) * 4
            typ, _, _, rid, seq = struct.unpack("!BBHHH", pkt[ihl : ihl + 8])
            if typ == ICMP_REPLY and rid == ident and seq < len(pairs):
                sched.answered(seq, time.monotonic(), attempt_of(pkt[ihl:]))
            ready, _, _ = select.select([rx], [], [], 0)
    rtt = sched.result()
    print(json.dumps({p: None if rtt[i] is None else round(rtt[i] * 1e3, 2) for i, p in enumerate(pairs)}))


if __name__ == "__main__":
    main(sys.argv[1:])
