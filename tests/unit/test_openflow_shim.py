"""OpenFlow 1.3 messages and the controller event shim, driven by fake
datapaths and fake events (no sockets, no switches)."""

import pytest
from app_harness import Harness, event, events, expected_tables, make_app, port
from fakeoftable import OFP, PARSER, FakeDatapath, actions_of, installed_routes, installed_table, reparse
from os_ken.lib.packet import arp, ether_types, ethernet, ipv4, packet

from controllers import openflow
from controllers.routing import Detour, FlowDel, FlowSet, GroupAdd, Output, Route, ToGroup
from testbed.fabric.paths import compute_routes


# --- openflow.py ------------------------------------------------------------------
def test_base_flows_send_arp_to_the_controller_and_the_rest_on_to_routing():
    dp = FakeDatapath(1)
    fm, nxt = openflow.base_flows(dp)
    assert isinstance(fm, PARSER.OFPFlowMod)
    assert fm.command == OFP.OFPFC_ADD
    assert (fm.table_id, fm.priority) == (openflow.TABLE_CLASSIFY, openflow.PRIO_ARP)
    assert fm.cookie == openflow.COOKIE
    assert dict(fm.match.items()) == {"eth_type": 0x0806}
    (out,) = actions_of(fm)
    assert isinstance(out, PARSER.OFPActionOutput)
    assert out.port == OFP.OFPP_CONTROLLER
    assert out.max_len == OFP.OFPCML_NO_BUFFER
    (goto,) = nxt.instructions
    assert (nxt.table_id, nxt.priority, dict(nxt.match.items())) == (openflow.TABLE_CLASSIFY, 0, {})
    assert goto.type == OFP.OFPIT_GOTO_TABLE and goto.table_id == openflow.TABLE_ROUTE
    dp.send_msg(fm)
    dp.send_msg(nxt)
    back = reparse(dp, fm)
    assert back.match["eth_type"] == 0x0806 and back.priority == openflow.PRIO_ARP
    assert reparse(dp, nxt).instructions[0].table_id == openflow.TABLE_ROUTE
    # read back, both are there and nothing needs adding
    base, routes, groups, strays = openflow.read_state(dp, dp.flow_stats(), dp.group_desc())
    assert (base, routes, groups, strays) == ({"arp", "next"}, {}, {}, [])
    assert openflow.base_flows(dp, base) == []
    assert len(openflow.base_flows(dp, {"next"})) == 1


def test_state_requests_ask_for_our_flows_and_all_groups():
    dp = FakeDatapath(1)
    flows, groups = openflow.state_requests(dp)
    assert isinstance(flows, PARSER.OFPFlowStatsRequest) and flows.table_id == OFP.OFPTT_ALL
    assert (flows.cookie, flows.cookie_mask) == (openflow.COOKIE, 0xFFFFFFFFFFFFFFFF)
    assert isinstance(groups, PARSER.OFPGroupDescStatsRequest)
    for m in (flows, groups):
        dp.send_msg(m)


