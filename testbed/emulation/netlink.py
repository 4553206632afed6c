"""Speaking rtnetlink to a network namespace's kernel directly: messages
built here (pure), sent on a socket made inside the namespace (the shim
at the end). No process is started, so nothing waits for a fork: the
pause daemon changes a class's rate this way, and the hosts' routes change
this way after a fault, where every millisecond lengthens the outage the
probes measure (starting `ip` in seven hosts took 20 ms on a quiet
machine, and more than twice that on a busy one); and a drill's faults
pull their cables this way, so that the links of a switch that fails go
down together rather than one `ip` start apart (4-15 ms each)."""

import ctypes
import ctypes.util
import errno
import os
import socket
import struct
import threading

NLMSG = struct.Struct("=IHHII")  # struct nlmsghdr
RTA = struct.Struct("=HH")  # struct rtattr
RTMSG = struct.Struct("=BBBBBBBBI")  # struct rtmsg
RTNEXTHOP = struct.Struct("=HBBi")  # struct rtnexthop

TCMSG = struct.Struct("=BBHiIII")  # struct tcmsg
IFINFOMSG = struct.Struct("=BxHiII")  # struct ifinfomsg

NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x400
NLM_F_DUMP = 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
IFLA_IFNAME, IFLA_GROUP = 3, 27
IFF_UP = 0x1
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3  # inside TCA_STATS2
GNET_BASIC = struct.Struct("=Q")  # struct gnet_stats_basic: bytes (then packets)
GNET_QUEUE = struct.Struct("=IIIII")  # struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits
TC_H_ROOT = 0xFFFFFFFF
RTM_NEWROUTE, RTM_DELROUTE = 24, 25
RTA_DST, RTA_MULTIPATH = 1, 9
RT_TABLE_MAIN, RTPROT_BOOT = 254, 3
RT_SCOPE_UNIVERSE, RT_SCOPE_NOWHERE = 0, 255
RTN_UNSPEC, RTN_UNICAST = 0, 1
CLONE_NEWNET = 0x40000000


# --- messages (pure) -----------------------------------------------------------


def attr(kind: int, payload: bytes) -> bytes:
    size = RTA.size + len(payload)
    return RTA.pack(size, kind) + payload + bytes(-size % 4)


def message(kind: int, flags: int, body: bytes, seq: int = 0) -> bytes:
    """One request: the header, asking for an ack, before `body`."""
    return NLMSG.pack(NLMSG.size + len(body), kind, NLM_F_REQUEST | NLM_F_ACK | flags, seq, 0) + body


def ack_error(reply: bytes) -> int:
    """The errno of a netlink ack (0: done)."""
    _len, kind, _flags, _seq, _pid = NLMSG.unpack_from(reply)
    if kind != NLMSG_ERROR:
        return 0
    return -struct.unpack_from("=i", reply, NLMSG.size)[0]


def route_replace(ip: str, ifindexes: list[int], seq: int = 0) -> bytes:
    """What `ip route replace IP/32 nexthop dev A nexthop dev B ...` sends:
    a /32 in the main table spread over the ports with these indexes."""
    hops = b"".join(RTNEXTHOP.pack(RTNEXTHOP.size, 0, 0, i) for i in ifindexes)
    body = (
        RTMSG.pack(socket.AF_INET, 32, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0)
        + attr(RTA_DST, socket.inet_aton(ip))
        + attr(RTA_MULTIPATH, hops)
    )
    return message(RTM_NEWROUTE, NLM_F_REPLACE | NLM_F_CREATE, body, seq)


def route_delete(ip: str, seq: int = 0) -> bytes:
    """What `ip route del IP/32` sends: the main table's /32, whatever its
    next hops (scope nowhere and no protocol or type match any)."""
    body = RTMSG.pack(socket.AF_INET, 32, 0, 0, RT_TABLE_MAIN, 0, RT_SCOPE_NOWHERE, RTN_UNSPEC, 0) + attr(
        RTA_DST, socket.inet_aton(ip)
    )
    return message(RTM_DELROUTE, 0, body, seq)


def link_up(ifindex: int, up: bool, seq: int = 0) -> bytes:
    """What `ip link set dev X up|down` sends: the interface's IFF_UP flag,
    and no other, set or cleared."""
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, ifindex, IFF_UP if up else 0, IFF_UP)
    return message(RTM_NEWLINK, 0, body, seq)


