"""Routes and traces over every topology kind with failures (testbed.fabric.paths), and
the controller's switch programs and proxy ARP (controllers.routing)."""

import pytest

from controllers.routing import (
    ECMP,
    FAILOVER,
    Detour,
    FlowDel,
    FlowSet,
    GroupAdd,
    Hops,
    Mark,
    Output,
    Pin,
    Route,
    SetDscp,
    SwitchProgram,
    ToGroup,
    arp_reply_for,
    diff_switch,
    wanted_table,
)
from testbed.fabric.build import build_fabric
from testbed.fabric.model import AGG, TOR
from testbed.fabric.paths import compute_routes, trace

TOPOLOGIES = {
    "hpn-default": {"kind": "hpn"},
    "hpn-1plane-dualtor": {"kind": "hpn", "planes": 1, "dual_tor": True},
    "hpn-1plane-singletor": {"kind": "hpn", "planes": 1, "dual_tor": False},
    "hpn-2rails": {"kind": "hpn", "rails": 2},
    "clos": {"kind": "clos"},
    "fat-tree-k4": {"kind": "fat-tree", "k": 4},
    "region-2hpn": {
        "kind": "region",
        "fabrics": [{"kind": "hpn"}, {"kind": "hpn"}],
        "dci": {"oversubscription": 2},
    },
}


# --- helpers -----------------------------------------------------------------
def access_end(fabric, ifname):
    """(switch, OpenFlow port) at the far end of the access link of a NIC port."""
    host = fabric.nic_of_ifname(ifname).host
    for link in fabric.links_of(host):
        if link.end(host).ifname == ifname:
            far = link.other(host)
            return far.node, far.port
    raise KeyError(ifname)


def switch_ports(fabric, switch):
    return {link.end(switch).port for link in fabric.links_of(switch)}


def port_towards(fabric, switch, neighbour):
    (link,) = fabric.links_between(switch, neighbour)
    return link.end(switch).port


def unreachable(fabric, routes, srcs=None, dsts=None, chooses=(min, max)):
    """Every (src ifname, dst ip, choose) whose trace does not end at the
    destination host. Pairs are NIC ports to the other NICs of the same rail."""
    bad = []
    for src in fabric.nics:
        if srcs is not None and src.host not in srcs:
            continue
        for dst in fabric.nics:
            if dst.host == src.host or dst.rail != src.rail:
                continue
            if dsts is not None and dst.host not in dsts:
                continue
            for port in src.ports:
                for choose in chooses:
                    path = trace(fabric, routes, port, dst.ip, choose=choose)
                    if path is None or path[-1] != dst.host:
                        bad.append((port, dst.ip, choose.__name__, path))
    return bad


def nic(fabric, host, rail=0):
    (n,) = [n for n in fabric.nics_of(host) if n.rail == rail]
    return n


# --- reachability without failures --------------------------------------------
@pytest.mark.parametrize("params", TOPOLOGIES.values(), ids=TOPOLOGIES.keys())
def test_all_pairs_reachable_without_failures(params):
    fabric = build_fabric(params)
    routes = compute_routes(fabric, set())
    assert routes.host_overrides == {}
    # every switch knows every NIC when nothing is down
    all_ips = {n.ip for n in fabric.nics}
    for sw in fabric.switches():
        assert set(routes.tables[sw.name]) == all_ips, sw.name
    pairs = sum(len(n.ports) for n in fabric.nics)
    assert pairs > 0
    assert unreachable(fabric, routes) == []


def test_region_traces_cross_the_dci():
    fabric = build_fabric(TOPOLOGIES["region-2hpn"])
    routes = compute_routes(fabric)
    src, dst = nic(fabric, "d0s0h0"), nic(fabric, "d1s1h3")
    for plane, port in enumerate(src.ports):
        path = trace(fabric, routes, port, dst.ip)
        assert path[-1] == "d1s1h3"
        kinds = [fabric.nodes[n].kind for n in path[:-1]]
        assert kinds == ["tor", "agg", "border", "border", "agg", "tor"]
        assert [fabric.nodes[n].dc for n in path[:-1]] == [0, 0, 0, 1, 1, 1]
        assert {fabric.nodes[n].plane for n in path[:-1]} == {plane}


