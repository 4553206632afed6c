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
RTM_NEWQDISC = 36
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
IFLA_IFNAME, IFLA_GROUP = 3, 27
IFF_UP = 0x1
TCA_KIND, TCA_OPTIONS = 1, 2
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


def links_dump(seq: int = 0) -> bytes:
    """What `ip link show` sends: every interface of the namespace."""
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    return NLMSG.pack(NLMSG.size + len(body), RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def link_groups(replies: bytes, seq: int) -> tuple[dict[str, int], bool]:
    """The interfaces (name -> group) that the messages in `replies` answering
    request `seq` describe, and whether the dump's end was among them."""
    groups: dict[str, int] = {}
    at = 0
    while at + NLMSG.size <= len(replies):
        length, kind, _flags, msg_seq, _pid = NLMSG.unpack_from(replies, at)
        if length < NLMSG.size:
            break
        if msg_seq == seq:
            if kind == NLMSG_DONE:
                return groups, True
            if kind == NLMSG_ERROR:
                err = -struct.unpack_from("=i", replies, at + NLMSG.size)[0]
                raise OSError(err, f"listing the interfaces: {os.strerror(err)}")
            if kind == RTM_NEWLINK:
                name, group = _name_and_group(replies[at + NLMSG.size + IFINFOMSG.size : at + length])
                if name is not None:
                    groups[name] = group
        at += (length + 3) & ~3
    return groups, False


def _name_and_group(attrs: bytes) -> tuple[str | None, int]:
    name, group, at = None, 0, 0
    while at + RTA.size <= len(attrs):
        size, kind = RTA.unpack_from(attrs, at)
        if size < RTA.size:
            break
        value = attrs[at + RTA.size : at + size]
        if kind == IFLA_IFNAME:
            name = value.rstrip(b"\0").decode()
        elif kind == IFLA_GROUP:
            group = struct.unpack_from("=I", value)[0]
        at += (size + 3) & ~3
    return name, group


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


def route_socket() -> socket.socket:
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    nl.bind((0, 0))
    return nl


class Namespace:
    """A netlink socket into one network namespace and the indexes of its
    interfaces, read once (a fabric's interfaces stay while it runs)."""

    def __init__(self, netns: str | None):
        self.netns = netns
        self.sock, self.ifindex = in_namespace(
            netns, lambda: (route_socket(), {name: i for i, name in socket.if_nameindex()})
        )
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

    def groups(self) -> dict[str, int]:
        """Every interface of this namespace and its group."""
        self.seq += 1
        self.sock.send(links_dump(self.seq))
        found: dict[str, int] = {}
        while True:
            part, done = link_groups(self.sock.recv(1 << 20), self.seq)
            found.update(part)
            if done:
                return found

    def delete_group(self, group: int) -> None:
        """Delete every interface of group `group` in this namespace."""
        err = self.request(group_delete, group)
        if err:
            raise OSError(err, f"deleting the interfaces of group {group}: {os.strerror(err)}")

    def close(self) -> None:
        self.sock.close()
