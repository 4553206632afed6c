"""The rtnetlink messages the hosts' reroutes send (pure): each field
where the kernel reads it."""

import socket
import struct

import pytest

from testbed.emulation import netlink


def attributes(msg, off):
    found = {}
    while off < len(msg):
        size, kind = struct.unpack_from("=HH", msg, off)
        found[kind] = msg[off + 4 : off + size]
        off += (size + 3) & ~3
    return found


def test_a_route_replace_spreads_a_32_over_the_ports_given():
    msg = netlink.route_replace("10.0.1.3", [5, 9], seq=7)
    length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", msg)
    assert (length, kind, seq) == (len(msg), netlink.RTM_NEWROUTE, 7)
    assert flags == netlink.NLM_F_REQUEST | netlink.NLM_F_ACK | netlink.NLM_F_REPLACE | netlink.NLM_F_CREATE
    family, dst_len, _src, _tos, table, proto, scope, rtype, _f = struct.unpack_from("=BBBBBBBBI", msg, 16)
    assert (family, dst_len, table) == (socket.AF_INET, 32, netlink.RT_TABLE_MAIN)
    assert (proto, scope, rtype) == (netlink.RTPROT_BOOT, netlink.RT_SCOPE_UNIVERSE, netlink.RTN_UNICAST)
    attrs = attributes(msg, 28)
    assert attrs[netlink.RTA_DST] == socket.inet_aton("10.0.1.3")
    hops = attrs[netlink.RTA_MULTIPATH]
    assert [struct.unpack_from("=HBBi", hops, o) for o in (0, 8)] == [(8, 0, 0, 5), (8, 0, 0, 9)]


def test_a_route_delete_matches_the_32_whatever_its_next_hops():
    msg = netlink.route_delete("10.0.1.2")
    _len, kind, flags, _seq, _pid = struct.unpack_from("=IHHII", msg)
    assert kind == netlink.RTM_DELROUTE and flags == netlink.NLM_F_REQUEST | netlink.NLM_F_ACK
    _fam, dst_len, _s, _t, table, proto, scope, rtype, _f = struct.unpack_from("=BBBBBBBBI", msg, 16)
    assert (dst_len, table, proto, scope, rtype) == (
        32,
        netlink.RT_TABLE_MAIN,
        0,
        netlink.RT_SCOPE_NOWHERE,
        0,
    )
    assert attributes(msg, 28) == {netlink.RTA_DST: socket.inet_aton("10.0.1.2")}


def test_an_ack_gives_the_errno_and_other_replies_none():
    def reply(kind, error):
        return struct.pack("=IHHII", 36, kind, 0, 1, 0) + struct.pack("=i", error) + bytes(16)

    assert netlink.ack_error(reply(netlink.NLMSG_ERROR, -3)) == 3  # ESRCH: no such route
    assert netlink.ack_error(reply(netlink.NLMSG_ERROR, 0)) == 0
    assert netlink.ack_error(reply(3, 0)) == 0  # NLMSG_DONE


def test_a_link_change_sets_or_clears_only_the_up_flag():
    for up, flags in ((False, 0), (True, netlink.IFF_UP)):
        msg = netlink.link_up(42, up, seq=3)
        length, kind, nlflags, seq, _pid = struct.unpack_from("=IHHII", msg)
        assert (length, kind, seq) == (len(msg), netlink.RTM_NEWLINK, 3)
        assert nlflags == netlink.NLM_F_REQUEST | netlink.NLM_F_ACK  # changes, never creates
        family, _type, index, got, change = struct.unpack_from("=BxHiII", msg, 16)
        assert (family, index, got, change) == (socket.AF_UNSPEC, 42, flags, netlink.IFF_UP)
        assert len(msg) == 16 + 16