def test_fat_tree_cross_pod_path_goes_through_a_core():
    fabric = build_fabric({"kind": "fat-tree", "k": 4})
    routes = compute_routes(fabric)
    src, dst = nic(fabric, "p0e0h0"), nic(fabric, "p3e1h1")
    path = trace(fabric, routes, src.ports[0], dst.ip)
    assert [fabric.nodes[n].kind for n in path[:-1]] == ["tor", "agg", "core", "agg", "tor"]
    # same edge: one switch; same pod, other edge: edge-agg-edge
    assert trace(fabric, routes, src.ports[0], nic(fabric, "p0e0h1").ip) == ["p0e0", "p0e0h1"]
    same_pod = trace(fabric, routes, src.ports[0], nic(fabric, "p0e1h0").ip)
    assert [fabric.nodes[n].kind for n in same_pod[:-1]] == ["tor", "agg", "tor"]


@pytest.mark.parametrize("choose", [min, max])
def test_dual_plane_paths_stay_in_the_plane_of_the_port(choose):
    fabric = build_fabric({"kind": "hpn"})
    routes = compute_routes(fabric)
    checked = 0
    for src in fabric.nics:
        for dst in fabric.nics:
            if dst.host == src.host:
                continue
            for plane, port in enumerate(src.ports):
                path = trace(fabric, routes, port, dst.ip, choose=choose)
                switches = path[:-1]
                assert path[-1] == dst.host
                assert {fabric.nodes[s].plane for s in switches} == {plane}, (port, dst.ip, path)
                same_segment = fabric.nodes[src.host].segment == fabric.nodes[dst.host].segment
                kinds = [fabric.nodes[s].kind for s in switches]
                if same_segment:
                    assert kinds == [TOR]
                else:
                    assert kinds == [TOR, AGG, TOR]
                checked += 1
    assert checked == 8 * 7 * 2


def test_single_plane_dual_tor_intra_segment_uses_the_tor_of_the_port():
    fabric = build_fabric({"kind": "hpn", "planes": 1, "dual_tor": True})
    routes = compute_routes(fabric)
    src, dst = nic(fabric, "s0h0"), nic(fabric, "s0h3")
    assert trace(fabric, routes, src.ports[0], dst.ip) == ["t0r0k0", "s0h3"]
    assert trace(fabric, routes, src.ports[1], dst.ip) == ["t0r0k1", "s0h3"]


def test_trace_drops_an_address_outside_the_fabric():
    fabric = build_fabric({"kind": "hpn"})
    routes = compute_routes(fabric)
    assert trace(fabric, routes, "s0h0-n0p0", "192.168.7.7") is None


# --- ECMP -----------------------------------------------------------------------
def test_ecmp_tor_spreads_remote_destinations_over_both_aggs_of_its_plane():
    fabric = build_fabric({"kind": "hpn"})
    routes = compute_routes(fabric)
    for tor in ("t0r0k0", "t0r0k1"):
        plane = fabric.nodes[tor].plane
        up = tuple(sorted(port_towards(fabric, tor, f"a{plane}n{i}") for i in range(2)))
        assert len(up) == 2
        for remote in ("s1h0", "s1h3"):
            assert routes.tables[tor][nic(fabric, remote).ip] == up
        for local in ("s0h0", "s0h2"):
            ifname = nic(fabric, local).ports[plane]
            sw, port = access_end(fabric, ifname)
            assert sw == tor
            assert routes.tables[tor][nic(fabric, local).ip] == (port,)
    # an agg has exactly one way down to a host: the ToR of its plane
    assert routes.tables["a0n0"][nic(fabric, "s1h0").ip] == (port_towards(fabric, "a0n0", "t1r0k0"),)


# --- failures -------------------------------------------------------------------
def test_dual_plane_host_link_failure_uses_overrides_and_restores():
    fabric = build_fabric({"kind": "hpn"})
    before = compute_routes(fabric, set())
    target = nic(fabric, "s1h0")
    down = {access_end(fabric, target.ports[0])}
    assert down == {("t1r0k0", 1)}
    routes = compute_routes(fabric, down)

    for sw in fabric.switches():
        if sw.plane == 0:
            assert target.ip not in routes.tables[sw.name], sw.name
        else:
            assert routes.tables[sw.name][target.ip] == before.tables[sw.name][target.ip]

    expected = {n.host: {target.ip: (n.ports[1],)} for n in fabric.nics if n.host != "s1h0"}
    assert routes.host_overrides == expected

    # over plane 1 every other host still reaches s1h0; over plane 0 it is dropped
    for src in fabric.nics:
        if src.host == "s1h0":
            continue
        for choose in (min, max):
            path = trace(fabric, routes, src.ports[1], target.ip, choose=choose)
            assert path is not None and path[-1] == "s1h0"
        assert trace(fabric, routes, src.ports[0], target.ip) is None
    # nobody else is affected, and s1h0 still reaches everyone over its live port
    others = {h.name for h in fabric.hosts()} - {"s1h0"}
    assert unreachable(fabric, routes, srcs=others, dsts=others) == []
    for dst in fabric.nics:
        if dst.host != "s1h0":
            assert trace(fabric, routes, target.ports[1], dst.ip)[-1] == dst.host

    restored = compute_routes(fabric, set())
    assert restored.host_overrides == {}
    assert restored.tables == before.tables


