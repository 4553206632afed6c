"""Build a Fabric model from topology parameters (pure; no root, no network).

Kinds:
  hpn       segments of hosts under dual-ToR (or single-ToR) pairs per rail,
            one or two planes of aggregation switches (Alibaba HPN, tier 1+2)
  clos      the classic single-plane leaf-spine baseline, single-homed hosts
  fat-tree  the k-ary three-tier fat-tree baseline
  region    two or more of the above joined by DC-interconnect links
"""

import copy
import ipaddress

from .bounds import link_problem
from .model import AGG, BORDER, CORE, HOST, IFNAME_MAX, TOR, Endpoint, Fabric, Link, Nic, Node
from .units import format_rate, parse_rate, parse_time

DEFAULTS: dict[str, dict] = {
    "hpn": {
        "segments": 2,
        "hosts_per_segment": 4,
        "rails": 1,
        "planes": 2,
        "dual_tor": True,
        "aggs_per_plane": 2,
        "oversubscription": 1.0,
        "rates": {"host": "200Gbit"},
        "scale": 5000,
        "mtu": 9000,
    },
    "clos": {
        "leaves": 2,
        "hosts_per_leaf": 4,
        "spines": 2,
        "oversubscription": 1.0,
        "rates": {"host": "200Gbit"},
        "scale": 5000,
        "mtu": 9000,
    },
    "fat-tree": {"k": 4, "rates": {"host": "200Gbit"}, "scale": 5000, "mtu": 9000},
    "region": {"scale": 5000, "mtu": 9000},
}
DCI_DEFAULTS = {"links": 1, "delay": "0ms"}

# Every host is a namespace with a shell, every switch a bridge, every link
# two interfaces and their queues: a file may not ask for more than this
# (the builder stops at the first node past a limit, so a hostile file
# costs nothing to refuse).
MAX_HOSTS, MAX_SWITCHES, MAX_LINKS = 512, 512, 4096


