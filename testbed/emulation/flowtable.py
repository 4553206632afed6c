"""A switch's flow and group tables as `ovs-ofctl` prints them, read and
explained in the fabric's words (pure): which rule is a route, a pin, a
detour or a Crux mark, toward which host, out of which port to which node.

The rule kinds are the controller's (controllers/openflow.py): table 0
sends ARP to the controller, marks a connection's DSCP (priority 200) and
passes the rest to table 1; table 1 routes by destination (100), pins a
connection to its path (105) or detours what came in by one port (110).
"""

from __future__ import annotations

import re

from testbed.fabric.model import Fabric

COOKIE = "0x48504e00"  # the controller's cookie: the rules hpnlab installed
KINDS = {
    (0, 1000): "arp",
    (0, 0): "next",
    (0, 200): "mark",
    (1, 100): "route",
    (1, 105): "pin",
    (1, 110): "detour",
}


def parse_flows(text: str) -> list[dict]:
    """Each flow line of `ovs-ofctl dump-flows` as {"cookie", "table",
    "priority", "n_packets", "n_bytes", "match": {field: value}, "actions"}."""
    flows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("cookie=") or " actions=" not in line:
            continue
        head, actions = line.split(" actions=", 1)
        fields = [f.strip() for f in head.replace(", ", ",").split(",") if f.strip()]
        flow: dict = {"match": {}, "actions": actions, "priority": 32768, "table": 0}
        for f in fields:
            key, _, value = f.partition("=")
            if key in ("cookie", "duration", "idle_age", "hard_age", "reset_counts"):
                flow[key] = value
            elif key in ("table", "priority", "n_packets", "n_bytes"):
                flow[key] = int(value)
            else:
                flow["match"][key] = value  # a protocol word (ip, udp, arp) has no value
        flows.append(flow)
    return flows


def parse_groups(text: str) -> dict[int, dict]:
    """{group id: {"type", "ports"}} from `ovs-ofctl dump-groups`."""
    groups = {}
    for line in text.splitlines():
        m = re.match(r"\s*group_id=(\d+),type=(\w+),(.*)", line)
        if m:
            ports = [int(p) for p in re.findall(r"output:(\d+)", m.group(3))]
            groups[int(m.group(1))] = {"type": m.group(2), "ports": ports}
    return groups


class Explainer:
    """Names for what a switch's rules point at, from the fabric model."""

    def __init__(self, fabric: Fabric, switch: str):
        self.switch = switch
        self.host_of_ip = {nic.ip: nic.host for nic in fabric.nics}
        self.neighbour = {}  # OpenFlow port -> the node at its other end
        for link in fabric.links_of(switch):
            self.neighbour[link.end(switch).port] = link.other(switch).node

    def host(self, ip: str | None) -> str:
        return f"{self.host_of_ip.get(ip or '', '?')} ({ip})"

    def port(self, number: int) -> str:
        return f"port {number} (to {self.neighbour.get(number, '?')})"

    def actions(self, actions: str, groups: dict) -> str:
        out = []
        for part in actions.split(","):
            if part.startswith("output:"):
                out.append(self.port(int(part.split(":")[1])))
            elif part.startswith("group:"):
                gid = int(part.split(":")[1])
                g = groups.get(gid)
                if g is None:
                    out.append(f"group {gid} (not found)")
                else:
                    how = {"select": "ECMP over", "ff": "fast failover, in order:"}.get(g["type"], g["type"])
                    out.append(f"group {gid}: {how} " + ", ".join(self.port(p) for p in g["ports"]))
            elif part.startswith("set_field:") and "ip_dscp" in part:
                out.append(f"DSCP set to {part.split(':')[1].split('->')[0]}")
        return "; ".join(out)

    def explain(self, flow: dict, groups: dict) -> str:
        """One line saying what the rule is for."""
        if flow.get("cookie") != COOKIE:
            return "not installed by hpnlab's controller"
        m = flow["match"]
        kind = KINDS.get((flow["table"], flow["priority"]))
        connection = (
            f"{self.host(m.get('nw_src'))} -> {self.host(m.get('nw_dst'))} from UDP port {m.get('tp_src')}"
        )
        if kind == "arp":
            return "ARP to the controller (it answers for every host: proxy ARP)"
        if kind == "next":
            return "everything else on to routing (table 1)"
        if kind == "mark":
            what = self.actions(flow["actions"], groups)
            return f"mark: {connection}: {what} (its job's class; counted for Crux)"
        if kind == "route":
            return f"route to {self.host(m.get('nw_dst'))}: {self.actions(flow['actions'], groups)}"
        if kind == "pin":
            return f"pin: {connection} on its chosen path: {self.actions(flow['actions'], groups)}"
        if kind == "detour":
            came = self.port(int(m["in_port"])) if m.get("in_port", "").isdigit() else m.get("in_port")
            return (
                f"detour: toward {self.host(m.get('nw_dst'))}, what came in by {came}: "
                f"{self.actions(flow['actions'], groups)}"
            )
        return f"table {flow['table']}, priority {flow['priority']}: {flow['actions']}"


def explain_tables(fabric: Fabric, switch: str, flows_text: str, groups_text: str) -> list[dict]:
    """Every flow of the switch with what it is for, in table and priority
    order: [{"table", "priority", "packets", "bytes", "match", "what"}]."""
    ex = Explainer(fabric, switch)
    groups = parse_groups(groups_text)
    flows = sorted(parse_flows(flows_text), key=lambda f: (f["table"], -f["priority"]))
    return [
        {
            "table": f["table"],
            "priority": f["priority"],
            "packets": f.get("n_packets"),
            "bytes": f.get("n_bytes"),
            "match": f["match"],
            "what": ex.explain(f, groups),
        }
        for f in flows
    ]