def test_messages_for_each_operation():
    dp = FakeDatapath(1)
    ops = [
        GroupAdd(3, "select", (5, 6)),
        FlowSet(Route("10.0.1.1"), ToGroup(3)),
        FlowSet(Route("10.0.0.1"), Output(2)),
        FlowDel(Route("10.0.0.9")),
    ]
    gm, via_group, via_port, delete = openflow.messages_for(dp, ops)

    assert isinstance(gm, PARSER.OFPGroupMod)
    assert (gm.command, gm.type, gm.group_id) == (OFP.OFPGC_ADD, OFP.OFPGT_SELECT, 3)
    assert [(b.watch_port, b.watch_group, b.weight) for b in gm.buckets] == [
        (5, OFP.OFPG_ANY, 1),
        (6, OFP.OFPG_ANY, 1),
    ]
    assert [[a.port for a in b.actions] for b in gm.buckets] == [[5], [6]]

    for fm, ip in ((via_group, "10.0.1.1"), (via_port, "10.0.0.1")):
        assert isinstance(fm, PARSER.OFPFlowMod)
        assert fm.command == OFP.OFPFC_ADD
        assert fm.priority == openflow.PRIO_ROUTE and fm.cookie == openflow.COOKIE
        assert dict(fm.match.items()) == {"eth_type": 0x0800, "ipv4_dst": ip}
    (g,) = actions_of(via_group)
    assert isinstance(g, PARSER.OFPActionGroup) and g.group_id == 3
    (o,) = actions_of(via_port)
    assert isinstance(o, PARSER.OFPActionOutput) and o.port == 2

    assert isinstance(delete, PARSER.OFPFlowMod)
    assert delete.command == OFP.OFPFC_DELETE_STRICT
    assert delete.priority == openflow.PRIO_ROUTE
    assert (delete.out_port, delete.out_group) == (OFP.OFPP_ANY, OFP.OFPG_ANY)
    assert dict(delete.match.items()) == {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"}

    # every message encodes; flow mods decode back to the same match and action
    for m in (gm, via_group, via_port, delete):
        dp.send_msg(m)
    back = reparse(dp, via_port)
    assert back.match["ipv4_dst"] == "10.0.0.1"
    assert back.instructions[0].actions[0].port == 2
    back = reparse(dp, via_group)
    assert back.instructions[0].actions[0].group_id == 3
    assert reparse(dp, delete).command == OFP.OFPFC_DELETE_STRICT


def test_failover_groups_and_detours():
    dp = FakeDatapath(1)
    ops = [
        GroupAdd(4, "ff", (3, 1, 2)),
        FlowSet(Route("10.0.0.1"), ToGroup(4)),
        FlowSet(Detour(5, "10.0.0.1"), Output(6)),
        FlowDel(Detour(5, "10.0.0.2")),
    ]
    gm, route, detour, delete = openflow.messages_for(dp, ops)
    assert (gm.type, gm.group_id) == (OFP.OFPGT_FF, 4)
    # the order is the preference: the primary first
    assert [(b.watch_port, b.weight, b.actions[0].port) for b in gm.buckets] == [
        (3, 0, 3),
        (1, 0, 1),
        (2, 0, 2),
    ]
    assert route.priority == openflow.PRIO_ROUTE
    assert detour.priority == openflow.PRIO_DETOUR > openflow.PRIO_ROUTE
    assert dict(detour.match.items()) == {"in_port": 5, "eth_type": 0x0800, "ipv4_dst": "10.0.0.1"}
    assert (delete.command, delete.priority) == (OFP.OFPFC_DELETE_STRICT, openflow.PRIO_DETOUR)
    assert dict(delete.match.items()) == {"in_port": 5, "eth_type": 0x0800, "ipv4_dst": "10.0.0.2"}
    for m in (gm, route, detour, delete):
        dp.send_msg(m)
    assert reparse(dp, detour).match["in_port"] == 5
    # and read back as the same program
    base, routes, groups, strays = openflow.read_state(dp, dp.flow_stats(), dp.group_desc())
    assert (base, strays) == (set(), [])
    assert groups == {("ff", (3, 1, 2)): 4}
    assert routes == {Route("10.0.0.1"): ToGroup(4), Detour(5, "10.0.0.1"): Output(6)}


def test_messages_for_rejects_an_unknown_operation():
    with pytest.raises(ValueError, match="group_mod"):
        openflow.messages_for(FakeDatapath(1), [("group_mod", 1, (1, 2))])  # not a routing operation
    assert openflow.messages_for(FakeDatapath(1), []) == []


# --- the event shim -------------------------------------------------------------------
@pytest.fixture
def hpn(tmp_path, monkeypatch):
    return make_app(tmp_path, monkeypatch, {"kind": "hpn"})


def test_bring_up_programs_every_switch_and_reports_routes(hpn, capsys):
    names = list(hpn.dps)
    for name in names:
        hpn.features(name)
        sent = hpn.dps[name].sent
        # the switch is asked what it holds; nothing is wiped; it held
        # nothing, so table 0's ARP and next-table flows are added
        assert [type(m) for m in sent] == [
            PARSER.OFPFlowStatsRequest,
            PARSER.OFPGroupDescStatsRequest,
            PARSER.OFPPortDescStatsRequest,
            PARSER.OFPFlowMod,
            PARSER.OFPFlowMod,
        ]
        assert sent[3].priority == openflow.PRIO_ARP and sent[3].command == OFP.OFPFC_ADD
        assert sent[4].priority == openflow.PRIO_NEXT and sent[4].command == OFP.OFPFC_ADD
    assert events(capsys) == [
        e
        for n in names
        for e in (
            {"event": "switch", "name": n},
            {"event": "adopted", "switch": n, "routes": 0, "groups": 0, "removed": 0},
        )
    ]

    # nothing is programmed until every switch has told us its ports
    for name in names[:-1]:
        hpn.port_desc(name)
    assert all(len(dp.sent) == 5 for dp in hpn.dps.values())
    hpn.port_desc(names[-1])

    expected = expected_tables(hpn.fabric)
    plain = compute_routes(hpn.fabric, set()).tables
    for name, dp in hpn.dps.items():
        assert isinstance(dp.sent[-1], PARSER.OFPBarrierRequest)
        assert installed_table(dp) == expected[name]
        assert installed_routes(dp) == plain[name]
        assert len(installed_routes(dp)) == len(hpn.fabric.nics)
    tor = hpn.dps["t0r0k0"].sent
    # one ECMP group, the ARP and next-table flows, 8 host routes and 8
    # detours (the 4 remote hosts, for what either aggregation switch hands
    # back up)
    assert sum(isinstance(m, PARSER.OFPGroupMod) for m in tor) == 1
    assert sum(isinstance(m, PARSER.OFPFlowMod) for m in tor) == 2 + 8 + 8
    # an aggregation switch: one fast-failover group per ToR below it
    agg = hpn.dps["a0n0"]
    assert sorted(t for t, _ in agg.groups.values()) == [OFP.OFPGT_FF] * 2
    changes = sum(
        isinstance(m, (PARSER.OFPGroupMod, PARSER.OFPFlowMod)) and m.table_id == openflow.TABLE_ROUTE
        if isinstance(m, PARSER.OFPFlowMod)
        else isinstance(m, PARSER.OFPGroupMod)
        for dp in hpn.dps.values()
        for m in dp.sent
    )
    # the version is announced as computed, before any switch confirmed it
    assert events(capsys) == [{"event": "overrides", "version": 1, "host_overrides": {}}]

    # barriers: a wrong xid and a partial set report nothing
    hpn.barrier(names[0], hpn.last_barrier_xid(names[0]) + 100)
    for name in names[:-1]:
        hpn.barrier(name, hpn.last_barrier_xid(name))
    assert events(capsys) == []
    hpn.barrier(names[-1], hpn.last_barrier_xid(names[-1]))
    assert events(capsys) == [
        {"event": "routes", "version": 1, "down": [], "changes": changes, "host_overrides": {}}
    ]
    # a repeated reply reports nothing more
    hpn.barrier(names[-1], hpn.last_barrier_xid(names[-1]))
    assert events(capsys) == []


def test_a_restarted_controller_adopts_the_tables_and_changes_nothing(tmp_path, monkeypatch, capsys):
    """Switches keep their tables while no controller runs; a new controller
    reads them back and finds nothing to change: no flow is deleted and
    added again (each flow's age survives), no group is added."""
    from controllers.hpn_app import HpnController

    first = make_app(tmp_path, monkeypatch, {"kind": "hpn"})
    first.connect()
    before = {n: (dp.ages(), dict(dp.groups)) for n, dp in first.dps.items()}
    routes = {n: installed_table(dp) for n, dp in first.dps.items()}
    events(capsys)

    again = Harness(first.fabric, HpnController())
    again.dps = first.dps  # the same switches, tables intact
    again.mark()
    again.connect()
    evs = events(capsys)
    adopted = {e["switch"]: e for e in evs if e["event"] == "adopted"}
    assert {n: e["routes"] for n, e in adopted.items()} == {n: len(r) for n, r in routes.items()}
    assert all(e["removed"] == 0 for e in adopted.values())
    assert evs[-1]["event"] == "routes" and evs[-1]["changes"] == 0
    for name, dp in again.dps.items():
        assert [type(m) for m in again.new(name)] == [
            PARSER.OFPFlowStatsRequest,
            PARSER.OFPGroupDescStatsRequest,
            PARSER.OFPPortDescStatsRequest,
            PARSER.OFPBarrierRequest,
        ]
        assert (dp.ages(), dp.groups) == before[name]
        assert installed_table(dp) == routes[name]


def test_adoption_removes_strays_and_repairs_what_is_missing(hpn, capsys):
    """A switch holding a flow of ours that fits no program, a route to an
    address the fabric does not have, and missing another route and its
    ARP flow: the stray and the unknown route go, the rest is put back, and
    the routes that were right keep their age."""
    hpn.connect()
    dp = hpn.dps["t0r0k0"]
    arp_key = next(k for k in dp.flows if k[1] == openflow.PRIO_ARP)
    del dp.flows[arp_key]
    gone = next(k for k in dp.flows if ("ipv4_dst", "10.0.0.1") in k[2] and k[1] == openflow.PRIO_ROUTE)
    del dp.flows[gone]
    dp.send_msg(openflow.messages_for(dp, [FlowSet(Route("10.9.9.9"), Output(1))])[0])
    stray = openflow.messages_for(dp, [FlowSet(Route("10.8.8.8"), Output(2))])[0]
    stray.priority = openflow.PRIO_ROUTE - 1
    dp.send_msg(stray)
    kept = {
        k: v
        for k, v in dp.ages().items()
        if not {("ipv4_dst", "10.9.9.9"), ("ipv4_dst", "10.8.8.8")} & set(k[2])
    }
    # a copy of a kept route in the classifier table: a stray there, removed
    # without taking the route (same priority and match) in the route table
    twin = openflow.messages_for(dp, [FlowSet(Route("10.0.0.2"), Output(1))])[0]
    twin.table_id = openflow.TABLE_CLASSIFY
    dp.send_msg(twin)
    assert any(
        k[0] == openflow.TABLE_ROUTE
        for k in kept
        if k[1:] == (openflow.PRIO_ROUTE, tuple(sorted(twin.match.items())))
    )
    events(capsys)

    hpn.features("t0r0k0")
    (adopted,) = [e for e in events(capsys) if e["event"] == "adopted"]
    assert adopted["removed"] == 2  # the odd-priority flow and the twin
    # 7 right routes, 10.9.9.9 and the 8 detours
    assert adopted["routes"] == len(hpn.fabric.nics) + 8
    hpn.port_desc("t0r0k0")
    hpn.ack_all()
    assert events(capsys)[-1]["changes"] == 2  # 10.0.0.1 back, 10.9.9.9 gone; nothing else
    assert installed_table(dp) == expected_tables(hpn.fabric)["t0r0k0"]
    assert any(k[1] == openflow.PRIO_ARP for k in dp.flows)
    assert not any(k[1] == openflow.PRIO_ROUTE - 1 for k in dp.flows)
    assert not any(k[0] == openflow.TABLE_CLASSIFY and k[1] == openflow.PRIO_ROUTE for k in dp.flows)
    ages = dp.ages()
    assert all(ages[k] == born for k, born in kept.items())


@pytest.mark.parametrize("how", ["admin-down", "deleted"])
def test_port_config_down_and_port_deletion_count_as_down(hpn, capsys, how):
    hpn.connect()
    events(capsys)
    if how == "admin-down":
        hpn.port_status("t0r0k1", 2, up=True, admin_down=True)
    else:
        hpn.port_status("t0r0k1", 2, up=True, reason=OFP.OFPPR_DELETE)
    port_ev, early = events(capsys)
    assert port_ev == {"event": "port", "switch": "t0r0k1", "port": 2, "up": False}
    hpn.ack_all()
    (ev,) = events(capsys)
    assert ev["down"] == [["t0r0k1", 2]]
    s0h1 = hpn.fabric.nic_by_ip("10.0.0.2")
    assert ev["host_overrides"]["s0h0"] == {s0h1.ip: ["s0h0-n0p0"]}
    assert early == {"event": "overrides", "version": ev["version"], "host_overrides": ev["host_overrides"]}


def test_reserved_ports_are_ignored(hpn, capsys):
    hpn.connect()
    events(capsys)
    hpn.mark()
    hpn.port_status("a0n0", OFP.OFPP_LOCAL, up=False)
    assert all(hpn.new(name) == [] for name in hpn.dps)
    assert hpn.app.core.down == set()


def test_unknown_datapath_is_ignored(hpn, capsys):
    stranger = FakeDatapath(0xBEEF)
    hpn.app.on_features(event(datapath=stranger, datapath_id=stranger.id))
    assert stranger.sent == []
    assert events(capsys) == []


def test_port_status_from_an_unknown_datapath_does_not_block_routes(hpn, capsys):
    hpn.connect()
    hpn.port_status("t1r0k0", 1, up=False)
    hpn.ack_all()
    events(capsys)
    stranger = FakeDatapath(0xBEEF)
    hpn.app.on_port_status(event(datapath=stranger, reason=OFP.OFPPR_MODIFY, desc=port(3, up=False)))
    assert stranger.sent == [] and events(capsys) == []
    assert all(name is not None for name, _ in hpn.app.core.down)
    # The controller still follows the real fabric afterwards.
    hpn.port_status("t1r0k0", 1, up=True)
    hpn.ack_all()
    assert events(capsys)[-1]["event"] == "routes"


def arp_request(src_mac, src_ip, dst_ip):
    pkt = packet.Packet()
    pkt.add_protocol(
        ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=src_mac, ethertype=ether_types.ETH_TYPE_ARP)
    )
    pkt.add_protocol(
        arp.arp(
            opcode=arp.ARP_REQUEST, src_mac=src_mac, src_ip=src_ip, dst_mac="00:00:00:00:00:00", dst_ip=dst_ip
        )
    )
    pkt.serialize()
    return bytes(pkt.data)


