"""The host's NIC as the traffic agent drives it: one raw socket per port,
paced at the port's line rate, and the kernel's choice of port for a flow."""

import fcntl
import socket
import struct
import sys
import termios
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import roce, transport

if TYPE_CHECKING:
    from .cframes import CSend
    from .transfers import OutFlow

PORT_BURST = 4  # frames of catch-up credit of a paced (below line rate) flow


RTM_NEWROUTE, RTM_GETROUTE, NLMSG_ERROR = 24, 26, 2
NLM_F_REQUEST = 1
RTA_DST, RTA_SRC, RTA_OIF, RTA_MULTIPATH, RTA_IP_PROTO, RTA_SPORT, RTA_DPORT = 1, 2, 4, 9, 27, 28, 29
RTM_F_FIB_MATCH = 0x2000  # answer with the route entry itself, every next hop in it
RTNH_F_DEAD, RTNH_F_LINKDOWN = 0x1, 0x10
RTMGRP_LINK, RTMGRP_IPV4_ROUTE = 0x1, 0x40
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_RTMSG = struct.Struct(
    "=BBBBBBBBI"
)  # family, dst/src prefix lengths, tos, table, protocol, scope, type, flags
_RTA = struct.Struct("=HH")
_RTNH = struct.Struct("=HBBi")  # length, flags, hops, interface index


def _attr(kind: int, payload: bytes) -> bytes:
    size = _RTA.size + len(payload)
    return _RTA.pack(size, kind) + payload + bytes(-size % 4)


def route_request(
    seq: int, src_ip: str, dst_ip: str, sport: int, dport: int, proto: int, flags: int = 0
) -> bytes:
    """An RTM_GETROUTE message asking which way the kernel sends one 5-tuple
    (what `ip route get ... sport S dport D ipproto udp` asks); with
    RTM_F_FIB_MATCH in `flags`, which route entry it uses (`ip route get
    fibmatch`)."""
    body = (
        _RTMSG.pack(socket.AF_INET, 32, 32, 0, 0, 0, 0, 0, flags)
        + _attr(RTA_DST, socket.inet_aton(dst_ip))
        + _attr(RTA_SRC, socket.inet_aton(src_ip))
        + _attr(RTA_IP_PROTO, bytes((proto,)))
        + _attr(RTA_SPORT, sport.to_bytes(2, "big"))
        + _attr(RTA_DPORT, dport.to_bytes(2, "big"))
    )
    return _NLMSG.pack(_NLMSG.size + len(body), RTM_GETROUTE, NLM_F_REQUEST, seq, 0) + body


def _route_attrs(reply: bytes) -> tuple[int, list[tuple[int, bytes]]] | None:
    """(rtm_flags, [(attribute type, payload)]) of an RTM_NEWROUTE reply;
    None for anything else (an error reply: no route)."""
    length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(reply)
    if kind != RTM_NEWROUTE:
        return None
    rtm_flags = _RTMSG.unpack_from(reply, _NLMSG.size)[-1]
    attrs, off = [], _NLMSG.size + _RTMSG.size
    while off + _RTA.size <= min(length, len(reply)):
        size, attr = _RTA.unpack_from(reply, off)
        if size < _RTA.size:
            break
        attrs.append((attr, reply[off + _RTA.size : off + size]))
        off += (size + 3) & ~3
    return rtm_flags, attrs


def route_oif(reply: bytes) -> int | None:
    """The output interface index in an RTM_NEWROUTE reply; None for an
    error reply (no route) or a reply without one."""
    parsed = _route_attrs(reply)
    for attr, payload in parsed[1] if parsed else ():
        if attr == RTA_OIF:
            return int.from_bytes(payload[:4], sys.byteorder)
    return None


def route_live_oifs(reply: bytes) -> set[int]:
    """The interface indexes of the next hops a route entry (a fibmatch
    reply) may use now: dead and link-down ones left out (the hosts ignore
    routes whose link is down). Empty for an error reply."""
    parsed = _route_attrs(reply)
    if parsed is None:
        return set()
    rtm_flags, attrs = parsed
    live = set()
    for attr, payload in attrs:
        if attr == RTA_OIF and not rtm_flags & (RTNH_F_DEAD | RTNH_F_LINKDOWN):
            live.add(int.from_bytes(payload[:4], sys.byteorder))
        elif attr == RTA_MULTIPATH:  # one rtnexthop (and its own attributes) per hop
            off = 0
            while off + _RTNH.size <= len(payload):
                nh_len, nh_flags, _hops, oif = _RTNH.unpack_from(payload, off)
                if nh_len < _RTNH.size:
                    break
                if not nh_flags & (RTNH_F_DEAD | RTNH_F_LINKDOWN):
                    live.add(oif)
                off += (nh_len + 3) & ~3
    return live


