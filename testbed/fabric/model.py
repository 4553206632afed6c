"""The fabric model: a pure graph of hosts, NICs, switches and links.

Nothing here touches the network; `build.py` fills it from parameters and
`testbed/emulation/realize.py` turns it into Mininet + Open vSwitch. A node's kind is a field,
never guessed from its name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # queues.py imports the model: a name for the type only
    from .queues import QueueProfile

HOST, TOR, AGG, CORE, BORDER = "host", "tor", "agg", "core", "border"
SWITCH_KINDS = (TOR, AGG, CORE, BORDER)
IFNAME_MAX = 15  # Linux IFNAMSIZ - 1


@dataclass(frozen=True)
class Node:
    name: str
    kind: str
    dc: int = 0
    segment: int | None = None  # HPN segment / leaf / fat-tree pod
    plane: int | None = None  # switches: the plane they serve
    rail: int | None = None  # ToRs: the rail they serve
    dpid: int | None = None  # switches only

    @property
    def is_switch(self) -> bool:
        return self.kind in SWITCH_KINDS


@dataclass(frozen=True)
class Endpoint:
    node: str
    port: int  # OpenFlow port number on a switch; port index of a NIC on a host
    ifname: str


@dataclass(frozen=True)
class Link:
    a: Endpoint
    b: Endpoint
    kind: str  # "access" (NIC-ToR), "fabric" (switch-switch), "dci"
    rate_bps: float  # real rate (before scaling)
    delay_s: float = 0.0
    plane: int | None = None

    @property
    def name(self) -> str:
        return f"{self.a.ifname}~{self.b.ifname}"

    def other(self, node: str) -> Endpoint:
        return self.b if self.a.node == node else self.a

    def end(self, node: str) -> Endpoint:
        return self.a if self.a.node == node else self.b


@dataclass(frozen=True)
class Nic:
    """One backend NIC: one IP and one MAC, used on every one of its ports."""

    host: str
    rail: int
    ip: str
    mac: str
    ports: tuple  # host ifnames, index = port number (= plane in dual-plane)


@dataclass
class Fabric:
    name: str
    kind: str
    scale: float
    mtu: int
    params: dict
    nodes: dict[str, Node] = field(default_factory=dict)  # name -> Node
    links: list[Link] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    # Time dilation N: this machine runs the fabric N times slower than the
    # one it emulates (rates /N, delays xN); 1 everywhere but in a drill.
    # Unlike `scale`, it leaves bytes alone (testbed/fabric/dilation.py).
    time_dilation: float = 1.0
    # Priority classes of every port (testbed/fabric/queues.py); None: one
    # FIFO per port, no ECN.
    queues: QueueProfile | None = None

    # --- queries -----------------------------------------------------------
    def hosts(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == HOST]

    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_switch]

    def links_of(self, node: str) -> list[Link]:
        return [l for l in self.links if node in (l.a.node, l.b.node)]

    def links_between(self, x: str, y: str) -> list[Link]:
        return [l for l in self.links if {l.a.node, l.b.node} == {x, y}]

    def nics_of(self, host: str) -> list[Nic]:
        return [n for n in self.nics if n.host == host]

    def nic_on_rail(self, host: str, rail: int) -> Nic | None:
        """`host`'s NIC of rail `rail` (None: it has none)."""
        return next((n for n in self.nics if n.host == host and n.rail == rail), None)

    def nic_by_ip(self, ip: str) -> Nic:
        for n in self.nics:
            if n.ip == ip:
                return n
        raise KeyError(ip)

    def nic_of_ifname(self, ifname: str) -> Nic:
        for n in self.nics:
            if ifname in n.ports:
                return n
        raise KeyError(ifname)

    def scaled_bps(self, link: Link) -> float:
        """The rate this machine shapes `link` to: its real rate divided by
        the scale and by the time dilation."""
        return link.rate_bps / self.scale / self.time_dilation

    def scaled_mbit(self, link: Link) -> float:
        return self.scaled_bps(link) / 1e6

    def shaped_delay_s(self, link: Link) -> float:
        """The delay this machine gives `link`: its real delay, stretched by
        the time dilation (delays are never scaled)."""
        return link.delay_s * self.time_dilation

    def planes(self) -> list[int]:
        return sorted({n.plane for n in self.switches() if n.plane is not None})

    # --- serialization -----------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "scale": self.scale,
            "mtu": self.mtu,
            "params": self.params,
            "nodes": [asdict(n) for n in self.nodes.values()],
            "links": [dict(asdict(l), name=l.name, scaled_mbit=self.scaled_mbit(l)) for l in self.links],
            "nics": [asdict(n) for n in self.nics],
            "time_dilation": self.time_dilation,
            "queues": self.queues.to_dict() if self.queues else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Fabric:
        f = cls(
            d["name"],
            d["kind"],
            d["scale"],
            d["mtu"],
            d.get("params", {}),
            time_dilation=d.get("time_dilation", 1.0),
        )
        if d.get("queues"):
            from .queues import QueueProfile

            f.queues = QueueProfile.from_dict(d["queues"])
        for n in d["nodes"]:
            f.nodes[n["name"]] = Node(**n)
        for l in d["links"]:
            f.links.append(
                Link(
                    a=Endpoint(**l["a"]),
                    b=Endpoint(**l["b"]),
                    kind=l["kind"],
                    rate_bps=l["rate_bps"],
                    delay_s=l["delay_s"],
                    plane=l["plane"],
                )
            )
        for n in d["nics"]:
            f.nics.append(Nic(n["host"], n["rail"], n["ip"], n["mac"], tuple(n["ports"])))
        return f