def packet_in(h, switch, in_port, data):
    dp = h.dps[switch]
    h.mark()
    h.app.on_packet_in(
        event(
            datapath=dp,
            data=data,
            match=PARSER.OFPMatch(in_port=in_port),
            buffer_id=OFP.OFP_NO_BUFFER,
            reason=OFP.OFPR_ACTION,
        )
    )
    return h.new(switch)


def test_proxy_arp_answers_with_the_nic_mac(hpn):
    hpn.connect()
    hpn.mark()
    src = hpn.fabric.nic_by_ip("10.0.0.2")
    dst = hpn.fabric.nic_by_ip("10.0.1.3")
    (out,) = packet_in(hpn, "t0r0k1", 2, arp_request(src.mac, src.ip, dst.ip))
    assert isinstance(out, PARSER.OFPPacketOut)
    assert out.in_port == OFP.OFPP_CONTROLLER and out.buffer_id == OFP.OFP_NO_BUFFER
    assert [a.port for a in out.actions] == [2]
    reply = packet.Packet(out.data)
    eth = reply.get_protocol(ethernet.ethernet)
    assert (eth.src, eth.dst, eth.ethertype) == (dst.mac, src.mac, ether_types.ETH_TYPE_ARP)
    a = reply.get_protocol(arp.arp)
    assert a.opcode == arp.ARP_REPLY
    assert (a.src_mac, a.src_ip, a.dst_mac, a.dst_ip) == (dst.mac, dst.ip, src.mac, src.ip)
    assert dst.mac == "02:00:0a:00:01:03"


