"""Turn the routing core's operations into OpenFlow 1.3 messages.

Two tables: table 0 classifies (ARP to the controller; everything else on
to routing, where a rule may first rewrite the DSCP), table 1 routes (host
routes, detours, pinned connections). Kept apart from the event handlers so
unit tests can drive it with a fake datapath that executes what would be
sent.
"""

from collections.abc import Collection, Iterable
from typing import Any

from . import wire
from .routing import Detour, FlowDel, FlowSet, GroupAdd, Mark, Output, Pin, Route, SetDscp, ToGroup

COOKIE = 0x4850_4E00  # "HPN" + 0: marks the flows hpnlab installs
TABLE_CLASSIFY = 0
TABLE_ROUTE = 1
PRIO_ARP = 1000
PRIO_NEXT = 0  # table 0's default: on to routing
PRIO_MARK = 200  # table 0: one connection's DSCP rewritten (its class)
PRIO_ROUTE = 100
PRIO_PIN = 105  # one connection (5-tuple) on its chosen path
PRIO_DETOUR = 110  # a route for what came in by one port (see routing.py):
# above pins, so a detoured packet never turns back
ETH_IPV4 = 0x0800
ETH_ARP = 0x0806
IPPROTO_UDP = 17
PRIORITY = {"route": PRIO_ROUTE, "detour": PRIO_DETOUR, "pin": PRIO_PIN, "mark": PRIO_MARK}
FIVE_TUPLE = {"eth_type", "ip_proto", "ipv4_src", "ipv4_dst", "udp_src"}
SHAPE = {
    PRIO_ROUTE: {"eth_type", "ipv4_dst"},
    PRIO_DETOUR: {"in_port", "eth_type", "ipv4_dst"},
    PRIO_PIN: FIVE_TUPLE,
}


def base_flows(dp: Any, have: Collection[str] = frozenset()) -> list:
    """Table 0's fixed flows, those not in `have` ({"arp", "next"}): ARP goes
    to the controller (proxy ARP), everything else on to table 1. What no
    route matches there is dropped by OpenFlow 1.3's default table-miss: no
    flooding in a fabric full of loops."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    out = []
    if "arp" not in have:
        actions = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        out.append(
            _flow_mod(
                dp,
                PRIO_ARP,
                parser.OFPMatch(eth_type=ETH_ARP),
                [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)],
                TABLE_CLASSIFY,
            )
        )
    if "next" not in have:
        out.append(
            _flow_mod(
                dp,
                PRIO_NEXT,
                parser.OFPMatch(),
                [parser.OFPInstructionGotoTable(TABLE_ROUTE)],
                TABLE_CLASSIFY,
            )
        )
    return out


def state_requests(dp: Any) -> list:
    """Ask a (re)connecting switch what it holds: our flows (by cookie) and
    its groups. A switch keeps its tables while no controller is connected
    (fail-mode secure), so a restarted controller starts from what is there
    instead of wiping it, and traffic never notices the restart."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return [
        parser.OFPFlowStatsRequest(
            dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, COOKIE, 0xFFFFFFFFFFFFFFFF, parser.OFPMatch()
        ),
        parser.OFPGroupDescStatsRequest(dp, 0),
    ]