def test_a_group_change_and_a_group_delete_name_the_group_only():
    msg = netlink.link_group(12, 4739, seq=3)
    _len, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", msg)
    assert (kind, seq) == (netlink.RTM_NEWLINK, 3)
    _family, _type, index, flags, change = struct.unpack_from("=BxHiII", msg, 16)
    assert (index, flags, change) == (12, 0, 0)
    assert attributes(msg, 32) == {netlink.IFLA_GROUP: struct.pack("=I", 4739)}
    msg = netlink.group_delete(4739)
    _len, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", msg)
    # index 0 and no name: the kernel deletes by the group attribute
    assert kind == netlink.RTM_DELLINK and struct.unpack_from("=BxHiII", msg, 16)[2] == 0
    assert attributes(msg, 32) == {netlink.IFLA_GROUP: struct.pack("=I", 4739)}


def link_reply(seq, name, group=None, kind=netlink.RTM_NEWLINK):
    attrs = netlink.attr(netlink.IFLA_IFNAME, name.encode() + b"\0")
    if group is not None:
        attrs += netlink.attr(netlink.IFLA_GROUP, struct.pack("=I", group))
    body = struct.pack("=BxHiII", 0, 1, 7, 0, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), kind, 2, seq, 0) + body


def test_a_dump_gives_each_interface_its_group_until_its_end():
    done = struct.pack("=IHHII", 20, netlink.NLMSG_DONE, 2, 5, 0) + bytes(4)
    part = link_reply(5, "t0r0k0-eth1", 4739) + link_reply(4, "other", 4739) + link_reply(5, "lo")
    assert netlink.link_groups(part, 5) == ({"t0r0k0-eth1": 4739, "lo": 0}, False)
    assert netlink.link_groups(link_reply(5, "a0n0-eth2", 4739) + done, 5) == ({"a0n0-eth2": 4739}, True)
    error = struct.pack("=IHHII", 36, netlink.NLMSG_ERROR, 0, 5, 0) + struct.pack("=i", -1) + bytes(16)
    with pytest.raises(OSError) as refused:
        netlink.link_groups(error, 5)
    assert refused.value.errno == 1


def qdisc_reply(seq, ifindex, parent, kind, sent, backlog, drops):
    def attr(k, payload):
        return struct.pack("=HH", 4 + len(payload), k) + payload + bytes(-len(payload) % 4)

    stats = attr(1, struct.pack("=QI", sent, 9) + bytes(4)) + attr(
        3, struct.pack("=IIIII", 2, backlog, drops, 0, 0)
    )
    body = struct.pack("=BBHiIII", 0, 0, 0, ifindex, 0x10000, parent, 1)
    body += attr(netlink.TCA_KIND, kind + b"\0") + attr(netlink.TCA_STATS2 | 0x8000, stats)
    return struct.pack("=IHHII", 16 + len(body), netlink.RTM_NEWQDISC, 2, seq, 0) + body


def test_a_qdisc_dump_gives_each_root_qdisc_of_the_kind_its_bytes_backlog_and_drops():
    msg = netlink.qdiscs_dump(seq=3)
    length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", msg)
    assert (length, kind, flags, seq) == (len(msg), netlink.RTM_GETQDISC, 0x301, 3)
    part = (
        qdisc_reply(3, 4, netlink.TC_H_ROOT, b"htb", 123456789012, 9000, 7)
        + qdisc_reply(3, 4, 0x10001, b"pfifo", 5, 5, 5)  # a class's leaf, not the root
        + qdisc_reply(3, 5, netlink.TC_H_ROOT, b"noqueue", 1, 1, 1)
        + qdisc_reply(2, 6, netlink.TC_H_ROOT, b"htb", 1, 1, 1)  # another request's
    )
    assert netlink.root_qdisc_counters(part, 3, b"htb") == ({4: (123456789012, 9000, 7)}, False)
    done = struct.pack("=IHHII", 20, netlink.NLMSG_DONE, 2, 3, 0) + bytes(4)
    assert netlink.root_qdisc_counters(done, 3, b"htb") == ({}, True)