def link_group(ifindex: int, group: int, seq: int = 0) -> bytes:
    """What `ip link set dev X group G` sends."""
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, ifindex, 0, 0) + attr(IFLA_GROUP, struct.pack("=I", group))
    return message(RTM_NEWLINK, 0, body, seq)


def group_delete(group: int, seq: int = 0) -> bytes:
    """What `ip link del group G` sends: every interface of the group is
    unregistered at once, so the kernel waits for its read-side critical
    sections (RCU) once for all of them rather than once each."""
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + attr(IFLA_GROUP, struct.pack("=I", group))
    return message(RTM_DELLINK, 0, body, seq)


def dump_request(kind: int, body: bytes, seq: int = 0) -> bytes:
    """A request for every object of a kind (no ack: the dump ends with DONE)."""
    return NLMSG.pack(NLMSG.size + len(body), kind, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def links_dump(seq: int = 0) -> bytes:
    """What `ip link show` sends: every interface of the namespace."""
    return dump_request(RTM_GETLINK, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0), seq)


def qdiscs_dump(seq: int = 0) -> bytes:
    """What `tc -s qdisc show` sends: every qdisc of the namespace, with its counters."""
    return dump_request(RTM_GETQDISC, TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0), seq)


def dump_bodies(replies: bytes, seq: int, kind: int, what: str) -> tuple[list[bytes], bool]:
    """The bodies of the messages of `kind` in `replies` that answer request
    `seq`, and whether the dump's end was among them; OSError naming `what`
    when the kernel refused the dump."""
    bodies: list[bytes] = []
    at = 0
    while at + NLMSG.size <= len(replies):
        length, msg_kind, _flags, msg_seq, _pid = NLMSG.unpack_from(replies, at)
        if length < NLMSG.size:
            break
        if msg_seq == seq:
            if msg_kind == NLMSG_DONE:
                return bodies, True
            if msg_kind == NLMSG_ERROR:
                err = -struct.unpack_from("=i", replies, at + NLMSG.size)[0]
                raise OSError(err, f"{what}: {os.strerror(err)}")
            if msg_kind == kind:
                bodies.append(replies[at + NLMSG.size : at + length])
        at += (length + 3) & ~3
    return bodies, False


def attributes(buf: bytes) -> dict[int, bytes]:
    """{attribute type: payload} of the attributes packed in `buf`."""
    found, at = {}, 0
    while at + RTA.size <= len(buf):
        size, kind = RTA.unpack_from(buf, at)
        if size < RTA.size:
            break
        found[kind & 0x3FFF] = buf[at + RTA.size : at + size]  # without the nested/byte-order flags
        at += (size + 3) & ~3
    return found


def link_groups(replies: bytes, seq: int) -> tuple[dict[str, int], bool]:
    """The interfaces (name -> group) that the messages in `replies` answering
    request `seq` describe, and whether the dump's end was among them."""
    bodies, done = dump_bodies(replies, seq, RTM_NEWLINK, "listing the interfaces")
    groups: dict[str, int] = {}
    for body in bodies:
        found = attributes(body[IFINFOMSG.size :])
        if IFLA_IFNAME in found:
            group = found.get(IFLA_GROUP)
            groups[found[IFLA_IFNAME].rstrip(b"\0").decode()] = (
                struct.unpack_from("=I", group)[0] if group else 0
            )
    return groups, done


def root_qdisc_counters(
    replies: bytes, seq: int, kind: bytes
) -> tuple[dict[int, tuple[int, int, int]], bool]:
    """{interface index: (bytes sent, backlog bytes, drops)} of every root
    qdisc of `kind` (b"htb") in `replies` answering request `seq`, read as
    `tc -s qdisc show` reads them; and whether the dump's end was among them."""
    bodies, done = dump_bodies(replies, seq, RTM_NEWQDISC, "listing the qdiscs")
    counters: dict[int, tuple[int, int, int]] = {}
    for body in bodies:
        _family, _pad1, _pad2, ifindex, _handle, parent, _info = TCMSG.unpack_from(body)
        found = attributes(body[TCMSG.size :])
        if parent != TC_H_ROOT or found.get(TCA_KIND, b"").rstrip(b"\0") != kind:
            continue
        stats = attributes(found.get(TCA_STATS2, b""))
        basic, queue = stats.get(TCA_STATS_BASIC, b""), stats.get(TCA_STATS_QUEUE, b"")
        sent = GNET_BASIC.unpack_from(basic)[0] if len(basic) >= GNET_BASIC.size else 0
        backlog, drops = GNET_QUEUE.unpack_from(queue)[1:3] if len(queue) >= GNET_QUEUE.size else (0, 0)
        counters[ifindex] = (sent, backlog, drops)
    return counters, done


