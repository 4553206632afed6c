"""A fake OpenFlow 1.3 switch for unit tests of the controller (the way
FAUCET keeps `fakeoftable.py` apart from its tests): it encodes what the
controller sends as a real datapath would, executes flow and group
modifications on its tables, and reads them back in routing's terms."""

import struct
from types import SimpleNamespace

from os_ken.ofproto import ofproto_parser, ofproto_v1_3, ofproto_v1_3_parser

from controllers import openflow, routing

OFP = ofproto_v1_3
PARSER = ofproto_v1_3_parser


class FakeDatapath:
    """A switch's tables, driven by what the controller sends: every message
    is encoded as a real datapath would before writing it to the socket,
    then flow and group modifications are executed on the tables (OpenFlow
    1.3 semantics: ADD replaces a flow of the same priority and match and
    restarts its age, DELETE_STRICT removes one, DELETE removes all that
    match). Each installed flow remembers when it was added (`born`)."""

    ofproto = ofproto_v1_3
    ofproto_parser = ofproto_v1_3_parser

    def __init__(self, dpid):
        self.id = dpid
        self.sent = []
        self.xid = 0
        # (table, priority, match items) -> (match, instructions, cookie, born)
        self.flows = {}
        self.groups = {}  # group id -> (type, buckets)
        self.clock = 0

    def set_xid(self, msg):
        self.xid += 1
        msg.set_xid(self.xid)
        return self.xid

    def send_msg(self, msg):
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()
        self._execute(msg)

    def send(self, buf):
        """Raw bytes, as openflow.encoded packs them: each message decoded
        with os-ken's own parsers (not the packer's), then executed."""
        buf = bytes(buf)
        while buf:
            _version, kind, length, xid = struct.unpack_from("!BBHI", buf)
            one, buf = buf[:length], buf[length:]
            if kind == OFP.OFPT_GROUP_MOD:
                msg = decode_group_mod(self, xid, one)
            else:
                msg = ofproto_parser.msg(self, OFP.OFP_VERSION, kind, length, xid, one)
            msg.buf = one
            self._execute(msg)

    def _execute(self, msg):
        self.sent.append(msg)
        self.clock += 1
        if isinstance(msg, PARSER.OFPFlowMod):
            self._flow_mod(msg)
        elif isinstance(msg, PARSER.OFPGroupMod):
            self._group_mod(msg)

    def _flow_mod(self, m):
        key = (m.table_id, m.priority, tuple(sorted(m.match.items())))
        if m.command == OFP.OFPFC_ADD:
            for inst in m.instructions:
                for a in getattr(inst, "actions", []):
                    if a.type == OFP.OFPAT_GROUP:
                        assert a.group_id in self.groups, "flow sent before its group"
            self.flows[key] = (m.match, m.instructions, m.cookie, self.clock)
        elif m.command == OFP.OFPFC_DELETE_STRICT:
            for k in [k for k in self.flows if k[1:] == key[1:] and m.table_id in (k[0], OFP.OFPTT_ALL)]:
                del self.flows[k]
        elif m.command == OFP.OFPFC_DELETE:
            self.flows.clear()
        else:
            raise AssertionError(f"unexpected flow command {m.command}")

    def _group_mod(self, m):
        if m.command == OFP.OFPGC_ADD:
            assert m.group_id not in self.groups, "group added twice"
            self.groups[m.group_id] = (m.type, m.buckets)
        elif m.command == OFP.OFPGC_DELETE:
            self.groups.clear() if m.group_id == OFP.OFPG_ALL else self.groups.pop(m.group_id, None)
        else:
            raise AssertionError(f"unexpected group command {m.command}")

    def forward(self, in_port, ip, dead, src="10.255.0.1", sport=0, dscp=0):
        """Execute the tables on a UDP packet to `ip`: the ports it may leave
        by (and its DSCP as it leaves, in `self.dscp_out`). Each table
        applies its highest-priority matching flow (a miss drops), its
        actions and then its goto; a select group may take any live bucket,
        a fast-failover group the first live one. `dead`: ports whose link
        is down."""
        pkt = {
            "in_port": in_port,
            "eth_type": 0x0800,
            "ip_proto": 17,
            "ipv4_dst": ip,
            "ipv4_src": src,
            "udp_src": sport,
            "ip_dscp": dscp,
        }
        self.dscp_out = None
        table = 0
        while True:
            best = None
            for (tid, prio, items), (_m, inst, _c, _b) in self.flows.items():
                if tid == table and all(pkt.get(k) == v for k, v in items):
                    if best is None or prio > best[0]:
                        best = (prio, inst)
            if best is None:
                return []
            outs, table = [], None
            for inst in best[1]:
                if inst.type == OFP.OFPIT_GOTO_TABLE:
                    table = inst.table_id
                    continue
                for act in inst.actions:
                    if act.type == OFP.OFPAT_OUTPUT:
                        outs += [] if act.port in dead else [act.port]
                    elif act.type == OFP.OFPAT_SET_FIELD:
                        pkt[act.key] = act.value
                    elif act.type == OFP.OFPAT_GROUP:
                        gtype, buckets = self.groups[act.group_id]
                        live = [b.actions[0].port for b in buckets if b.watch_port not in dead]
                        outs += live[:1] if gtype == OFP.OFPGT_FF else live
            if table is None:
                self.dscp_out = pkt["ip_dscp"]
                return outs

    def flow_stats(self):
        return [
            SimpleNamespace(table_id=tid, priority=prio, match=match, instructions=inst, cookie=cookie)
            for (tid, prio, _), (match, inst, cookie, _born) in sorted(self.flows.items())
            if cookie == openflow.COOKIE
        ]

    def group_desc(self):
        return [
            SimpleNamespace(group_id=gid, type=t, buckets=b) for gid, (t, b) in sorted(self.groups.items())
        ]

    def ages(self):
        """When each flow was added: a flow deleted and added again is younger."""
        return {key: born for key, (_m, _i, _c, born) in self.flows.items()}


