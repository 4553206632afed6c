"""The controller's switch programs: OpenFlow-neutral operations that turn
what a switch has installed into the routes it should have, and proxy ARP.

Pure: no OpenFlow, no sockets. The routes themselves come from the fabric
model (testbed.fabric.paths); the shim (hpn_app.py) turns these operations
into flow and group modifications.

A switch's wanted table maps a match to next hops:
  (None, ip)     -> ("ecmp", ports)       every packet to ip: one port is a plain
                                          output, several a select group
  (None, ip)     -> ("failover", ports)   a fast-failover group: the first live port
                                          (the route's single next hop, then backups)
  (in_port, ip)  -> ("ecmp", ports)       a detour: what came in by in_port, only
  (None, ip, src, sport)
                 -> ("failover", ports)   a pinned connection (UDP from src with
                                          that source port): its chosen port
                                          first, then the route's other ports
  ("dscp", ip, src, sport)
                 -> ("dscp", (value,))    rewrite that connection's DSCP (its class)
                                          before routing it
"""

from dataclasses import dataclass, field

ECMP, FAILOVER, DSCP = "ecmp", "failover", "dscp"
GROUP_KIND = {ECMP: "select", FAILOVER: "ff"}


@dataclass
class SwitchProgram:
    """The flow/group state of one switch as the controller last installed it."""

    # (kind "select" | "ff", ports tuple) -> group id
    groups: dict = field(default_factory=dict)
    # match (see wanted_table) -> ("output", port) | ("group", gid)
    flows: dict = field(default_factory=dict)


def wanted_table(routes, switch, pins=None, marks=None):
    """The table `switch` should hold for Routes `routes` (format above),
    with `pins` {(ip, src, sport): ports} and `marks` {(ip, src, sport):
    dscp} from the placement of the jobs."""
    backups = routes.backups.get(switch, {})
    table = {}
    for ip, ports in routes.tables[switch].items():
        if ip in backups:
            table[(None, ip)] = (FAILOVER, tuple(ports) + tuple(backups[ip]))
        else:
            table[(None, ip)] = (ECMP, tuple(ports))
    for (in_port, ip), ports in routes.detours.get(switch, {}).items():
        table[(in_port, ip)] = (ECMP, tuple(ports))
    for (ip, src, sport), ports in (pins or {}).items():
        table[(None, ip, src, sport)] = (FAILOVER, tuple(ports))
    for (ip, src, sport), dscp in (marks or {}).items():
        table[(DSCP, ip, src, sport)] = (DSCP, (dscp,))
    return table


def match_kind(key):
    """ "route", "detour", "pin" or "mark" (the shapes listed above)."""
    if len(key) == 4:
        return "mark" if key[0] == DSCP else "pin"
    return "route" if key[0] is None else "detour"


def match_order(key):
    """Sort matches: plain routes first, then detours by in_port, then pins,
    each by address."""
    kind = match_kind(key)
    rank = ("route", "detour", "pin", "mark").index(kind)
    return (rank, key[0] if kind == "detour" else 0) + tuple(key[1:])


def diff_switch(installed, wanted):
    """Operations that turn `installed` (SwitchProgram) into the table
    `wanted` (format above). Returns (ops, new SwitchProgram). Ops are tuples:
    ("group_add", gid, (kind, ports)), ("flow_set", match, action),
    ("flow_del", match). Groups are kept once made (few per switch) so a flow
    never points at a group that a concurrent change removed."""
    ops = []
    groups = dict(installed.groups)
    flows = {}
    for key in sorted(wanted, key=match_order):
        kind, ports = wanted[key]
        if kind == DSCP:
            action = (DSCP, ports[0])
        elif kind == ECMP and len(ports) == 1:
            action = ("output", ports[0])
        else:
            group = (GROUP_KIND[kind], tuple(ports))
            if group not in groups:
                groups[group] = max(groups.values(), default=0) + 1
                ops.append(("group_add", groups[group], group))
            action = ("group", groups[group])
        flows[key] = action
        if installed.flows.get(key) != action:
            ops.append(("flow_set", key, action))
    for key in sorted(set(installed.flows) - set(flows), key=match_order):
        ops.append(("flow_del", key))
    return ops, SwitchProgram(groups, flows)


def arp_reply_for(fabric, target_ip):
    """Proxy ARP: the MAC a ToR answers with for `target_ip`, or None when the
    address is not a NIC of the fabric (then the request is dropped: the
    fabric has no L2 broadcast)."""
    for nic in fabric.nics:
        if nic.ip == target_ip:
            return nic.mac
    return None
