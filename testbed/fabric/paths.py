"""Paths through the fabric model: the routes a switch fabric computes for
every NIC address, and the trace of a packet along them.

Pure. Given the fabric model and the switch ports that are down, every
switch gets the next hops toward every NIC address (/32 host routes, like
the ToRs of HPN turning ARP into /32 routes and withdrawing them when the
host link fails), spreading over all equal-cost next hops; hosts are never
transit. The controller installs these routes; drills trace them to know
the path a flow takes on a healthy fabric.

Where a switch has a single next hop toward a NIC, it also gets backups for
local repair (fast-failover groups): ports to neighbours that reach the NIC
without coming back through it, even over a longer path, plus the detour
rule each such neighbour needs so that it does not hand the packet straight
back. Multi-port next hops need none: the switch skips a dead port of an
ECMP group by itself.
"""

from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from .model import Fabric


@dataclass
class Routes:
    # switch -> {nic ip -> tuple of output ports (sorted; >1 means ECMP)}
    tables: dict = field(default_factory=dict)
    # host -> {destination ip -> tuple of host ifnames that still reach it},
    # only where some live port of the source cannot reach the destination
    # (dual-plane: the destination lost its port in that plane).
    host_overrides: dict = field(default_factory=dict)
    # switch -> {nic ip -> backup ports, in order of preference}: only where
    # the table has a single port for that ip (see the module docstring)
    backups: dict = field(default_factory=dict)
    # switch -> {(in_port, nic ip) -> ports}: what a neighbour does with a
    # packet a backup hands it (its next hops with the handing switch gone)
    detours: dict = field(default_factory=dict)


def live_links(fabric: Fabric, down_ports: Collection[tuple[str, int]]) -> list:
    """Links whose switch ends are all up. `down_ports` holds (switch, port)."""
    out = []
    for link in fabric.links:
        ends = [e for e in (link.a, link.b) if fabric.nodes[e.node].is_switch]
        if not any((e.node, e.port) in down_ports for e in ends):
            out.append(link)
    return out


def compute_routes(fabric: Fabric, down_ports: Collection[tuple[str, int]] = frozenset()) -> Routes:
    links = live_links(fabric, down_ports)
    # Switch adjacency: switch -> [(neighbour switch, local port)]
    adj: dict[str, list] = {s.name: [] for s in fabric.switches()}
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
    roots_of = {}
    for nic in fabric.nics:
        roots_of[nic.ip] = [attach[p] for p in nic.ports if p in attach]
        for sw, ports in _next_hops(adj, roots_of[nic.ip]).items():
            routes.tables[sw][nic.ip] = ports
    routes.host_overrides = _host_overrides(fabric, routes.tables, attach)
    routes.backups, routes.detours = _local_repairs(adj, roots_of, routes.tables)
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


def _local_repairs(adj, roots_of, tables):
    """Backups and detours (see Routes) for every single-port next hop."""
    backups = {s: {} for s in adj}
    detours = {s: {} for s in adj}
    peer = {(s, port): nb for s in adj for nb, port in adj[s]}
    for sw in sorted(adj):
        single = [ip for ip, ports in sorted(tables[sw].items()) if len(ports) == 1]
        if not single:
            continue
        # the fabric as the backups' neighbours see it with this switch gone
        without = {n: [(nb, p) for nb, p in links if nb != sw] for n, links in adj.items() if n != sw}
        for ip in single:
            ports, roots = tables[sw][ip], roots_of[ip]
            hops = _next_hops(without, [r for r in roots if r[0] != sw])
            chosen = []
            for nb, port in sorted(adj[sw], key=lambda x: x[1]):
                if port == ports[0] or nb not in hops or port in chosen:
                    continue
                if not _delivers_without(tables, peer, nb, hops[nb], ip, sw):
                    continue
                chosen.append(port)
                for back_nb, in_port in adj[nb]:
                    if back_nb == sw:
                        detours[nb][(in_port, ip)] = hops[nb]
            if chosen:
                backups[sw][ip] = tuple(chosen)
    return backups, detours


def _delivers_without(tables, peer, start, ports, ip, avoid, max_hops=16):
    """True when a packet leaving `start` by any of `ports` reaches `ip` over
    the tables (every equal-cost branch) without touching `avoid`."""
    frontier = [(peer.get((start, p)), 1) for p in ports]
    seen = set()
    while frontier:
        node, hops = frontier.pop()
        if node is None:
            continue  # out of a host port: delivered
        if node == avoid or hops > max_hops:
            return False
        if node in seen:
            continue
        seen.add(node)
        nxt = tables[node].get(ip)
        if not nxt:
            return False  # a dead end
        frontier += [(peer.get((node, p)), hops + 1) for p in nxt]
    return True


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


def _far_ends(fabric):
    """{(node, port): the Endpoint at the other end of that port's link}."""
    by_end = {}
    for link in fabric.links:
        by_end[(link.a.node, link.a.port)] = link.b
        by_end[(link.b.node, link.b.port)] = link.a
    return by_end


def _first_end(fabric, src_ifname):
    """The switch end of a NIC port's access link."""
    host = fabric.nic_of_ifname(src_ifname).host
    for link in fabric.links_of(host):
        if link.end(host).ifname == src_ifname:
            return link.other(host)
    return None


def enumerate_paths(
    fabric: Fabric,
    routes: Routes,
    src_ifname: str,
    dst_ip: str,
    down_ports: Collection[tuple[str, int]] = frozenset(),
    max_hops: int = 16,
) -> list[tuple]:
    """Every path the tables allow from the NIC port `src_ifname` to
    `dst_ip`, one per combination of equal-cost branches: a list of tuples
    of (switch, output port) hops, the last one out of a ToR to the
    destination host. A NIC port is one plane in a dual-plane fabric, so
    this lists a plane's paths; none when the port's access link is down
    or the tables do not reach `dst_ip` from it."""
    by_end = _far_ends(fabric)
    start = _first_end(fabric, src_ifname)
    if start is None or (start.node, start.port) in down_ports:
        return []
    found = []

    def walk(node, hops):
        if len(hops) >= max_hops:
            return
        for port in routes.tables.get(node, {}).get(dst_ip, ()):
            nxt = by_end.get((node, port))
            if nxt is None:
                continue
            step = hops + ((node, port),)
            if fabric.nodes[nxt.node].is_switch:
                walk(nxt.node, step)
            elif any(n.ip == dst_ip for n in fabric.nics_of(nxt.node)):
                found.append(step)

    walk(start.node, ())
    return found


def trace(
    fabric: Fabric,
    routes: Routes,
    src_ifname: str,
    dst_ip: str,
    choose: Callable[[list[int]], int] = min,
    max_hops: int = 16,
) -> list[str] | None:
    """Follow the tables from a NIC port to `dst_ip`: the list of switches
    visited, ending with the destination host, or None when the packet would
    be dropped. `choose` picks one port among equal-cost ones."""
    by_end = _far_ends(fabric)
    end = _first_end(fabric, src_ifname)
    path: list[str] = []
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
