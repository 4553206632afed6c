"""The controller's switch programs: OpenFlow-neutral operations that turn
what a switch has installed into the routes it should have, and proxy ARP.

Pure: no OpenFlow, no sockets. The routes themselves come from the fabric
model (testbed.fabric.paths); the shim (hpn_app.py) turns these operations
into flow and group modifications.
"""
from dataclasses import dataclass, field


@dataclass
class SwitchProgram:
    """The flow/group state of one switch as the controller last installed it."""
    groups: dict = field(default_factory=dict)   # ports tuple -> group id
    flows: dict = field(default_factory=dict)    # ip -> ("output", port) | ("group", gid)


def diff_switch(installed, wanted):
    """Operations that turn `installed` (SwitchProgram) into the table
    `wanted` ({ip: ports}). Returns (ops, new SwitchProgram). Ops are tuples:
    ("group_add", gid, ports), ("flow_set", ip, action), ("flow_del", ip).
    Groups are kept once made (few per switch) so a flow never points at a
    group that a concurrent change removed."""
    ops = []
    groups = dict(installed.groups)
    flows = {}
    for ip, ports in sorted(wanted.items()):
        if len(ports) == 1:
            action = ("output", ports[0])
        else:
            if ports not in groups:
                groups[ports] = max(groups.values(), default=0) + 1
                ops.append(("group_add", groups[ports], ports))
            action = ("group", groups[ports])
        flows[ip] = action
        if installed.flows.get(ip) != action:
            ops.append(("flow_set", ip, action))
    for ip in sorted(set(installed.flows) - set(flows)):
        ops.append(("flow_del", ip))
    return ops, SwitchProgram(groups, flows)


def arp_reply_for(fabric, target_ip):
    """Proxy ARP: the MAC a ToR answers with for `target_ip`, or None when the
    address is not a NIC of the fabric (then the request is dropped: the
    fabric has no L2 broadcast)."""
    for nic in fabric.nics:
        if nic.ip == target_ip:
            return nic.mac
    return None