def test_single_plane_dual_tor_host_link_failure_is_bridged_by_the_aggs():
    fabric = build_fabric({"kind": "hpn", "planes": 1, "dual_tor": True})
    before = compute_routes(fabric)
    target = nic(fabric, "s1h0")
    failed_sw, failed_port = access_end(fabric, target.ports[0])
    assert failed_sw == "t1r0k0"
    routes = compute_routes(fabric, {(failed_sw, failed_port)})

    for agg in ("a0n0", "a0n1"):
        assert before.tables[agg][target.ip] == tuple(
            sorted([port_towards(fabric, agg, "t1r0k0"), port_towards(fabric, agg, "t1r0k1")])
        )
        assert routes.tables[agg][target.ip] == (port_towards(fabric, agg, "t1r0k1"),)
    # the ToR that lost the host now sends it up, over both aggs
    up = tuple(sorted(port_towards(fabric, "t1r0k0", a) for a in ("a0n0", "a0n1")))
    assert routes.tables["t1r0k0"][target.ip] == up
    assert failed_port not in routes.tables["t1r0k0"][target.ip]
    assert routes.host_overrides == {}
    # a neighbour in the same segment, sending on the broken ToR, detours via an agg
    path = trace(fabric, routes, nic(fabric, "s1h1").ports[0], target.ip)
    assert [fabric.nodes[n].kind for n in path] == ["tor", "agg", "tor", "host"]
    assert path[0] == "t1r0k0" and path[2] == "t1r0k1"
    # every port of every other host reaches s1h0, both ECMP extremes
    assert unreachable(fabric, routes, dsts={"s1h0"}) == []
    others = {h.name for h in fabric.hosts()} - {"s1h0"}
    assert unreachable(fabric, routes, srcs=others) == []


def test_single_tor_host_link_failure_isolates_the_host():
    fabric = build_fabric({"kind": "hpn", "planes": 1, "dual_tor": False})
    target = nic(fabric, "s0h0")
    assert len(target.ports) == 1
    routes = compute_routes(fabric, {access_end(fabric, target.ports[0])})
    for sw in fabric.switches():
        assert target.ip not in routes.tables[sw.name]
    assert routes.host_overrides == {}
    for src in fabric.nics:
        if src.host != "s0h0":
            assert trace(fabric, routes, src.ports[0], target.ip) is None
    others = {h.name for h in fabric.hosts()} - {"s0h0"}
    assert unreachable(fabric, routes, srcs=others, dsts=others) == []


@pytest.mark.parametrize("side", ["tor", "agg"])
def test_agg_tor_link_failure_shrinks_ecmp(side):
    fabric = build_fabric({"kind": "hpn"})
    (link,) = fabric.links_between("t0r0k0", "a0n0")
    end = link.end("t0r0k0" if side == "tor" else "a0n0")
    routes = compute_routes(fabric, {(end.node, end.port)})
    remaining = (port_towards(fabric, "t0r0k0", "a0n1"),)
    for remote in ("s1h0", "s1h1", "s1h2", "s1h3"):
        assert routes.tables["t0r0k0"][nic(fabric, remote).ip] == remaining
    # the other ToR of plane 0 can reach segment 0 only through a0n1 now
    for local in ("s0h0", "s0h3"):
        assert routes.tables["t1r0k0"][nic(fabric, local).ip] == (port_towards(fabric, "t1r0k0", "a0n1"),)
    # plane 1 is untouched
    assert routes.tables["t0r0k1"][nic(fabric, "s1h0").ip] == tuple(
        sorted(port_towards(fabric, "t0r0k1", a) for a in ("a1n0", "a1n1"))
    )
    assert routes.host_overrides == {}
    assert unreachable(fabric, routes) == []


