"""Routing's operations as OpenFlow 1.3 bytes, packed directly (pure).

openflow.messages_for builds the same messages as os-ken objects; encoding
one of those takes about 0.1 ms of Python (the match's fields go through
os-ken's generic field conversion and netaddr), and a link that fails
changes some 40 flows of an 8-switch fabric: 4 ms of CPU, more on a busy
machine, while the probes wait for the new routes. Packing the few shapes
routing sends takes a few microseconds each. A unit test holds every shape
byte for byte against os-ken's own encoding.
"""

import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any

from .routing import Detour, FlowDel, FlowSet, GroupAdd, Mark, Output, Pin, Route, SetDscp, ToGroup

OFP_VERSION = 0x04
OFPT_FLOW_MOD, OFPT_GROUP_MOD = 14, 15
OFPFC_ADD, OFPFC_DELETE_STRICT = 0, 4
OFPGC_ADD = 0
OFPGT_SELECT, OFPGT_FF = 1, 3
OFPIT_GOTO_TABLE, OFPIT_APPLY_ACTIONS = 1, 4
OFPAT_OUTPUT, OFPAT_GROUP, OFPAT_SET_FIELD = 0, 22, 25
OFPP_ANY, OFPG_ANY = 0xFFFFFFFF, 0xFFFFFFFF
OFP_NO_BUFFER = 0xFFFFFFFF
OFPCML_MAX = 0xFFE5  # what os-ken puts in an output action by default
OFPMT_OXM = 1

# OXM basic class fields: (number, struct format of the value)
IN_PORT, ETH_TYPE, IP_DSCP, IP_PROTO, IPV4_SRC, IPV4_DST, UDP_SRC = (
    (0, "!I"),
    (5, "!H"),
    (8, "!B"),
    (10, "!B"),
    (11, "!4s"),
    (12, "!4s"),
    (15, "!H"),
)
ETH_IPV4, IPPROTO_UDP = 0x0800, 17

HEADER = struct.Struct("!BBHI")
FLOW_MOD = struct.Struct("!QQBBHHHIIIH2x")  # after the header
GROUP_MOD = struct.Struct("!HBxI")
BUCKET = struct.Struct("!HHII4x")


def _oxm(field: tuple, value) -> bytes:
    number, fmt = field
    body = struct.pack(fmt, value)
    return struct.pack("!HBB", 0x8000, number << 1, len(body)) + body


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


def match(key) -> bytes:
    """ofp_match for a routing match, fields in OXM order, padded to 8."""
    ip = socket.inet_aton(key.ip)
    if isinstance(key, Route):
        fields = [_oxm(ETH_TYPE, ETH_IPV4), _oxm(IPV4_DST, ip)]
    elif isinstance(key, Detour):
        fields = [_oxm(IN_PORT, key.in_port), _oxm(ETH_TYPE, ETH_IPV4), _oxm(IPV4_DST, ip)]
    elif isinstance(key, (Pin, Mark)):
        fields = [
            _oxm(ETH_TYPE, ETH_IPV4),
            _oxm(IP_PROTO, IPPROTO_UDP),
            _oxm(IPV4_SRC, socket.inet_aton(key.src)),
            _oxm(IPV4_DST, ip),
            _oxm(UDP_SRC, key.sport),
        ]
    else:
        raise ValueError(f"unknown match {key!r}")
    body = b"".join(fields)
    return _padded(struct.pack("!HH", OFPMT_OXM, 4 + len(body)) + body)


def _output(port: int) -> bytes:
    return struct.pack("!HHIH6x", OFPAT_OUTPUT, 16, port, OFPCML_MAX)


def _apply(actions: bytes) -> bytes:
    return struct.pack("!HH4x", OFPIT_APPLY_ACTIONS, 8 + len(actions)) + actions


def _instructions(action, route_table: int) -> bytes:
    if isinstance(action, SetDscp):
        field = _oxm(IP_DSCP, action.value)
        size = 4 + len(field) + (-(4 + len(field)) % 8)  # the action's length counts its padding
        set_dscp = _padded(struct.pack("!HH", OFPAT_SET_FIELD, size) + field)
        return _apply(set_dscp) + struct.pack("!HHB3x", OFPIT_GOTO_TABLE, 8, route_table)
    if isinstance(action, Output):
        return _apply(_output(action.port))
    if isinstance(action, ToGroup):
        return _apply(struct.pack("!HHI", OFPAT_GROUP, 8, action.gid))
    raise ValueError(f"unknown action {action!r}")


def _message(kind: int, xid: int, body: bytes) -> bytes:
    return HEADER.pack(OFP_VERSION, kind, HEADER.size + len(body), xid) + body


def encode(
    ops: Iterable,
    next_xid: Callable[[], int],
    cookie: int,
    priority: Callable[[Any], int],
    table: Callable[[Any], int],
    route_table: int,
) -> bytes:
    """Every operation's message, back to back, each with its own xid from
    `next_xid()`; `priority(match)` and `table(match)` say where a match's
    flow lives (openflow.py decides, for both ways of building messages)."""
    out = []
    for op in ops:
        if isinstance(op, GroupAdd):
            out.append(_message(OFPT_GROUP_MOD, next_xid(), _group_add(op)))
        elif isinstance(op, FlowSet):
            head = _flow_head(op.match, OFPFC_ADD, 0, 0, cookie, priority, table)
            body = head + match(op.match) + _instructions(op.action, route_table)
            out.append(_message(OFPT_FLOW_MOD, next_xid(), body))
        elif isinstance(op, FlowDel):
            head = _flow_head(op.match, OFPFC_DELETE_STRICT, OFPP_ANY, OFPG_ANY, cookie, priority, table)
            out.append(_message(OFPT_FLOW_MOD, next_xid(), head + match(op.match)))
        else:
            raise ValueError(f"unknown operation {op!r}")
    return b"".join(out)


def _flow_head(key, command, out_port, out_group, cookie, priority, table) -> bytes:
    """A flow mod's fields after the header: no timeouts, no buffer, no flags."""
    return FLOW_MOD.pack(
        cookie, 0, table(key), command, 0, 0, priority(key), OFP_NO_BUFFER, out_port, out_group, 0
    )


def _group_add(op: GroupAdd) -> bytes:
    """A select group spreads over its buckets (weight 1 each); a
    fast-failover group takes the first live one (weights must be 0). Each
    bucket watches its own port."""
    gtype, weight = {"select": (OFPGT_SELECT, 1), "ff": (OFPGT_FF, 0)}[op.kind]
    buckets = b"".join(BUCKET.pack(BUCKET.size + 16, weight, p, OFPG_ANY) + _output(p) for p in op.ports)
    return GROUP_MOD.pack(OFPGC_ADD, gtype, op.gid) + buckets