def test_packet_in_without_an_answer_sends_nothing(hpn):
    hpn.connect()
    hpn.mark()
    src = hpn.fabric.nic_by_ip("10.0.0.1")
    # an address outside the fabric
    assert packet_in(hpn, "t0r0k0", 1, arp_request(src.mac, src.ip, "10.9.9.9")) == []
    # an ARP reply, not a request
    pkt = packet.Packet()
    pkt.add_protocol(
        ethernet.ethernet(dst="02:00:0a:00:01:01", src=src.mac, ethertype=ether_types.ETH_TYPE_ARP)
    )
    pkt.add_protocol(
        arp.arp(
            opcode=arp.ARP_REPLY,
            src_mac=src.mac,
            src_ip=src.ip,
            dst_mac="02:00:0a:00:01:01",
            dst_ip="10.0.1.1",
        )
    )
    pkt.serialize()
    assert packet_in(hpn, "t0r0k0", 1, bytes(pkt.data)) == []
    # plain IPv4
    pkt = packet.Packet()
    pkt.add_protocol(
        ethernet.ethernet(dst="02:00:0a:00:01:01", src=src.mac, ethertype=ether_types.ETH_TYPE_IP)
    )
    pkt.add_protocol(ipv4.ipv4(src=src.ip, dst="10.0.1.1", proto=17))
    pkt.serialize()
    assert packet_in(hpn, "t0r0k0", 1, bytes(pkt.data)) == []