def counter_request(dp: Any, xid: int) -> Any:
    """Ask for our table-0 flows (the marks among them count each marked
    connection's bytes); the reply carries `xid`."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    msg = parser.OFPFlowStatsRequest(
        dp, 0, TABLE_CLASSIFY, ofp.OFPP_ANY, ofp.OFPG_ANY, COOKIE, 0xFFFFFFFFFFFFFFFF, parser.OFPMatch()
    )
    msg.set_xid(xid)
    return msg


def mark_counters(flow_stats: Iterable) -> dict:
    """{Mark: bytes} of the marks in flow-stats replies."""
    out = {}
    for f in flow_stats:
        fields = dict(f.match.items())
        if f.table_id == TABLE_CLASSIFY and f.priority == PRIO_MARK and set(fields) == FIVE_TUPLE:
            out[Mark(fields["ipv4_dst"], fields["ipv4_src"], fields["udp_src"])] = f.byte_count
    return out


def read_state(dp: Any, flow_stats: Iterable, group_descs: Iterable) -> tuple[set, dict, dict, list]:
    """What a switch holds, from its flow-stats and group-desc replies:
    (the base flows it has ({"arp", "next"}), {Match: Output | ToGroup |
    SetDscp} (routing.py),
    {(kind, ports): gid} of select and fast-failover groups,
    [flows to remove: (priority, match)])."""
    ofp = dp.ofproto
    kinds = {ofp.OFPGT_SELECT: "select", ofp.OFPGT_FF: "ff"}
    groups: dict = {}
    for g in sorted(group_descs, key=lambda g: g.group_id):
        ports = [a.port for b in g.buckets for a in b.actions if a.type == ofp.OFPAT_OUTPUT]
        if g.type in kinds and ports:
            # a select group's buckets are a set; a failover group's, an order
            key = (kinds[g.type], tuple(sorted(ports)) if g.type == ofp.OFPGT_SELECT else tuple(ports))
            groups.setdefault(key, g.group_id)
    known_gids = set(groups.values())
    base: set = set()
    routes: dict = {}  # Match -> Output | ToGroup | SetDscp
    strays: list = []
    for f in flow_stats:
        fields = dict(f.match.items())
        actions = [a for i in f.instructions if i.type == ofp.OFPIT_APPLY_ACTIONS for a in i.actions]
        gotos = [i.table_id for i in f.instructions if i.type == ofp.OFPIT_GOTO_TABLE]
        if f.table_id == TABLE_CLASSIFY:
            if f.priority == PRIO_ARP and fields == {"eth_type": ETH_ARP} and not gotos:
                base.add("arp")
                continue
            if f.priority == PRIO_NEXT and not fields and gotos == [TABLE_ROUTE] and not actions:
                base.add("next")
                continue
            dscp = _mark_action(ofp, actions)
            if (
                f.priority == PRIO_MARK
                and set(fields) == FIVE_TUPLE
                and gotos == [TABLE_ROUTE]
                and dscp is not None
            ):
                routes[Mark(fields["ipv4_dst"], fields["ipv4_src"], fields["udp_src"])] = SetDscp(dscp)
                continue
        action = _route_action(ofp, actions)
        ip = fields.get("ipv4_dst")
        if (
            f.table_id == TABLE_ROUTE
            and set(fields) == SHAPE.get(f.priority)
            and isinstance(ip, str)
            and action is not None
            and (isinstance(action, Output) or action.gid in known_gids)
        ):
            if f.priority == PRIO_PIN:
                routes[Pin(ip, fields["ipv4_src"], fields["udp_src"])] = action
            elif f.priority == PRIO_DETOUR:
                routes[Detour(fields["in_port"], ip)] = action
            else:
                routes[Route(ip)] = action
        else:
            strays.append((f.table_id, f.priority, f.match))
    return base, routes, groups, strays


def _mark_action(ofp, actions):
    if len(actions) == 1 and actions[0].type == ofp.OFPAT_SET_FIELD and actions[0].key == "ip_dscp":
        return actions[0].value
    return None


def _route_action(ofp, actions):
    if len(actions) != 1:
        return None
    a = actions[0]
    if a.type == ofp.OFPAT_OUTPUT:
        return Output(a.port)
    if a.type == ofp.OFPAT_GROUP:
        return ToGroup(a.group_id)
    return None


def remove_flows(dp: Any, strays: Iterable[tuple]) -> list:
    """Delete flows of ours that fit no program (strict: only those, each in
    its own table: the same match and priority may be a kept flow elsewhere)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return [
        parser.OFPFlowMod(
            dp,
            cookie=COOKIE,
            cookie_mask=0xFFFFFFFFFFFFFFFF,
            command=ofp.OFPFC_DELETE_STRICT,
            table_id=table,
            priority=prio,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=match,
        )
        for table, prio, match in strays
    ]


