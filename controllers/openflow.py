"""Turn the routing core's operations into OpenFlow 1.3 messages.

Kept apart from the event handlers so unit tests can drive it with a fake
datapath that only records what would be sent.
"""
COOKIE = 0x4850_4E00          # "HPN" + 0: marks the flows hpnlab installs
PRIO_ARP = 1000
PRIO_ROUTE = 100
ETH_IPV4 = 0x0800
ETH_ARP = 0x0806


def base_flows(dp):
    """ARP goes to the controller (proxy ARP); everything else that no route
    matches is dropped by OpenFlow 1.3's default table-miss: no flooding in a
    fabric full of loops."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    # A switch that reconnects keeps its tables (fail-mode secure): start it
    # from empty so the controller's record of its program is true again.
    wipe = [parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                              out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY),
            parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_ALL, ofp.OFPG_ALL)]
    match = parser.OFPMatch(eth_type=ETH_ARP)
    actions = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
    return wipe + [_flow_mod(dp, PRIO_ARP, match, actions)]


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