def ask_route(query: socket.socket, request: bytes, seq: int) -> bytes | None:
    """Send one route query on a bound NETLINK_ROUTE socket, return the reply
    numbered `seq` (None when netlink fails)."""
    try:
        query.send(request)
        while True:
            reply = query.recv(65536)
            if _NLMSG.unpack_from(reply)[3] == seq:
                return reply
    except OSError:
        return None


def kernel_oifs(
    src_ip: str, dst_ip: str, dport: int, proto: int, sports: Iterable[int]
) -> dict[int, int | None]:
    """{source port: the interface index the kernel sends that 5-tuple out
    of (None: no route)}, asked of this network namespace's routes."""
    out: dict[int, int | None] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as query:
        query.bind((0, 0))
        for seq, sport in enumerate(sports, 1):
            reply = ask_route(query, route_request(seq, src_ip, dst_ip, sport, dport, proto), seq)
            out[sport] = None if reply is None else route_oif(reply)
    return out


class PortPicker:
    """Which NIC port a flow leaves by: the kernel's multipath choice for
    its 5-tuple (fib_multipath_hash_policy=1), or a pinned port while the
    route may use it.

    Answers are cached: the kernel's choice changes only when a link or a
    route does, and the picker listens for exactly those netlink events
    (`events`, a socket for select()); `changed()` drains them and drops
    the cache, so a failed port is left as soon as the kernel knows."""

    def __init__(self, ports: Iterable[str]) -> None:
        self.ports = list(ports)
        # interface index -> port name (None, no interface, is never a key)
        self.index: dict[int | None, str] = {socket.if_nametoindex(p): p for p in self.ports}
        self.query = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.query.bind((0, 0))
        self.events = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.events.bind((0, RTMGRP_LINK | RTMGRP_IPV4_ROUTE))
        self.events.setblocking(False)
        # (peer ip, source port) -> port name or None; (peer ip, None) -> live ports
        self.cache: dict[tuple[str, int | None], Any] = {}
        self.seq = 0
        self.lookups = 0

    def pick(self, src_ip: str, dst_ip: str, sport: int, pinned: int | None = None) -> str | None:
        """The port for a flow. A pinned port is a preference: kept while
        the route to the peer may use it, given up for the kernel's own
        choice once that port's link is down or an override leaves it out
        (the controller placed the flow there while the path was whole)."""
        if pinned is not None:
            if (dst_ip, None) not in self.cache:
                self.cache[(dst_ip, None)] = self._live(src_ip, dst_ip)
            if self.ports[pinned] in self.cache[(dst_ip, None)]:
                return self.ports[pinned]
        key = (dst_ip, sport)
        if key not in self.cache:
            self.cache[key] = self._lookup(src_ip, dst_ip, sport)
        return self.cache[key]

    def _ask(self, request: bytes) -> bytes | None:
        self.lookups += 1
        return ask_route(self.query, request, self.seq)

    def _lookup(self, src_ip: str, dst_ip: str, sport: int) -> str | None:
        self.seq += 1
        reply = self._ask(route_request(self.seq, src_ip, dst_ip, sport, roce.ROCE_PORT, 17))
        oif = None if reply is None else route_oif(reply)
        return self.index.get(oif)  # None: no route right now (every port down), or not ours

    def _live(self, src_ip: str, dst_ip: str) -> set[str]:
        """Our ports the route entry to `dst_ip` may use now."""
        self.seq += 1
        reply = self._ask(route_request(self.seq, src_ip, dst_ip, 0, roce.ROCE_PORT, 17, RTM_F_FIB_MATCH))
        oifs = set() if reply is None else route_live_oifs(reply)
        return {self.index[o] for o in oifs if o in self.index}

    def changed(self) -> bool:
        """True if a link or route changed since the last call (cache dropped)."""
        seen = False
        while True:
            try:
                self.events.recv(65536)
                seen = True
            except BlockingIOError:
                break
            except OSError:  # the event queue overflowed: assume anything changed
                seen = True
        if seen:
            self.cache.clear()
        return seen

    def close(self) -> None:
        self.query.close()
        self.events.close()