def decode_group_mod(dp, xid, buf):
    """os-ken parses no group mod (a switch never sends one): its header
    read here, its buckets by os-ken's bucket parser."""
    command, gtype, gid = struct.unpack_from("!HBxI", buf, 8)
    buckets, offset = [], 16
    while offset < len(buf):
        bucket = PARSER.OFPBucket.parser(buf, offset)
        buckets.append(bucket)
        offset += bucket.len
    msg = PARSER.OFPGroupMod(dp, command, gtype, gid, buckets)
    msg.set_xid(xid)
    return msg


def reparse(dp, msg):
    """Decode the bytes of an encoded message back into a message object."""
    return ofproto_parser.msg(dp, OFP.OFP_VERSION, msg.msg_type, len(msg.buf), msg.xid, bytes(msg.buf))


def actions_of(flow_mod):
    (inst,) = flow_mod.instructions
    assert inst.type == OFP.OFPIT_APPLY_ACTIONS
    return inst.actions


def installed_table(dp):
    """What the fake switch's routing table holds, in routing.wanted_table's
    terms: {Match: Hops}."""
    table = {}
    for (tid, prio, items), (_match, inst, _cookie, _born) in dp.flows.items():
        if tid != openflow.TABLE_ROUTE:
            continue
        fields = dict(items)
        assert ("in_port" in fields) == (prio == openflow.PRIO_DETOUR)
        assert ("udp_src" in fields) == (prio == openflow.PRIO_PIN)
        if prio == openflow.PRIO_PIN:
            key = routing.Pin(fields["ipv4_dst"], fields["ipv4_src"], fields["udp_src"])
        elif prio == openflow.PRIO_DETOUR:
            key = routing.Detour(fields["in_port"], fields["ipv4_dst"])
        else:
            key = routing.Route(fields["ipv4_dst"])
        (act,) = inst[0].actions
        if act.type == OFP.OFPAT_GROUP:
            gtype, buckets = dp.groups[act.group_id]
            assert all(b.watch_port == b.actions[0].port for b in buckets)
            ports = tuple(b.actions[0].port for b in buckets)
            kind = {OFP.OFPGT_SELECT: routing.ECMP, OFP.OFPGT_FF: routing.FAILOVER}[gtype]
            table[key] = routing.Hops(kind, ports)
        else:
            table[key] = routing.Hops(routing.ECMP, (act.port,))
    return table


def installed_routes(dp):
    """The plain routes the fake switch holds: {ip: next hops}, the primary
    only where a fast-failover group holds backups."""
    return {
        key.ip: hops.ports[:1] if hops.kind == routing.FAILOVER else hops.ports
        for key, hops in installed_table(dp).items()
        if isinstance(key, routing.Route)
    }
