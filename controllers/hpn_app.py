"""HPN fabric controller: a thin OpenFlow 1.3 event shim over pure logic
(routes from `testbed.fabric.paths`, switch programs from `routing`).

Loads under os-ken (started by `controllers.run`) or classic `ryu-manager`.
The fabric model comes from the JSON file named by $HPNLAB_FABRIC. Progress
is reported as JSON lines on stdout, which `testbed` reads:
  {"event": "switch", "name": ...}          a switch connected
  {"event": "adopted", "switch": ..., "routes": n, "groups": n, "removed": n}
                                             what it already held was read
                                             (a restarted controller keeps it)
  {"event": "overrides", "version": n, "host_overrides": {...}}
                                             version n computed, being sent
  {"event": "routes", "version": n, "changes": n, "host_overrides": {...}}
                                             every switch acknowledged (barrier)
                                             the routes of version n, reached with
                                             `changes` flow and group changes since
                                             the last such event
  {"event": "port", "switch": ..., "port": n, "up": bool}
  {"event": "refused", "switch": ..., "reason": ...}
                                             a connection claiming a connected switch's
                                             datapath id was closed unheard
  {"event": "jobs", "jobs": n, "flows": n, "pinned": n}
                                             jobs were announced on the job channel
                                             ($HPNLAB_JOBS_SOCKET, see channel.py); they
                                             are answered once routes with their pins
                                             are acknowledged, and kept in a file beside
                                             the socket so a restarted controller keeps them
"""

import json
import os
import sys
import threading

from testbed.fabric.model import Fabric
from testbed.fabric.paths import compute_routes
from testbed.schedule import placement

from . import channel, openflow, routing
from .compat import (
    CONFIG_DISPATCHER,
    MAIN_DISPATCHER,
    BaseApp,
    arp,
    ether_types,
    ethernet,
    ofp_event,
    ofproto_v1_3,
    packet,
    set_ev_cls,
)

# The states in which a switch's replies are heard. os-ken moves an
# OpenFlow 1.3 switch to MAIN only once its own port-description request is
# answered, while this app sends its requests as soon as the features reply
# comes: the answers to ours can come first. Heard in MAIN only, they were
# lost, the switch's state was never read, and no route was ever installed
# (seen under software emulation, where the order varies from run to run).
CONNECTED = [CONFIG_DISPATCHER, MAIN_DISPATCHER]


def emit(**event):
    sys.stdout.write(json.dumps(event, sort_keys=True) + "\n")
    sys.stdout.flush()