class ModelError(ValueError):
    """A parameter set that cannot be built; `field` is its dotted path."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field


def with_defaults(params: dict) -> dict:
    """A deep copy of `params` with every omitted field filled in."""
    kind = params.get("kind", "hpn")
    out: dict = copy.deepcopy(DEFAULTS.get(kind, {}))
    for key, value in params.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = copy.deepcopy(value)
    out["kind"] = kind
    if kind == "region":
        out["dci"] = {**DCI_DEFAULTS, **out.get("dci", {})}
        out["fabrics"] = [with_defaults(fp) for fp in out.get("fabrics", [])]
    return out


def build_fabric(params: dict, name: str = "fabric") -> Fabric:
    """Build the model described by `params` (a topology mapping)."""
    p = with_defaults(params)
    fabric = Fabric(name=name, kind=p["kind"], scale=float(p["scale"]), mtu=int(p["mtu"]), params=p)
    b = _Builder(fabric)
    if p["kind"] == "region":
        b.region(p)
    else:
        b.datacenter(p, dc=0, prefix="")
    b.check_names()
    problem = link_problem(fabric)
    if problem:
        raise ModelError(*problem)
    return fabric


def _rate(p, path, key):
    try:
        rate = parse_rate(p["rates"][key])
    except (KeyError, ValueError) as e:
        raise ModelError(f"{path}rates.{key}", str(e)) from None
    if rate <= 0:
        raise ModelError(f"{path}rates.{key}", f"expected a rate > 0, got {p['rates'][key]!r}")
    return rate


class _Builder:
    def __init__(self, fabric):
        self.f = fabric
        self.next_port = {}  # switch name -> next free OpenFlow port number
        self.next_dpid = 1
        self.hosts = 0

    # --- nodes and links ---------------------------------------------------
    def _count(self, what, have, limit, reduce):
        if have >= limit:
            raise ModelError(
                "", f"this topology has more than {limit} {what}, the most hpnlab emulates: reduce {reduce}"
            )

    def switch(self, name: str, kind: str, dc: int, **attrs) -> Node:
        self._count(
            "switches",
            len(self.f.nodes) - self.hosts,
            MAX_SWITCHES,
            "segments, rails, aggs_per_plane, spines, k or fabrics",
        )
        node = Node(name, kind, dc=dc, dpid=self.next_dpid, **attrs)
        self.next_dpid += 1
        self.f.nodes[name] = node
        self.next_port[name] = 1
        return node

    def host(self, name: str, dc: int, segment: int | None) -> None:
        self._count("hosts", self.hosts, MAX_HOSTS, "segments, hosts_per_segment, k or fabrics")
        self.hosts += 1
        self.f.nodes[name] = Node(name, HOST, dc=dc, segment=segment)

    def _switch_end(self, sw):
        self._count(
            "links",
            len(self.f.links),
            MAX_LINKS,
            "rails, aggs_per_plane, spines, oversubscription or dci.links",
        )
        port = self.next_port[sw]
        self.next_port[sw] = port + 1
        return Endpoint(sw, port, f"{sw}-e{port}")

    def link(
        self, a: str, b: str, kind: str, rate_bps: float, plane: int | None = None, delay_s: float = 0.0
    ) -> None:
        """Switch-to-switch link."""
        self.f.links.append(Link(self._switch_end(a), self._switch_end(b), kind, rate_bps, delay_s, plane))

    def access(self, host: str, rail: int, port: int, tor: str, rate_bps: float, plane: int | None) -> str:
        ifname = f"{host}-n{rail}p{port}"
        self.f.links.append(
            Link(Endpoint(host, port, ifname), self._switch_end(tor), "access", rate_bps, 0.0, plane)
        )
        return ifname

    def nic(self, host: str, rail: int, ip: str, ifnames: list[str]) -> None:
        octets = ipaddress.IPv4Address(ip).packed
        mac = "02:00:" + ":".join(f"{o:02x}" for o in octets)
        self.f.nics.append(Nic(host, rail, ip, mac, tuple(ifnames)))

    # --- kinds -------------------------------------------------------------
    def datacenter(self, p: dict, dc: int, prefix: str, path: str = "") -> tuple[dict, float, float]:
        kind = p["kind"]
        if kind == "hpn":
            return self.hpn(p, dc, prefix, path)
        if kind == "clos":
            hpn = dict(
                p,
                kind="hpn",
                segments=p["leaves"],
                hosts_per_segment=p["hosts_per_leaf"],
                rails=1,
                planes=1,
                dual_tor=False,
                aggs_per_plane=p["spines"],
            )
            return self.hpn(hpn, dc, prefix, path)
        if kind == "fat-tree":
            return self.fat_tree(p, dc, prefix, path)
        raise ModelError(f"{path}kind", f"a datacenter must be hpn, clos or fat-tree, not {kind!r}")

    def hpn(self, p: dict, dc: int, prefix: str, path: str) -> tuple[dict, float, float]:
        S, H, R = p["segments"], p["hosts_per_segment"], p["rails"]
        P, A, dual = p["planes"], p["aggs_per_plane"], p["dual_tor"]
        if P == 2 and not dual:
            raise ModelError(
                f"{path}planes", "two planes need dual_tor: true (port p of each NIC serves plane p)"
            )
        if H > 254:
            raise ModelError(f"{path}hosts_per_segment", f"at most 254 hosts per segment, got {H}")
        if S > 255:
            raise ModelError(f"{path}segments", f"at most 255 segments, got {S}")
        host_rate = _rate(p, path, "host")
        ports = 2 if dual else 1
        # A ToR has H downlinks of host_rate and A uplinks; oversubscription is
        # downlink capacity over uplink capacity.
        up_rate = H * host_rate / (float(p["oversubscription"]) * A)
        tors = {}
        for s in range(S):
            for r in range(R):
                for k in range(ports):
                    plane = k if P == 2 else 0
                    name = f"{prefix}t{s}r{r}k{k}"
                    tors[s, r, k] = self.switch(name, TOR, dc, segment=s, plane=plane, rail=r).name
        aggs = {
            pl: [self.switch(f"{prefix}a{pl}n{i}", AGG, dc, plane=pl).name for i in range(A)]
            for pl in range(P)
        }
        for s in range(S):
            for h in range(H):
                host = f"{prefix}s{s}h{h}"
                self.host(host, dc, s)
                for r in range(R):
                    ifnames = [
                        self.access(host, r, k, tors[s, r, k], host_rate, k if P == 2 else 0)
                        for k in range(ports)
                    ]
                    self.nic(host, r, f"10.{dc * 16 + r}.{s}.{h + 1}", ifnames)
        for (_s, _r, k), tor in tors.items():
            plane = k if P == 2 else 0
            for agg in aggs[plane]:
                self.link(tor, agg, "fabric", up_rate, plane)
        return aggs, up_rate, H * S * R * host_rate

    def fat_tree(self, p: dict, dc: int, prefix: str, path: str) -> tuple[dict, float, float]:
        k = p["k"]
        if k < 2 or k % 2:
            raise ModelError(f"{path}k", f"k must be an even number >= 2, got {k}")
        rate = _rate(p, path, "host")
        half = k // 2
        cores = [self.switch(f"{prefix}c{i}", CORE, dc, plane=0).name for i in range(half * half)]
        for pod in range(k):
            edges = [
                self.switch(f"{prefix}p{pod}e{e}", TOR, dc, segment=pod, plane=0, rail=0).name
                for e in range(half)
            ]
            aggs = [
                self.switch(f"{prefix}p{pod}a{a}", AGG, dc, segment=pod, plane=0).name for a in range(half)
            ]
            for e, edge in enumerate(edges):
                for h in range(half):
                    host = f"{prefix}p{pod}e{e}h{h}"
                    self.host(host, dc, pod)
                    ifname = self.access(host, 0, 0, edge, rate, 0)
                    self.nic(host, 0, f"10.{dc * 16}.{pod}.{e * half + h + 1}", [ifname])
                for agg in aggs:
                    self.link(edge, agg, "fabric", rate, 0)
            for a, agg in enumerate(aggs):
                for c in range(half):
                    self.link(agg, cores[a * half + c], "fabric", rate, 0)
        # DCI borders attach to the top tier: here the cores.
        return {0: cores}, rate, k**3 // 4 * rate

    def region(self, p: dict) -> None:
        fabrics = p["fabrics"]
        if len(fabrics) < 2:
            raise ModelError("fabrics", f"a region joins at least 2 fabrics, got {len(fabrics)}")
        if len(fabrics) > 15:
            raise ModelError("fabrics", f"at most 15 fabrics in a region, got {len(fabrics)}")
        borders, capacity = {}, []
        for dc, fp in enumerate(fabrics):
            path = f"fabrics[{dc}]."
            if fp["kind"] == "region":
                raise ModelError(f"{path}kind", "a region cannot contain another region")
            tops, up_rate, _ = self.datacenter(fp, dc, f"d{dc}", path)
            # What the DC's NICs can offer: every access link (both ports of
            # a dual-ToR NIC count), spread over its planes below.
            capacity.append(
                sum(
                    l.rate_bps for l in self.f.links if l.kind == "access" and self.f.nodes[l.a.node].dc == dc
                )
            )
            for plane, aggs in tops.items():
                border = self.switch(f"d{dc}b{plane}", BORDER, dc, plane=plane).name
                borders[dc, plane] = border
                for agg in aggs:
                    self.link(agg, border, "fabric", up_rate, plane)
        planes = {dc: {pl for (d, pl) in borders if d == dc} for dc in range(len(fabrics))}
        if len({frozenset(v) for v in planes.values()}) != 1:
            raise ModelError("fabrics", "all fabrics of a region must have the same number of planes")
        dci = p["dci"]
        nplanes = len(planes[0])
        links = int(dci["links"])
        try:
            delay = parse_time(dci["delay"])
        except ValueError as e:
            raise ModelError("dci.delay", str(e)) from None
        if "rate" not in dci and "oversubscription" not in dci:
            raise ModelError("dci", "give the interconnect a rate or an oversubscription")
        if "rate" in dci:
            try:
                rate = parse_rate(dci["rate"])
            except ValueError as e:
                raise ModelError("dci.rate", str(e)) from None
        else:
            # Oversubscription: per plane, the smaller DC's NIC capacity over
            # the interconnect capacity between two DCs.
            rate = min(capacity) / nplanes / (float(dci["oversubscription"]) * links)
        p["dci"]["effective_rate"] = format_rate(rate)
        p["dci"]["effective_oversubscription"] = round(min(capacity) / nplanes / (rate * links), 3)
        n = len(fabrics)
        for i in range(n):
            for j in range(i + 1, n):
                for plane in range(nplanes):
                    for _ in range(links):
                        self.link(borders[i, plane], borders[j, plane], "dci", rate, plane, delay)

    def check_names(self) -> None:
        for link in self.f.links:
            for end in (link.a, link.b):
                if len(end.ifname) > IFNAME_MAX:
                    raise ModelError(
                        "",
                        f"interface name {end.ifname!r} is longer than {IFNAME_MAX} "
                        "characters (Linux limit): reduce segments, hosts or fabrics",
                    )