def test_single_plane_dual_tor_failure_needs_no_overrides(tmp_path, monkeypatch, capsys):
    h = make_app(tmp_path, monkeypatch, {"kind": "hpn", "planes": 1, "dual_tor": True})
    h.connect()
    events(capsys)
    h.mark()
    h.port_status("t1r0k0", 1, up=False)
    expected = compute_routes(h.fabric, {("t1r0k0", 1)}).tables
    # the ToR that lost s1h0 now forwards it up to both aggs, through the
    # group it already has for remote destinations (no longer its
    # fast-failover group toward s1h0)
    new = h.new("t1r0k0")
    assert isinstance(new[-1], PARSER.OFPBarrierRequest)
    (flow,) = [m for m in new if isinstance(m, PARSER.OFPFlowMod) and m.priority == openflow.PRIO_ROUTE]
    assert flow.match["ipv4_dst"] == "10.0.1.1"
    (group,) = actions_of(flow)
    assert h.dps["t1r0k0"].groups[group.group_id][0] == OFP.OFPGT_SELECT
    assert installed_routes(h.dps["t1r0k0"]) == expected["t1r0k0"]
    assert len(expected["t1r0k0"]["10.0.1.1"]) == 2
    tables = expected_tables(h.fabric, {("t1r0k0", 1)})
    for name, dp in h.dps.items():
        assert installed_table(dp) == tables[name]
    h.ack_all()
    last = events(capsys)[-1]
    assert last.pop("changes") > 0
    assert last == {"event": "routes", "version": 2, "down": [["t1r0k0", 1]], "host_overrides": {}}


