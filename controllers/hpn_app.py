"""HPN fabric controller: a thin OpenFlow 1.3 event shim over the pure core
(`core.py`: state and decisions; routes from `testbed.fabric.paths`, switch
programs from `routing`).

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
import time
from collections.abc import Callable
from typing import Any

from testbed.fabric.model import Fabric

from . import channel, core, openflow, routing
from .compat import (
    CONFIG_DISPATCHER,
    MAIN_DISPATCHER,
    BaseApp,
    arp,
    ether_types,
    ethernet,
    hub,
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


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event, sort_keys=True) + "\n")
    sys.stdout.flush()


class HpnController(BaseApp):
    """Dispatches OpenFlow events to the pure core (core.Controller) and
    carries out the actions it returns. Holds only what belongs to the
    protocol: the datapaths and the multipart replies being gathered."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ["HPNLAB_FABRIC"]) as fh:
            fabric = Fabric.from_dict(json.load(fh))
        socket_path = os.environ.get("HPNLAB_JOBS_SOCKET")
        jobs_file = core.JobsFile(socket_path + ".json" if socket_path else None)
        self.core = core.Controller(fabric, jobs_file, max_port=ofproto_v1_3.OFPP_MAX)
        self.reading = {}  # switch name -> replies gathered while reading its state
        self.counting = {}  # (datapath id, xid) -> counter replies gathered
        # The channel's thread and os-ken's both call into the core: one at a time.
        self.lock = threading.Lock()
        if socket_path:
            self.channel = channel.serve(socket_path, self.on_announce)

    def _carry_out(self, actions):
        for a in actions:
            if isinstance(a, core.Emit):
                emit(**a.event)
            elif isinstance(a, core.ReadState):
                dp = a.conn
                for msg in openflow.state_requests(dp):
                    dp.send_msg(msg)
                dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
            elif isinstance(a, core.Close):
                a.conn.close()
            elif isinstance(a, core.Repair):
                for msg in openflow.remove_flows(a.conn, a.strays) + openflow.base_flows(a.conn, a.have):
                    a.conn.send_msg(msg)
            elif isinstance(a, core.Program):
                # one write per switch, packed by wire.py (os-ken's encoding
                # is 20 times slower); os-ken's queue holds 16 messages per
                # switch and would make a 17th wait for it to drain
                if a.ops:
                    a.conn.send(openflow.encoded(a.conn, a.ops))
            elif isinstance(a, core.Barrier):
                barrier = a.conn.ofproto_parser.OFPBarrierRequest(a.conn)
                barrier.set_xid(a.xid)
                a.conn.send_msg(barrier)
            elif isinstance(a, core.ReadCounters):
                self.counting[(a.conn.id, a.xid)] = []
                a.conn.send_msg(openflow.counter_request(a.conn, a.xid))
            elif isinstance(a, core.Answer):
                a.reply(a.body)
            else:
                raise TypeError(f"unknown action {a!r}")

    def _switch_of(self, dp):
        return self.core.switch_of(dp.id, dp)

    # --- the job channel ---------------------------------------------------
    def on_announce(self, request: dict, reply: Callable[[dict], None]) -> None:
        with self.lock:
            self._carry_out(self.core.announced(request, reply))

    # --- connection --------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        # The id as the switch sent it: os-ken's own handler copies it into
        # dp.id from another thread, and this one may run first (dp.id was
        # None for one switch of twelve under software emulation: ignored,
        # it never got its routes).
        dpid = ev.msg.datapath_id
        with self.lock:
            actions = self.core.connected(dpid, dp, lambda conn: conn.is_active)
            if not actions:
                self.logger.warning("ignoring unknown datapath %016x", dpid)
                return
            name = self.core.switch_of(dpid, dp)
            if name is not None:
                self.reading[name] = {"flows": [], "groups": [], "waiting": {"flows", "groups"}}
            self._carry_out(actions)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, CONNECTED)
    def on_flow_stats(self, ev: Any) -> None:
        msg = ev.msg
        key = (msg.datapath.id, msg.xid)
        if key not in self.counting:
            self._gather(msg, "flows")
            return
        with self.lock:
            self.counting[key].extend(msg.body)
            if msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                return
            stats = self.counting.pop(key)
            name = self._switch_of(msg.datapath)
            if name is not None:
                counts = openflow.mark_counters(stats)
                self._carry_out(self.core.counters_read(name, msg.xid, time.monotonic(), counts))

    # --- time passing (Crux as it runs reads counters) ------------------------
    def start(self):
        thread = super().start()
        self.threads.append(hub.spawn(self._tick))
        return thread

    def _tick(self):
        while True:
            poll = self.core.crux_poll_s if self.core.crux is not None else 0.0
            hub.sleep(poll / 4 if poll > 0 else 0.25)
            with self.lock:
                self._carry_out(self.core.tick(time.monotonic()))

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, CONNECTED)
    def on_group_desc(self, ev: Any) -> None:
        self._gather(ev.msg, "groups")

    def _gather(self, msg, part):
        """Collect a multipart reply; once flows and groups are both in, the
        core adopts what the switch holds as its program."""
        dp = msg.datapath
        with self.lock:
            name = self._switch_of(dp)
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
            have, flows, groups, strays = openflow.read_state(dp, state["flows"], state["groups"])
            self._carry_out(self.core.tables_read(name, have, flows, groups, strays))

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, CONNECTED)
    def on_port_desc(self, ev: Any) -> None:
        dp = ev.msg.datapath
        with self.lock:
            name = self._switch_of(dp)
            if name is None:
                return
            ports = [core.PortState(p.port_no, self._is_up(dp, p)) for p in ev.msg.body]
            self._carry_out(self.core.ports_read(name, ports))

    @set_ev_cls(ofp_event.EventOFPPortStatus, CONNECTED)
    def on_port_status(self, ev: Any) -> None:
        dp, p = ev.msg.datapath, ev.msg.desc
        with self.lock:
            name = self._switch_of(dp)
            if name is None:
                return
            up = ev.msg.reason != dp.ofproto.OFPPR_DELETE and self._is_up(dp, p)
            self._carry_out(self.core.port_changed(name, p.port_no, up))

    @staticmethod
    def _is_up(dp, p):
        ofp = dp.ofproto
        return not (p.state & ofp.OFPPS_LINK_DOWN or p.config & ofp.OFPPC_PORT_DOWN)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, CONNECTED)
    def on_barrier(self, ev: Any) -> None:
        with self.lock:
            name = self._switch_of(ev.msg.datapath)
            if name is not None:
                self._carry_out(self.core.barrier_answered(name, ev.msg.xid))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, CONNECTED)
    def on_error(self, ev: Any) -> None:
        msg = ev.msg
        name = self._switch_of(msg.datapath)
        if name is not None:
            emit(event="error", switch=name, type=msg.type, code=msg.code)

    # --- proxy ARP ---------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        if self._switch_of(dp) is None:
            return
        pkt = packet.Packet(msg.data)
        req = pkt.get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        mac = routing.arp_reply_for(self.core.fabric, req.dst_ip)
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
