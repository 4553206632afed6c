"""Paths through the fabric model: the routes a switch fabric computes for
every NIC address, and the trace of a packet along them.

Pure. Given the fabric model and the switch ports that are down, every
switch gets the next hops toward every NIC address (/32 host routes, like
the ToRs of HPN turning ARP into /32 routes and withdrawing them when the
host link fails), spreading over all equal-cost next hops; hosts are never
transit. The controller installs these routes; drills trace them to know
the path a flow takes on a healthy fabric.
"""
from collections import deque
from dataclasses import dataclass, field


@dataclass
class Routes:
    # switch -> {nic ip -> tuple of output ports (sorted; >1 means ECMP)}
    tables: dict = field(default_factory=dict)
    # host -> {destination ip -> tuple of host ifnames that still reach it},
    # only where some live port of the source cannot reach the destination
    # (dual-plane: the destination lost its port in that plane).
    host_overrides: dict = field(default_factory=dict)


def live_links(fabric, down_ports):
    """Links whose switch ends are all up. `down_ports` holds (switch, port)."""
    out = []
    for link in fabric.links:
        ends = [e for e in (link.a, link.b) if fabric.nodes[e.node].is_switch]
        if not any((e.node, e.port) in down_ports for e in ends):
            out.append(link)
    return out


def compute_routes(fabric, down_ports=frozenset()):
    links = live_links(fabric, down_ports)
    # Switch adjacency: switch -> [(neighbour switch, local port)]
    adj = {s.name: [] for s in fabric.switches()}
    # NIC port ifname -> (tor, tor port) for live access links
    attach = {}
    for link in links:
        a, b = link.a, link.b
        a_sw, b_sw = fabric.nodes[a.node].is_switch, fabric.nodes[b.node].is_switch
        if a_sw and b_sw:
            adj[a.node].append((b.node, a.port))
            adj[b.node].append((a.node, b.port))
        elif b_sw:
            attach[a.ifname] = (b.node, b.port)
        elif a_sw:
            attach[b.ifname] = (a.node, a.port)

    routes = Routes(tables={s: {} for s in adj})
    for nic in fabric.nics:
        roots = [attach[p] for p in nic.ports if p in attach]
        for sw, ports in _next_hops(adj, roots).items():
            routes.tables[sw][nic.ip] = ports
    routes.host_overrides = _host_overrides(fabric, routes.tables, attach)
    return routes


def _next_hops(adj, roots):
    """Multi-source BFS from the ToR(s) a NIC hangs off; every switch gets the
    ports of all its neighbours one hop closer (equal-cost multipath)."""
    dist, hops = {}, {}
    for sw, port in roots:
        dist[sw] = 0
        hops.setdefault(sw, set()).add(port)
    queue = deque(sw for sw, _ in roots)
    while queue:
        sw = queue.popleft()
        for nb, _ in adj[sw]:
            if nb not in dist:
                dist[nb] = dist[sw] + 1
                queue.append(nb)
    for sw, d in dist.items():
        if d == 0:
            continue
        hops[sw] = {port for nb, port in adj[sw] if dist.get(nb) == d - 1}
    return {sw: tuple(sorted(p)) for sw, p in hops.items()}


def _host_overrides(fabric, tables, attach):
    out = {}
    for src in fabric.nics:
        live = [p for p in src.ports if p in attach]
        if len(live) < 2:
            continue
        for dst in fabric.nics:
            if dst.host == src.host or dst.rail != src.rail:
                continue  # a NIC only talks to its own rail
            ok = tuple(p for p in live if dst.ip in tables[attach[p][0]])
            if ok and len(ok) < len(live):
                out.setdefault(src.host, {})[dst.ip] = ok
    return out


def trace(fabric, routes, src_ifname, dst_ip, choose=min, max_hops=16):
    """Follow the tables from a NIC port to `dst_ip`: the list of switches
    visited, ending with the destination host, or None when the packet would
    be dropped. `choose` picks one port among equal-cost ones."""
    by_end = {}
    for link in fabric.links:
        by_end[(link.a.node, link.a.port)] = link.b
        by_end[(link.b.node, link.b.port)] = link.a
    host = fabric.nic_of_ifname(src_ifname).host
    end = None
    for link in fabric.links_of(host):
        if link.end(host).ifname == src_ifname:
            end = link.other(host)
    path = []
    while end is not None and len(path) < max_hops:
        node = fabric.nodes[end.node]
        if not node.is_switch:
            return path + [node.name] if any(n.ip == dst_ip for n in fabric.nics_of(node.name)) else None
        path.append(node.name)
        ports = routes.tables.get(node.name, {}).get(dst_ip)
        if not ports:
            return None
        end = by_end.get((node.name, choose(ports)))
    return None