def messages_for(dp: Any, ops: Iterable) -> list:
    """The flow and group modifications that carry out routing's `ops`."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    msgs = []
    for op in ops:
        if isinstance(op, GroupAdd):
            # watch_port lets the switch skip a bucket whose port is down at
            # once, before the controller has even recomputed: a select group
            # spreads over the live ones, a fast-failover group takes the
            # first live one (weights mean nothing there and must be 0).
            gtype, weight = {"select": (ofp.OFPGT_SELECT, 1), "ff": (ofp.OFPGT_FF, 0)}[op.kind]
            buckets = [
                parser.OFPBucket(
                    weight=weight, watch_port=p, watch_group=ofp.OFPG_ANY, actions=[parser.OFPActionOutput(p)]
                )
                for p in op.ports
            ]
            msgs.append(parser.OFPGroupMod(dp, ofp.OFPGC_ADD, gtype, op.gid, buckets))
        elif isinstance(op, FlowSet):
            key, action = op.match, op.action
            if isinstance(action, SetDscp):
                inst = [
                    parser.OFPInstructionActions(
                        ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionSetField(ip_dscp=action.value)]
                    ),
                    parser.OFPInstructionGotoTable(TABLE_ROUTE),
                ]
            else:
                out = (
                    parser.OFPActionOutput(action.port)
                    if isinstance(action, Output)
                    else parser.OFPActionGroup(action.gid)
                )
                inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [out])]
            msgs.append(_flow_mod(dp, PRIORITY[key.kind], _route_match(parser, key), inst, _table(key)))
        elif isinstance(op, FlowDel):
            msgs.append(
                parser.OFPFlowMod(
                    dp,
                    cookie=COOKIE,
                    command=ofp.OFPFC_DELETE_STRICT,
                    table_id=_table(op.match),
                    priority=PRIORITY[op.match.kind],
                    out_port=ofp.OFPP_ANY,
                    out_group=ofp.OFPG_ANY,
                    match=_route_match(parser, op.match),
                )
            )
        else:
            raise ValueError(f"unknown operation {op!r}")
    return msgs


def encoded(dp: Any, ops: Iterable) -> bytes:
    """messages_for's messages as the bytes a switch reads, packed directly
    (wire.py: some 20 times faster than os-ken's encoding, which matters
    while a failed link waits for its new routes), xids from `dp`'s counter
    as os-ken's send_msg would take them."""

    def next_xid():
        dp.xid = (dp.xid + 1) & dp.ofproto.MAX_XID
        return dp.xid

    return wire.encode(ops, next_xid, COOKIE, lambda key: PRIORITY[key.kind], _table, TABLE_ROUTE)


def _table(key):
    return TABLE_CLASSIFY if isinstance(key, Mark) else TABLE_ROUTE


def _route_match(parser, key):
    if isinstance(key, (Pin, Mark)):
        return parser.OFPMatch(
            eth_type=ETH_IPV4, ip_proto=IPPROTO_UDP, ipv4_src=key.src, ipv4_dst=key.ip, udp_src=key.sport
        )
    if isinstance(key, Route):
        return parser.OFPMatch(eth_type=ETH_IPV4, ipv4_dst=key.ip)
    return parser.OFPMatch(in_port=key.in_port, eth_type=ETH_IPV4, ipv4_dst=key.ip)


def _flow_mod(dp, priority, match, instructions, table_id):
    return dp.ofproto_parser.OFPFlowMod(
        dp,
        cookie=COOKIE,
        command=dp.ofproto.OFPFC_ADD,
        table_id=table_id,
        priority=priority,
        match=match,
        instructions=instructions,
    )