# --- on the machine --------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def in_namespace(netns: str | None, make):
    """`make()` called inside the network namespace `netns` (a path; None:
    this one), in a thread of its own: entering a namespace moves only the
    calling thread, and the caller's threads stay where they are. What it
    returns (sockets keep the namespace they were made in) comes back."""
    out: dict = {}

    def enter():
        try:
            if netns is None:
                out["value"] = make()
                return
            target = os.open(netns, os.O_RDONLY)
            try:
                setns(target)
            finally:
                os.close(target)
            out["value"] = make()
        except BaseException as e:  # raised again in the caller
            out["error"] = e

    worker = threading.Thread(target=enter, name="netns")
    worker.start()
    worker.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _indexes() -> dict[str, int]:
    """{interface name: index} of the calling thread's namespace."""
    return {name: i for i, name in socket.if_nameindex()}


def route_socket() -> socket.socket:
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    nl.bind((0, 0))
    return nl


class Namespace:
    """A netlink socket into one network namespace and the indexes of its
    interfaces, read once (a fabric's interfaces stay while it runs)."""

    def __init__(self, netns: str | None):
        self.netns = netns
        self.sock, self.ifindex = in_namespace(netns, lambda: (route_socket(), _indexes()))
        self.seq = 0

    def request(self, build, *args) -> int:
        """Send the message `build(*args, seq=...)` makes; its ack's errno."""
        self.seq += 1
        self.sock.send(build(*args, seq=self.seq))
        while True:  # the socket lives as long as the fabric: an ack left
            reply = self.sock.recv(65536)  # by a request cut short is skipped
            if NLMSG.unpack_from(reply)[3] == self.seq:
                return ack_error(reply)

    def set_up(self, ifname: str, up: bool) -> None:
        """Set interface `ifname` of this namespace up or down; OSError
        naming it when the kernel refuses or it is not there."""
        what = f"setting {ifname} {'up' if up else 'down'}"
        err = self.request(link_up, self._index(ifname, what), up)
        if err:
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def set_group(self, ifname: str, group: int) -> None:
        """Put interface `ifname` of this namespace in interface group `group`."""
        what = f"putting {ifname} in group {group}"
        err = self.request(link_group, self._index(ifname, what), group)
        if err:
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def _index(self, ifname: str, what: str) -> int:
        index = self.ifindex.get(ifname)
        if index is None:  # made after the namespace was opened
            try:
                index = self.ifindex[ifname] = in_namespace(self.netns, lambda: socket.if_nametoindex(ifname))
            except OSError:
                raise OSError(errno.ENODEV, f"{what}: no such interface") from None
        return index

    def dump(self, request, parse) -> dict:
        """Send the dump `request(seq=...)` makes and gather what `parse(replies,
        seq)` finds in its answers, up to the dump's end."""
        self.seq += 1
        self.sock.send(request(seq=self.seq))
        found: dict = {}
        while True:
            part, done = parse(self.sock.recv(1 << 20), self.seq)
            found.update(part)
            if done:
                return found

    def groups(self) -> dict[str, int]:
        """Every interface of this namespace and its group."""
        return self.dump(links_dump, link_groups)

    def root_qdisc_counters(self, kind: bytes = b"htb") -> dict[str, tuple[int, int, int]]:
        """{interface name: (bytes sent, backlog bytes, drops)} of every root
        qdisc of `kind` in this namespace: one dump, no process started."""
        by_index = self.dump(qdiscs_dump, lambda replies, seq: root_qdisc_counters(replies, seq, kind))
        if not set(by_index) <= set(
            self.ifindex.values()
        ):  # an interface made after the namespace was opened
            self.ifindex = in_namespace(self.netns, _indexes)
        names = {i: name for name, i in self.ifindex.items()}
        return {names[i]: counts for i, counts in by_index.items() if i in names}

    def delete_group(self, group: int) -> None:
        """Delete every interface of group `group` in this namespace."""
        err = self.request(group_delete, group)
        if err:
            raise OSError(err, f"deleting the interfaces of group {group}: {os.strerror(err)}")

    def close(self) -> None:
        self.sock.close()
