"""The agent's netlink route question and answer (pure byte layouts)."""

import socket
import struct

from traffic import nic


def test_route_request_carries_the_whole_five_tuple():
    msg = nic.route_request(7, "10.0.0.1", "10.1.0.2", 49999, 4791, 17)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", msg)
    assert (length, kind, flags, seq) == (len(msg), nic.RTM_GETROUTE, nic.NLM_F_REQUEST, 7)
    attrs, off = {}, 16 + 12
    while off < len(msg):
        size, attr = struct.unpack_from("=HH", msg, off)
        attrs[attr] = msg[off + 4 : off + size]
        off += (size + 3) & ~3
    assert attrs[nic.RTA_DST] == socket.inet_aton("10.1.0.2")
    assert attrs[nic.RTA_SRC] == socket.inet_aton("10.0.0.1")
    assert attrs[nic.RTA_SPORT] == (49999).to_bytes(2, "big")
    assert attrs[nic.RTA_DPORT] == (4791).to_bytes(2, "big")
    assert attrs[nic.RTA_IP_PROTO] == b"\x11"


def test_route_reply_gives_the_output_interface_or_none():
    body = struct.pack("=BBBBBBBBI", socket.AF_INET, 32, 0, 0, 254, 0, 0, 1, 0)
    body += nic._attr(nic.RTA_DST, socket.inet_aton("10.1.0.2"))
    body += nic._attr(nic.RTA_OIF, (12).to_bytes(4, "little"))
    reply = struct.pack("=IHHII", 16 + len(body), nic.RTM_NEWROUTE, 0, 7, 0) + body
    assert nic.route_oif(reply) == 12
    error = struct.pack("=IHHII", 36, nic.NLMSG_ERROR, 0, 7, 0) + struct.pack("=i", -101) + bytes(16)
    assert nic.route_oif(error) is None


def _reply(body_attrs, rtm_flags=0):
    body = struct.pack("=BBBBBBBBI", socket.AF_INET, 16, 0, 0, 254, 0, 0, 1, rtm_flags)
    body += body_attrs
    return struct.pack("=IHHII", 16 + len(body), nic.RTM_NEWROUTE, 0, 7, 0) + body


def test_fibmatch_request_sets_the_flag():
    msg = nic.route_request(8, "10.0.0.1", "10.1.0.2", 0, 4791, 17, nic.RTM_F_FIB_MATCH)
    assert struct.unpack_from("=I", msg, 16 + 8)[0] == nic.RTM_F_FIB_MATCH


def test_live_next_hops_leave_out_dead_and_link_down_ones():
    hops = b"".join(
        struct.pack("=HBBi", 16, flags, 0, oif) + nic._attr(5, socket.inet_aton("192.168.0.2"))
        for flags, oif in ((0, 3), (nic.RTNH_F_DEAD | nic.RTNH_F_LINKDOWN, 4), (nic.RTNH_F_LINKDOWN, 5))
    )
    reply = _reply(nic._attr(nic.RTA_DST, socket.inet_aton("10.1.0.0")) + nic._attr(nic.RTA_MULTIPATH, hops))
    assert nic.route_live_oifs(reply) == {3}
    # a single next hop: its flags are the entry's own
    one = nic._attr(nic.RTA_OIF, (6).to_bytes(4, "little"))
    assert nic.route_live_oifs(_reply(one)) == {6}
    assert nic.route_live_oifs(_reply(one, nic.RTNH_F_LINKDOWN)) == set()
    error = struct.pack("=IHHII", 36, nic.NLMSG_ERROR, 0, 7, 0) + struct.pack("=i", -101) + bytes(16)
    assert nic.route_live_oifs(error) == set()