class Port:
    """One NIC port: a data socket the kernel paces and a control socket.

    The host port's HTB shapes at line rate, and frames waiting in it stay
    charged to the socket that sent them. So a non-blocking data socket
    whose send buffer holds about `queue_frames` frames is paced by the
    kernel: a send fails with EAGAIN once the shaper is that far behind,
    and select() says when there is room again. No user-space timer runs
    per packet, and a wake-up queues several frames. Control frames (ACKs,
    NAKs, CNPs) go through a second socket with the default buffer, so a
    full data queue never refuses them; they still wait in the same HTB
    queue behind the data, as on a NIC port.
    """

    def __init__(
        self, ifname: str, rate_bps: float, frame_bytes: int, queue_frames: int, max_gap_s: float
    ) -> None:
        self.ifname = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.sock.bind((ifname, 0))
        # The kernel doubles the value and charges each frame its buffer's
        # true size (about twice a 4 KB frame), so ask for frames x bytes.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, queue_frames * frame_bytes)
        self.sock.setblocking(False)
        self.ctrl = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.ctrl.bind((ifname, 0))
        self.ctrl.setblocking(False)
        self.meter = transport.LineMeter(rate_bps, max_gap_s)
        self.flows: list[OutFlow] = []
        self.rr = 0
        self.errors = 0
        self.ctrl_dropped = 0
        self.blocked = False  # the kernel queue is full: wait for select() to say writable
        self.backlogged = False  # frames were ready when the last send attempt stopped

    def send_run(
        self, make: Callable[[int], bytes | bytearray], first: int, count: int, now: float
    ) -> tuple[int, int, bool | None]:
        """Queue the frames make(first) .. make(first + count - 1), in order,
        while the kernel takes them: one call per run of frames, not per
        frame, since the agent's CPU per frame is what limits a fabric.
        Returns (frames queued, their bytes, the last attempt's outcome):
        True, all queued; False, the queue is full (wait until writable);
        None, the port refused a frame (down): the flow moves at its next
        route refresh."""
        send = self.sock.send
        check = self.backlogged and self.meter.idle_since(now)
        sent = nbytes = 0
        outcome: bool | None = True
        for psn in range(first, first + count):
            frame = make(psn)
            try:
                send(frame)
            except BlockingIOError:
                outcome = False
                break
            except OSError:
                outcome = None
                break
            if check:
                self._check_drained(now)
                check = False
            sent += 1
            nbytes += len(frame)
        return self._ran(sent, nbytes, outcome, now)

    def send_native(
        self, native: "CSend", first: int, count: int, now: float
    ) -> tuple[int, int, bool | None]:
        """send_run for frames the C library patches and sends (all of one
        length: a transfer's middle frames), one call for the run."""
        fd = self.sock.fileno()
        sent = 0
        outcome: bool | None = True
        if self.backlogged and self.meter.idle_since(now):
            sent, outcome, _err = native.send(fd, first, 1)  # the first alone: see _check_drained
            if sent:
                self._check_drained(now)
        if outcome is True and count > sent:
            more, outcome, _err = native.send(fd, first + sent, count - sent)
            sent += more
        return self._ran(sent, sent * native.len, outcome, now)

    def _check_drained(self, now: float) -> None:
        """The run's first frame is queued after a gap: before that gap is
        put down to the agent's lateness, ask the kernel whether its queue
        had really run dry (one system call, only then)."""
        if self.queued_bytes() > 0:
            self.meter.still_queued(now)

    def _ran(self, sent: int, nbytes: int, outcome: bool | None, now: float) -> tuple[int, int, bool | None]:
        if sent:
            self.meter.sent(nbytes, now, self.backlogged, frames=sent)
        if outcome is False:
            self.blocked = self.backlogged = True
        elif outcome is None:  # the port refused a frame
            self.errors += 1
            self.backlogged = False
        return sent, nbytes, outcome

    def queued_bytes(self) -> int:
        """What the kernel still holds of this socket's frames (SIOCOUTQ)."""
        return struct.unpack("i", fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]

    def send_ctrl(self, frame: bytes | bytearray) -> bool:
        try:
            self.ctrl.send(frame)
            return True
        except OSError:
            self.ctrl_dropped += 1  # go-back-N repairs a lost ACK; a lost CNP is only late
            return False

    def close(self) -> None:
        self.sock.close()
        self.ctrl.close()
