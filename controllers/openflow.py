"""Turn the routing core's operations into OpenFlow 1.3 messages.

Kept apart from the event handlers so unit tests can drive it with a fake
datapath that only records what would be sent.
"""
COOKIE = 0x4850_4E00          # "HPN" + 0: marks the flows hpnlab installs
PRIO_ARP = 1000
PRIO_ROUTE = 100
ETH_IPV4 = 0x0800
ETH_ARP = 0x0806


def arp_flow(dp):
    """ARP goes to the controller (proxy ARP); everything else that no route
    matches is dropped by OpenFlow 1.3's default table-miss: no flooding in a
    fabric full of loops."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    match = parser.OFPMatch(eth_type=ETH_ARP)
    actions = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
    return _flow_mod(dp, PRIO_ARP, match, actions)


def state_requests(dp):
    """Ask a (re)connecting switch what it holds: our flows (by cookie) and
    its groups. A switch keeps its tables while no controller is connected
    (fail-mode secure), so a restarted controller starts from what is there
    instead of wiping it, and traffic never notices the restart."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return [parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                       COOKIE, 0xFFFFFFFFFFFFFFFF, parser.OFPMatch()),
            parser.OFPGroupDescStatsRequest(dp, 0)]


def read_state(dp, flow_stats, group_descs):
    """What a switch holds, from its flow-stats and group-desc replies:
    (has the ARP flow, {ip: ("output", port) | ("group", gid)},
    {ports: gid} of select groups, [flows to remove: (priority, match)])."""
    ofp = dp.ofproto
    groups = {}
    for g in sorted(group_descs, key=lambda g: g.group_id):
        ports = tuple(sorted(a.port for b in g.buckets for a in b.actions
                             if a.type == ofp.OFPAT_OUTPUT))
        if g.type == ofp.OFPGT_SELECT and ports:
            groups.setdefault(ports, g.group_id)
    known_gids = set(groups.values())
    has_arp, routes, strays = False, {}, []
    for f in flow_stats:
        fields = dict(f.match.items())
        actions = [a for i in f.instructions if i.type == ofp.OFPIT_APPLY_ACTIONS for a in i.actions]
        if f.priority == PRIO_ARP and fields == {"eth_type": ETH_ARP}:
            has_arp = True
            continue
        action = _route_action(ofp, actions)
        ip = fields.get("ipv4_dst")
        if (f.priority == PRIO_ROUTE and set(fields) == {"eth_type", "ipv4_dst"}
                and isinstance(ip, str) and action is not None
                and (action[0] == "output" or action[1] in known_gids)):
            routes[ip] = action
        else:
            strays.append((f.priority, f.match))
    return has_arp, routes, groups, strays


def _route_action(ofp, actions):
    if len(actions) != 1:
        return None
    a = actions[0]
    if a.type == ofp.OFPAT_OUTPUT:
        return ("output", a.port)
    if a.type == ofp.OFPAT_GROUP:
        return ("group", a.group_id)
    return None


def remove_flows(dp, strays):
    """Delete flows of ours that fit no program (strict: only those)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return [parser.OFPFlowMod(dp, cookie=COOKIE, cookie_mask=0xFFFFFFFFFFFFFFFF,
                              command=ofp.OFPFC_DELETE_STRICT, table_id=ofp.OFPTT_ALL,
                              priority=prio, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                              match=match) for prio, match in strays]


def messages_for(dp, ops):
    ofp, parser = dp.ofproto, dp.ofproto_parser
    msgs = []
    for op in ops:
        if op[0] == "group_add":
            _, gid, ports = op
            # watch_port lets the switch skip a bucket whose port is down at
            # once, before the controller has even recomputed.
            buckets = [parser.OFPBucket(weight=1, watch_port=p, watch_group=ofp.OFPG_ANY,
                                        actions=[parser.OFPActionOutput(p)]) for p in ports]
            msgs.append(parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, gid, buckets))
        elif op[0] == "flow_set":
            _, ip, (kind, arg) = op
            action = parser.OFPActionOutput(arg) if kind == "output" else parser.OFPActionGroup(arg)
            msgs.append(_flow_mod(dp, PRIO_ROUTE, _ip_match(parser, ip), [action]))
        elif op[0] == "flow_del":
            msgs.append(parser.OFPFlowMod(dp, cookie=COOKIE, command=ofp.OFPFC_DELETE_STRICT,
                                          priority=PRIO_ROUTE, out_port=ofp.OFPP_ANY,
                                          out_group=ofp.OFPG_ANY, match=_ip_match(parser, op[1])))
        else:
            raise ValueError(f"unknown operation {op[0]!r}")
    return msgs


def _ip_match(parser, ip):
    return parser.OFPMatch(eth_type=ETH_IPV4, ipv4_dst=ip)


def _flow_mod(dp, priority, match, actions):
    ofp, parser = dp.ofproto, dp.ofproto_parser
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
    return parser.OFPFlowMod(dp, cookie=COOKIE, command=ofp.OFPFC_ADD, priority=priority,
                             match=match, instructions=inst)