def test_the_switches_repair_an_agg_tor_link_before_the_controller_hears_of_it(hpn, capsys):
    """Executing what the controller installed: with the link a0n0-t0r0k0
    down and no port status sent, every packet from segment 1 to s0h0 in
    plane 0 still arrives (a0n0's fast-failover group hands it to t1r0k0,
    whose detour takes it up a0n1), and none loops."""
    hpn.connect()
    fabric = hpn.fabric
    (link,) = fabric.links_between("a0n0", "t0r0k0")
    dead = {(link.a.node, link.a.port), (link.b.node, link.b.port)}
    far = {}
    for l in fabric.links:
        far[(l.a.node, l.a.port)] = l.b
        far[(l.b.node, l.b.port)] = l.a
    target = fabric.nic_by_ip("10.0.0.1")
    arrived, hops_seen = 0, set()
    for src in ("s1h0", "s1h1", "s1h2", "s1h3"):
        (access,) = [l for l in fabric.links_of(src) if l.end(src).port == 0]
        frontier = [(access.other(src), 0)]
        while frontier:
            end, hops = frontier.pop()
            assert hops < 8, "a loop"
            if end.node == target.host:
                arrived += 1
                continue
            assert fabric.nodes[end.node].is_switch, end.node
            outs = hpn.dps[end.node].forward(end.port, target.ip, {p for n, p in dead if n == end.node})
            assert outs, f"dropped at {end.node}"
            hops_seen.add(hops)
            frontier += [(far[(end.node, p)], hops + 1) for p in outs]
    # 4 sources x 2 uplinks each; the branch through a0n0 takes 2 more hops
    assert arrived == 8 and max(hops_seen) == 4


def test_a_switchs_replies_are_heard_before_os_ken_calls_it_ready():
    """os-ken moves an OpenFlow 1.3 switch to MAIN only when its own port
    description request is answered; the controller asks for the switch's
    flows, groups and ports at the features reply, and those answers may
    come first. Every reply the controller waits on is heard in CONFIG too."""
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER

    from controllers.hpn_app import HpnController

    waited_on = {
        HpnController.on_flow_stats: ofp_event.EventOFPFlowStatsReply,
        HpnController.on_group_desc: ofp_event.EventOFPGroupDescStatsReply,
        HpnController.on_port_desc: ofp_event.EventOFPPortDescStatsReply,
        HpnController.on_barrier: ofp_event.EventOFPBarrierReply,
    }
    for handler, ev_class in waited_on.items():
        heard_in = set(handler.callers[ev_class].dispatchers)
        assert {CONFIG_DISPATCHER, MAIN_DISPATCHER} <= heard_in, handler.__name__