def test_failing_either_end_of_a_fabric_link_gives_the_same_tables():
    fabric = build_fabric({"kind": "hpn"})
    (link,) = fabric.links_between("t1r0k1", "a1n1")
    one = compute_routes(fabric, {(link.a.node, link.a.port)})
    other = compute_routes(fabric, {(link.b.node, link.b.port)})
    both = compute_routes(fabric, {(link.a.node, link.a.port), (link.b.node, link.b.port)})
    assert one.tables == other.tables == both.tables
    assert one.tables != compute_routes(fabric).tables


def test_whole_agg_failure_keeps_all_pairs_reachable():
    fabric = build_fabric({"kind": "hpn"})
    down = {("a0n0", p) for p in switch_ports(fabric, "a0n0")}
    assert len(down) == 2
    routes = compute_routes(fabric, down)
    assert routes.tables["a0n0"] == {}
    for tor in ("t0r0k0", "t1r0k0"):
        for dst in fabric.nics:
            if fabric.nodes[dst.host].segment != fabric.nodes[tor].segment:
                assert routes.tables[tor][dst.ip] == (port_towards(fabric, tor, "a0n1"),)
    assert routes.host_overrides == {}
    assert unreachable(fabric, routes) == []
    for src in fabric.nics:
        for dst in fabric.nics:
            if dst.host != src.host:
                assert "a0n0" not in trace(fabric, routes, src.ports[0], dst.ip, choose=min)
                assert "a0n0" not in trace(fabric, routes, src.ports[0], dst.ip, choose=max)


def test_losing_a_whole_plane_of_aggs_overrides_remote_destinations_only():
    fabric = build_fabric({"kind": "hpn"})
    down = {(a, p) for a in ("a0n0", "a0n1") for p in switch_ports(fabric, a)}
    routes = compute_routes(fabric, down)
    for src in fabric.nics:
        seg = fabric.nodes[src.host].segment
        expected = {dst.ip: (src.ports[1],) for dst in fabric.nics if fabric.nodes[dst.host].segment != seg}
        assert routes.host_overrides[src.host] == expected
    assert unreachable(fabric, routes, chooses=(min,)) != []
    # following the overrides (plane 1 for remote, any port for local) works
    for src in fabric.nics:
        for dst in fabric.nics:
            if dst.host == src.host:
                continue
            ports = routes.host_overrides[src.host].get(dst.ip, src.ports)
            for port in ports:
                assert trace(fabric, routes, port, dst.ip)[-1] == dst.host


def test_region_dci_failure_moves_cross_dc_traffic_to_the_other_plane():
    fabric = build_fabric(TOPOLOGIES["region-2hpn"])
    (dci,) = [l for l in fabric.links if l.kind == "dci" and l.plane == 0]
    routes = compute_routes(fabric, {(dci.a.node, dci.a.port)})
    for src in fabric.nics:
        dc = fabric.nodes[src.host].dc
        remote = {dst.ip: (src.ports[1],) for dst in fabric.nics if fabric.nodes[dst.host].dc != dc}
        assert len(remote) == 8
        assert routes.host_overrides[src.host] == remote
        for ip in remote:
            assert trace(fabric, routes, src.ports[0], ip) is None
            path = trace(fabric, routes, src.ports[1], ip)
            assert path[-1] == fabric.nic_by_ip(ip).host
            assert dci.a.node not in path
    # traffic inside a DC is untouched
    d0 = {h.name for h in fabric.hosts() if h.dc == 0}
    assert unreachable(fabric, routes, srcs=d0, dsts=d0) == []


def test_multi_rail_overrides_use_the_nic_of_the_destination_rail():
    fabric = build_fabric({"kind": "hpn", "rails": 2})
    target = nic(fabric, "s1h0", rail=0)
    routes = compute_routes(fabric, {access_end(fabric, target.ports[0])})
    # observed: {'10.0.1.1': ('s0h0-n1p1',)}, a port of the rail-1 NIC
    for host in fabric.hosts():
        if host.name != "s1h0":
            assert routes.host_overrides[host.name] == {target.ip: (nic(fabric, host.name, 0).ports[1],)}