class HpnController(BaseApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ["HPNLAB_FABRIC"]) as fh:
            self.fabric = Fabric.from_dict(json.load(fh))
        self.by_dpid = {n.dpid: n.name for n in self.fabric.switches()}
        self.datapaths = {}  # switch name -> datapath
        self.ports_known = set()  # switches whose port states we have read
        self.down = set()  # (switch, port) that are down
        self.programs = {}  # switch name -> routing.SwitchProgram (once read)
        self.reading = {}  # switch name -> replies gathered while reading its state
        self.version = 0
        self.changes = 0  # flow and group changes sent since routes were last acknowledged
        self.pending = {}  # switch name -> barrier xid for self.version
        self.routes = None
        self.lock = threading.Lock()
        self.jobs = None  # the announced jobs (placement.py), once told
        # The paths chosen when they were announced: a fault moves only the
        # connections it breaks, and when it is mended every connection is
        # back where it was (where the hosts' NIC port pins send it).
        self.base_paths = None
        self.placed = {}  # frozenset of down ports -> placement.place's result
        self.answer = None  # where their connections went, as last computed
        self.waiting = []  # (reply, routes version that answers it)
        socket_path = os.environ.get("HPNLAB_JOBS_SOCKET")
        self.jobs_file = socket_path + ".json" if socket_path else None
        if self.jobs_file and os.path.exists(self.jobs_file):
            with open(self.jobs_file) as fh:
                kept = json.load(fh)
            self.jobs, self.base_paths = kept["announce"], kept["paths"]
        if socket_path:
            self.channel = channel.serve(socket_path, self.on_announce)

    # --- the job channel ---------------------------------------------------
    def on_announce(self, request, reply):
        """Jobs announced: place them (refusing what cannot be placed), keep
        them, and reprogram; the reply waits for the version that installs
        their pins to be acknowledged by every switch."""
        jobs = request.get("announce")
        if not isinstance(jobs, dict) or not isinstance(jobs.get("jobs"), list):
            reply({"error": 'expected {"announce": {"jobs": [...]}}'})
            return
        with self.lock:
            down = frozenset(self.down)
            try:
                placed = placement.place(self.fabric, compute_routes(self.fabric, down), jobs, down)
            except (KeyError, TypeError, ValueError) as e:
                reply({"error": f"cannot place the jobs: {type(e).__name__}: {e}"})
                return
            answer = placed[0]
            # placing again while keeping these very paths gives the same
            # result: the reprogramming below takes it from the cache
            self.jobs, self.base_paths = jobs, placement.chosen_paths(answer)
            self.placed = {down: placed}
            tmp = self.jobs_file + ".tmp"
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
                json.dump({"announce": jobs, "paths": self.base_paths}, fh)
            os.replace(tmp, self.jobs_file)
            flows = [f for j in answer["jobs"] for f in j["flows"]]
            emit(
                event="jobs",
                jobs=len(answer["jobs"]),
                flows=len(flows),
                pinned=sum(1 for f in flows if f.get("port")),
            )
            self.waiting.append((reply, self.version + 1))
            self._reprogram()

    # --- connection --------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        dp = ev.msg.datapath
        name = self.by_dpid.get(dp.id)
        if name is None:
            self.logger.warning("ignoring unknown datapath %016x", dp.id)
            return
        with self.lock:
            current = self.datapaths.get(name)
            if current is not None and current is not dp and current.is_active:
                # Only one connection per switch: a second one claiming a
                # connected switch's datapath id is someone else's (the
                # switch itself reconnects only after its old connection
                # closed). Refused and said, never obeyed.
                emit(
                    event="refused",
                    switch=name,
                    reason="a second connection with the datapath id of a connected switch",
                )
                dp.close()
                return
            self.datapaths[name] = dp
            self.programs.pop(name, None)
            self.reading[name] = {"flows": [], "groups": [], "waiting": {"flows", "groups"}}
        for msg in openflow.state_requests(dp):
            dp.send_msg(msg)
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
        emit(event="switch", name=name)

    def _switch_of(self, dp):
        """The switch `dp` is, when it is that switch's connection in use;
        None for a connection that was refused (or replaced): what it says
        is never heard."""
        name = self.by_dpid.get(dp.id)
        return name if name is not None and self.datapaths.get(name) is dp else None

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, CONNECTED)
    def on_flow_stats(self, ev):
        self._gather(ev.msg, "flows")

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, CONNECTED)
    def on_group_desc(self, ev):
        self._gather(ev.msg, "groups")

    def _gather(self, msg, part):
        """Collect a multipart reply; once flows and groups are both in,
        adopt what the switch holds as its program."""
        dp = msg.datapath
        name = self._switch_of(dp)
        with self.lock:
            state = self.reading.get(name)
            if state is None:
                return
            state[part].extend(msg.body)
            if msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
                return
            state["waiting"].discard(part)
            if state["waiting"]:
                return
            del self.reading[name]
            base, routes, groups, strays = openflow.read_state(dp, state["flows"], state["groups"])
            fixes = openflow.remove_flows(dp, strays) + openflow.base_flows(dp, base)
            for m in fixes:
                dp.send_msg(m)
            self.programs[name] = routing.SwitchProgram(groups=groups, flows=routes)
            emit(event="adopted", switch=name, routes=len(routes), groups=len(groups), removed=len(strays))
            self._reprogram()

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, CONNECTED)
    def on_port_desc(self, ev):
        dp = ev.msg.datapath
        name = self._switch_of(dp)
        if name is None:
            return
        with self.lock:
            for p in ev.msg.body:
                self._set_port(name, p.port_no, self._is_up(dp, p))
            self.ports_known.add(name)
            self._reprogram()

    @set_ev_cls(ofp_event.EventOFPPortStatus, CONNECTED)
    def on_port_status(self, ev):
        dp, p = ev.msg.datapath, ev.msg.desc
        name = self._switch_of(dp)
        if name is None:
            return
        up = ev.msg.reason != dp.ofproto.OFPPR_DELETE and self._is_up(dp, p)
        emit(event="port", switch=name, port=p.port_no, up=up)
        with self.lock:
            if self._set_port(name, p.port_no, up):
                self._reprogram()

    @staticmethod
    def _is_up(dp, p):
        ofp = dp.ofproto
        return not (p.state & ofp.OFPPS_LINK_DOWN or p.config & ofp.OFPPC_PORT_DOWN)

    def _set_port(self, name, port, up):
        """Record a port state; True when it changed."""
        if port > dp_max_port():
            return False
        key = (name, port)
        was_down = key in self.down
        if up:
            self.down.discard(key)
        else:
            self.down.add(key)
        return was_down == up

    # --- programming -------------------------------------------------------
    def _reprogram(self):
        """Recompute every route from the model and the port states, push the
        difference to each connected switch, and fence it with a barrier."""
        everyone = set(self.by_dpid.values())
        if self.ports_known != everyone or set(self.programs) != everyone:
            return  # wait until every switch told us its ports and its tables
        down = frozenset(self.down)
        self.routes = compute_routes(self.fabric, down)
        pins, marks = {}, {}
        if self.jobs is not None:
            # routes are a function of the down ports, and so is this: a
            # flapping link costs the placement once, not at every flap
            if down not in self.placed:
                self.placed[down] = placement.place(
                    self.fabric, self.routes, self.jobs, down, self.base_paths
                )
            self.answer, pins, marks = self.placed[down]
        self.version += 1
        self.pending = {}
        # Hosts may stop using a port that no longer reaches before the
        # switches confirm: say it now (the testbed takes only that part).
        emit(event="overrides", version=self.version, host_overrides=self.routes.host_overrides)
        for name, dp in self.datapaths.items():
            ops, self.programs[name] = routing.diff_switch(
                self.programs[name], routing.wanted_table(self.routes, name, pins.get(name), marks.get(name))
            )
            self.changes += len(ops)
            for msg in openflow.messages_for(dp, ops):
                dp.send_msg(msg)
            barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
            dp.set_xid(barrier)
            self.pending[name] = barrier.xid
            dp.send_msg(barrier)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, CONNECTED)
    def on_barrier(self, ev):
        name = self._switch_of(ev.msg.datapath)
        with self.lock:
            if self.pending.get(name) != ev.msg.xid:
                return
            del self.pending[name]
            if not self.pending:
                emit(
                    event="routes",
                    version=self.version,
                    down=sorted(self.down),
                    changes=self.changes,
                    host_overrides=self.routes.host_overrides,
                )
                self.changes = 0
                answered = [w for w in self.waiting if w[1] <= self.version]
                self.waiting = [w for w in self.waiting if w[1] > self.version]
                for reply, _ in answered:
                    reply({"version": self.version, **self.answer})

    @set_ev_cls(ofp_event.EventOFPErrorMsg, CONNECTED)
    def on_error(self, ev):
        msg = ev.msg
        name = self._switch_of(msg.datapath)
        if name is not None:
            emit(event="error", switch=name, type=msg.type, code=msg.code)

    # --- proxy ARP ---------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        if self._switch_of(dp) is None:
            return
        pkt = packet.Packet(msg.data)
        req = pkt.get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        mac = routing.arp_reply_for(self.fabric, req.dst_ip)
        if mac is None:
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=req.src_mac, src=mac))
        reply.add_protocol(
            arp.arp(
                opcode=arp.ARP_REPLY, src_mac=mac, src_ip=req.dst_ip, dst_mac=req.src_mac, dst_ip=req.src_ip
            )
        )
        reply.serialize()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        in_port = msg.match["in_port"]
        dp.send_msg(
            parser.OFPPacketOut(
                datapath=dp,
                buffer_id=ofp.OFP_NO_BUFFER,
                in_port=ofp.OFPP_CONTROLLER,
                actions=[parser.OFPActionOutput(in_port)],
                data=reply.data,
            )
        )


def dp_max_port():
    # Reserved OpenFlow ports (LOCAL, CONTROLLER, ...) sit above this.
    return ofproto_v1_3.OFPP_MAX
