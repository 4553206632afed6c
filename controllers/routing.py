"""The controller's switch programs: OpenFlow-neutral operations that turn
what a switch has installed into the routes it should have, and proxy ARP.

Pure: no OpenFlow, no sockets. The routes themselves come from the fabric
model (testbed.fabric.paths); the shim (hpn_app.py, through openflow.py)
turns these operations into flow and group modifications.

A switch's wanted table maps a match to what it should do:
  Route(ip)                -> Hops(ECMP, ports)      every packet to ip: one port is
                                                     a plain output, several a select group
  Route(ip)                -> Hops(FAILOVER, ports)  a fast-failover group: the first live
                                                     port (the route's single next hop,
                                                     then backups)
  Detour(in_port, ip)      -> Hops(ECMP, ports)      what came in by in_port, only
  Pin(ip, src, sport)      -> Hops(FAILOVER, ports)  a pinned connection (UDP from src
                                                     with that source port): its chosen
                                                     port first, then the route's others
  Mark(ip, src, sport)     -> SetDscp(value)         rewrite that connection's DSCP (its
                                                     class) before routing it

Matches, actions and operations are frozen dataclasses, each kind its own
class: a Pin and a Mark of one connection hold the same fields and stay
distinct keys, and no reader has to tell a kind by a tuple's length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # types only: routing stays free of the fabric at run time
    from testbed.fabric.model import Fabric
    from testbed.fabric.paths import Routes

ECMP, FAILOVER = "ecmp", "failover"
GROUP_KIND = {ECMP: "select", FAILOVER: "ff"}


# --- matches -----------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """Every packet to `ip`."""

    ip: str
    kind: ClassVar[str] = "route"

    def order(self) -> tuple:
        return (0, 0, self.ip)


@dataclass(frozen=True)
class Detour:
    """Packets to `ip` that came in by `in_port` (so they never turn back)."""

    in_port: int
    ip: str
    kind: ClassVar[str] = "detour"

    def order(self) -> tuple:
        return (1, self.in_port, self.ip)


@dataclass(frozen=True)
class _Connection:
    ip: str
    src: str
    sport: int
    rank: ClassVar[int]

    def order(self) -> tuple:
        return (self.rank, 0, self.ip, self.src, self.sport)


@dataclass(frozen=True)
class Pin(_Connection):
    """One connection: UDP to `ip` from `src` with source port `sport`."""

    kind: ClassVar[str] = "pin"
    rank: ClassVar[int] = 2


@dataclass(frozen=True)
class Mark(_Connection):
    """The same connection, matched to rewrite its DSCP (a distinct class,
    so that a Pin and a Mark of one connection are distinct keys)."""

    kind: ClassVar[str] = "mark"
    rank: ClassVar[int] = 3


Match = Route | Detour | Pin | Mark


# --- what a match should do, and what a switch holds ---------------------------


@dataclass(frozen=True)
class Hops:
    """Wanted: leave by one of `ports` (ECMP: any, spread; FAILOVER: the first live)."""

    kind: str
    ports: tuple


@dataclass(frozen=True)
class SetDscp:
    """Wanted and installed: rewrite the DSCP, then route."""

    value: int


@dataclass(frozen=True)
class Output:
    """Installed: send out of one port."""

    port: int


@dataclass(frozen=True)
class ToGroup:
    """Installed: hand to a select or fast-failover group."""

    gid: int


Action = Output | ToGroup | SetDscp


# --- operations ----------------------------------------------------------------


@dataclass(frozen=True)
class GroupAdd:
    gid: int
    kind: str  # "select" | "ff"
    ports: tuple


@dataclass(frozen=True)
class FlowSet:
    match: Match
    action: Action


@dataclass(frozen=True)
class FlowDel:
    match: Match


Op = GroupAdd | FlowSet | FlowDel
Table = dict[Match, Hops | SetDscp]  # what a switch should hold


@dataclass
class SwitchProgram:
    """The flow/group state of one switch as the controller last installed it."""

    # (kind "select" | "ff", ports tuple) -> group id
    groups: dict[tuple[str, tuple], int] = field(default_factory=dict)
    flows: dict[Match, Action] = field(default_factory=dict)


def wanted_table(routes: Routes, switch: str, pins: dict | None = None, marks: dict | None = None) -> Table:
    """The table `switch` should hold for Routes `routes` (format above),
    with `pins` {(ip, src, sport): ports} and `marks` {(ip, src, sport):
    dscp} from the placement of the jobs."""
    backups = routes.backups.get(switch, {})
    table: Table = {}
    for ip, ports in routes.tables[switch].items():
        if ip in backups:
            table[Route(ip)] = Hops(FAILOVER, tuple(ports) + tuple(backups[ip]))
        else:
            table[Route(ip)] = Hops(ECMP, tuple(ports))
    for (in_port, ip), ports in routes.detours.get(switch, {}).items():
        table[Detour(in_port, ip)] = Hops(ECMP, tuple(ports))
    for (ip, src, sport), ports in (pins or {}).items():
        table[Pin(ip, src, sport)] = Hops(FAILOVER, tuple(ports))
    for (ip, src, sport), dscp in (marks or {}).items():
        table[Mark(ip, src, sport)] = SetDscp(dscp)
    return table


def match_order(key: Match) -> tuple:
    """Sort matches: plain routes first, then detours by in_port, then pins,
    then marks, each by address."""
    return key.order()


def diff_switch(installed: SwitchProgram, wanted: Table) -> tuple[list[Op], SwitchProgram]:
    """Operations that turn `installed` (SwitchProgram) into the table
    `wanted` (format above). Returns (ops, new SwitchProgram). Groups are
    kept once made (few per switch) so a flow never points at a group that
    a concurrent change removed."""
    ops: list[Op] = []
    groups = dict(installed.groups)
    flows: dict[Match, Action] = {}
    for key in sorted(wanted, key=match_order):
        want = wanted[key]
        action: Action
        if isinstance(want, SetDscp):
            action = want
        elif want.kind == ECMP and len(want.ports) == 1:
            action = Output(want.ports[0])
        else:
            group = (GROUP_KIND[want.kind], tuple(want.ports))
            if group not in groups:
                groups[group] = max(groups.values(), default=0) + 1
                ops.append(GroupAdd(groups[group], *group))
            action = ToGroup(groups[group])
        flows[key] = action
        if installed.flows.get(key) != action:
            ops.append(FlowSet(key, action))
    for key in sorted(set(installed.flows) - set(flows), key=match_order):
        ops.append(FlowDel(key))
    return ops, SwitchProgram(groups, flows)


def arp_reply_for(fabric: Fabric, target_ip: str) -> str | None:
    """Proxy ARP: the MAC a ToR answers with for `target_ip`, or None when the
    address is not a NIC of the fabric (then the request is dropped: the
    fabric has no L2 broadcast)."""
    for nic in fabric.nics:
        if nic.ip == target_ip:
            return nic.mac
    return None