# --- diff_switch ------------------------------------------------------------------
def apply_ops(switch, ops):
    """A model switch: rejects a group id that exists, a flow pointing at a
    missing group, deletion of a flow it does not have."""
    for op in ops:
        if isinstance(op, GroupAdd):
            assert op.gid not in switch["groups"], f"group {op.gid} exists"
            switch["groups"][op.gid] = (op.kind, op.ports)
        elif isinstance(op, FlowSet):
            if isinstance(op.action, ToGroup):
                assert op.action.gid in switch["groups"], f"flow {op.match} to missing group {op.action.gid}"
            switch["flows"][op.match] = op.action
        elif isinstance(op, FlowDel):
            assert op.match in switch["flows"]
            del switch["flows"][op.match]
        else:
            raise AssertionError(op)


def forwarding(switch):
    """{match: Hops} as the model switch holds it, in wanted_table's terms."""
    out = {}
    for key, action in switch["flows"].items():
        if isinstance(action, Output):
            out[key] = Hops(ECMP, (action.port,))
        else:
            gkind, ports = switch["groups"][action.gid]
            out[key] = Hops(ECMP if gkind == "select" else FAILOVER, ports)
    return out


def plain(table):
    """{ip: ports} wanted for every packet, as the tests write them."""
    return {Route(ip): Hops(ECMP, ports) for ip, ports in table.items()}


def test_diff_from_empty_adds_groups_before_the_flows_that_use_them():
    wanted = plain({"10.0.1.1": (5, 6), "10.0.0.1": (1,), "10.0.1.2": (5, 6)})
    wanted[Route("10.0.0.2")] = Hops(FAILOVER, (2, 5))
    wanted[Detour(6, "10.0.1.3")] = Hops(ECMP, (5,))
    ops, prog = diff_switch(SwitchProgram(), wanted)
    assert ops == [
        FlowSet(Route("10.0.0.1"), Output(1)),
        GroupAdd(1, "ff", (2, 5)),
        FlowSet(Route("10.0.0.2"), ToGroup(1)),
        GroupAdd(2, "select", (5, 6)),
        FlowSet(Route("10.0.1.1"), ToGroup(2)),
        FlowSet(Route("10.0.1.2"), ToGroup(2)),
        FlowSet(Detour(6, "10.0.1.3"), Output(5)),
    ]
    assert prog.groups == {("ff", (2, 5)): 1, ("select", (5, 6)): 2}
    again, prog2 = diff_switch(prog, wanted)
    assert again == []
    assert prog2 == prog


def test_diff_removal_and_group_reuse():
    ops, prog = diff_switch(SwitchProgram(), plain({"10.0.1.1": (5, 6), "10.0.0.1": (1,)}))
    ops, prog = diff_switch(prog, plain({"10.0.1.1": (5, 6)}))
    assert ops == [FlowDel(Route("10.0.0.1"))]
    # shrink to one port: a plain output, the group is kept
    ops, prog = diff_switch(prog, plain({"10.0.1.1": (6,)}))
    assert ops == [FlowSet(Route("10.0.1.1"), Output(6))]
    assert prog.groups == {("select", (5, 6)): 1}
    # back to the known set: the old group is reused, nothing is added
    ops, prog = diff_switch(prog, plain({"10.0.1.1": (5, 6)}))
    assert ops == [FlowSet(Route("10.0.1.1"), ToGroup(1))]
    # a new set gets a new id; the same ports in failover order are another group
    ops, prog = diff_switch(prog, plain({"10.0.1.1": (5, 7)}))
    assert ops == [GroupAdd(2, "select", (5, 7)), FlowSet(Route("10.0.1.1"), ToGroup(2))]
    ops, prog = diff_switch(prog, {Route("10.0.1.1"): Hops(FAILOVER, (7, 5))})
    assert ops == [GroupAdd(3, "ff", (7, 5)), FlowSet(Route("10.0.1.1"), ToGroup(3))]
    assert prog.groups == {("select", (5, 6)): 1, ("select", (5, 7)): 2, ("ff", (7, 5)): 3}


@pytest.mark.parametrize(
    "params", [{"kind": "hpn", "aggs_per_plane": 3}, {"kind": "hpn", "planes": 1, "dual_tor": False}]
)
def test_diff_sequence_over_failures_keeps_a_switch_consistent(params):
    fabric = build_fabric(params)
    t0 = "t0r0k0"
    a0, a1 = "a0n0", "a0n1"
    scenarios = [
        set(),
        {(a0, port_towards(fabric, a0, t0))},
        {(a1, p) for p in switch_ports(fabric, a1)},
        {access_end(fabric, nic(fabric, "s0h1").ports[0])},
        {(t0, port_towards(fabric, t0, a1))},
        set(),
    ]
    switches = {s.name: {"groups": {}, "flows": {}} for s in fabric.switches()}
    programs = {s.name: SwitchProgram() for s in fabric.switches()}
    for down in scenarios:
        routes = compute_routes(fabric, down)
        for name in switches:
            ops, programs[name] = diff_switch(programs[name], wanted_table(routes, name))
            apply_ops(switches[name], ops)
            assert forwarding(switches[name]) == wanted_table(routes, name), (name, down)
            gids = list(programs[name].groups.values())
            assert len(gids) == len(set(gids))


def test_wanted_table_puts_backups_behind_the_single_next_hop():
    fabric = build_fabric({"kind": "hpn"})
    routes = compute_routes(fabric)
    table = wanted_table(routes, "a0n0")
    s0h0 = nic(fabric, "s0h0").ip
    down = port_towards(fabric, "a0n0", "t0r0k0")
    assert table[Route(s0h0)] == Hops(FAILOVER, (down, port_towards(fabric, "a0n0", "t1r0k0")))
    detour = wanted_table(routes, "t1r0k0")[Detour(port_towards(fabric, "t1r0k0", "a0n0"), s0h0)]
    assert detour == Hops(ECMP, (port_towards(fabric, "t1r0k0", "a0n1"),))
    # a ToR's uplinks are already a group of equal-cost ports: no backup
    assert wanted_table(routes, "t1r0k0")[Route(s0h0)].kind == ECMP


# --- proxy ARP ------------------------------------------------------------------
def test_arp_reply_for_fabric_and_outside_addresses():
    fabric = build_fabric({"kind": "hpn", "rails": 2})
    assert arp_reply_for(fabric, "10.0.1.1") == "02:00:0a:00:01:01"
    assert arp_reply_for(fabric, "10.1.0.4") == "02:00:0a:01:00:04"
    assert arp_reply_for(fabric, "10.0.1.1") == nic(fabric, "s1h0").mac
    assert arp_reply_for(fabric, "10.0.9.9") is None
    assert arp_reply_for(fabric, "192.168.0.1") is None


# --- local repair: the data plane before the controller reacts -----------------
def walk(fabric, routes, src_ifname, dst_ip, dead, max_hops=16):
    """Every outcome of a packet from a NIC port to `dst_ip` over the
    installed routes while the links in `dead` are down and the controller
    has not reacted: switches skip dead ports of a group (select: any live
    one; fast-failover: the first live one) and apply detours by in_port.
    Returns a set of "delivered", "dropped", "loop"."""
    far = {}
    for link in fabric.links:
        far[(link.a.node, link.a.port)] = (link.b, link)
        far[(link.b.node, link.b.port)] = (link.a, link)
    host = fabric.nic_of_ifname(src_ifname).host
    (start,) = [l for l in fabric.links_of(host) if l.end(host).ifname == src_ifname]
    if start in dead:
        return {"dropped"}
    outcomes = set()
    frontier = [(start.other(host), 0)]
    while frontier:
        end, hops = frontier.pop()
        node = fabric.nodes[end.node]
        if not node.is_switch:
            ok = any(n.ip == dst_ip for n in fabric.nics_of(node.name))
            outcomes.add("delivered" if ok else "dropped")
            continue
        if hops > max_hops:
            outcomes.add("loop")
            continue
        ports, first_only = choices(routes, node.name, end.port, dst_ip)
        live = [p for p in ports if far[(node.name, p)][1] not in dead]
        if first_only:
            live = live[:1]
        if not live:
            outcomes.add("dropped")
        frontier += [(far[(node.name, p)][0], hops + 1) for p in live]
    return outcomes


def choices(routes, switch, in_port, ip):
    """(ports, whether only the first live one is taken) at `switch`."""
    detour = routes.detours[switch].get((in_port, ip))
    if detour is not None:
        return detour, False
    ports = routes.tables[switch].get(ip, ())
    if ip in routes.backups[switch]:
        return ports + routes.backups[switch][ip], True
    return ports, False


def outcomes_after(fabric, dead_links):
    """{(src port, dst ip): outcomes} for every pair of the same rail, over
    the routes of the healthy fabric (nothing recomputed)."""
    routes = compute_routes(fabric)
    out = {}
    for src in fabric.nics:
        for dst in fabric.nics:
            if dst.host != src.host and dst.rail == src.rail:
                for port in src.ports:
                    out[(port, dst.ip)] = walk(fabric, routes, port, dst.ip, dead_links)
    return out


def fabric_links(fabric, kind=None):
    return [l for l in fabric.links if kind is None or l.kind == kind]


@pytest.mark.parametrize("params", TOPOLOGIES.values(), ids=TOPOLOGIES.keys())
def test_local_repair_never_loops_whatever_link_fails(params):
    fabric = build_fabric(params)
    for link in fabric.links:
        for key, outcomes in outcomes_after(fabric, {link}).items():
            assert "loop" not in outcomes, (link.name, key)


@pytest.mark.parametrize(
    "params",
    [
        TOPOLOGIES["hpn-default"],
        TOPOLOGIES["hpn-1plane-dualtor"],
        TOPOLOGIES["hpn-1plane-singletor"],
        TOPOLOGIES["clos"],
    ],
    ids=["hpn", "hpn-1plane-dualtor", "hpn-1plane-singletor", "clos"],
)
def test_a_tor_agg_link_or_an_agg_failing_is_repaired_in_the_data_plane(params):
    """Every pair still delivers on every branch, before any recomputation:
    a ToR skips the dead uplink of its group, an aggregation switch that
    lost its only way down hands the packet to another ToR, which takes it
    up another aggregation switch (a non-equal-cost backup)."""
    fabric = build_fabric(params)
    aggs = [n.name for n in fabric.switches() if n.kind == AGG]
    failures = [{l} for l in fabric_links(fabric, "fabric")]
    failures += [set(fabric.links_of(a)) for a in aggs]
    for dead in failures:
        for key, outcomes in outcomes_after(fabric, dead).items():
            assert outcomes == {"delivered"}, ([l.name for l in dead], key, outcomes)


def test_without_backups_an_agg_losing_its_way_down_drops():
    """The same walk with the backups and detours taken away: the test above
    can fail."""
    fabric = build_fabric({"kind": "hpn"})
    routes = compute_routes(fabric)
    routes.backups = {s: {} for s in routes.backups}
    routes.detours = {s: {} for s in routes.detours}
    (link,) = fabric.links_between("a0n0", "t0r0k0")
    outcomes = set()
    for src in ("s1h0", "s1h1"):
        outcomes |= walk(fabric, routes, nic(fabric, src).ports[0], nic(fabric, "s0h0").ip, {link})
    assert outcomes == {"delivered", "dropped"}


def test_host_link_failure_repair_depends_on_a_second_tor_in_the_plane():
    """Dual-ToR in one plane: the ToR that lost the host hands its packets
    up, and the aggregation switches take them down to the other ToR. Dual
    plane: no switch of that plane reaches the host any more; senders in
    it need the controller (host overrides)."""
    for params, expected in (
        ({"kind": "hpn", "planes": 1, "dual_tor": True}, {"delivered"}),
        ({"kind": "hpn"}, {"dropped"}),
    ):
        fabric = build_fabric(params)
        target = nic(fabric, "s0h0")
        (link,) = [l for l in fabric.links_of("s0h0") if l.end("s0h0").ifname == target.ports[0]]
        tor = link.other("s0h0").node
        results = outcomes_after(fabric, {link})
        routes = compute_routes(fabric)
        checked = 0
        for src in fabric.nics:
            if src.host == "s0h0":
                continue
            for port in src.ports:
                # packets that reach the ToR that lost the host
                if tor in trace(fabric, routes, port, target.ip):
                    assert results[(port, target.ip)] == expected, (params, port)
                    checked += 1
        assert checked >= 3


def test_a_pin_and_a_mark_of_one_connection_are_two_entries():
    fabric = build_fabric({"kind": "hpn"})
    routes = compute_routes(fabric)
    conn = (nic(fabric, "s1h0").ip, nic(fabric, "s0h0").ip, 49152)
    table = wanted_table(routes, "t0r0k0", pins={conn: (5, 6)}, marks={conn: 46})
    assert table[Pin(*conn)] == Hops(FAILOVER, (5, 6))
    assert table[Mark(*conn)] == SetDscp(46)
    ops, _ = diff_switch(SwitchProgram(), table)
    assert [op.match for op in ops if isinstance(op, FlowSet)][-2:] == [Pin(*conn), Mark(*conn)]
