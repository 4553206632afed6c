"""The sending side of a traffic agent: its NIC ports and the flows on them.

Each send step becomes an OutFlow on the port the kernel's multipath route
picks for it (or its pinned port while that may be used); the ports' kernel
queues are filled round-robin over peers, and a flow DCQCN holds below line
rate is paced here. Go-back-N's ACKs, NAKs and timeouts and DCQCN's CNPs
act on the flows; control frames (ACKs, NAKs, CNPs and the frames that warm
a job's paths) leave through each port's control socket."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import roce, transport
from .job import IDLE
from .nic import Port, PortPicker
from .transfers import FlowSettings, OutFlow, flow_sport

if TYPE_CHECKING:
    from .collectives import Step
    from .job import Job

QUEUE_FRAMES = 12  # frames a port's data socket may have waiting in the kernel
WARM_QP = 0x7FFFFF  # no queue pair's number (theirs have the top bit set): ignored
# CNP templates kept at most: each transfer has its own QP, so the cache
# only saves the copies for a transfer's later CNPs, and only transfers
# under way need theirs. (ACKs need no copy: one template per peer takes
# each frame's QP.) Unbounded, a 64-rank ring's agent process kept 32,000
# copies, which its garbage collector walked again and again.
CTRL_TEMPLATES_KEPT = 64


class Sender:
    """The ports, the flows sending on them and their rate control.

    `frames` is the agent's count of the frames it handled (this side adds
    data_sent, ctrl_sent and warm_sent); `peer_by_ip` finds the peer a
    control frame goes to."""

    def __init__(
        self,
        nic: dict,
        settings: FlowSettings,
        dcqcn_params: transport.DcqcnParams,
        control_dscp: int | None,
        peer_by_ip: dict[str, dict],
        frames: dict[str, int],
    ) -> None:
        self.nic = nic
        self.settings = settings
        self.line_rate_bps = settings.line_rate_bps
        self.dcqcn_params = dcqcn_params
        # ACKs, NAKs and CNPs ride the job's own class unless told otherwise:
        # a RoCE NIC answers on the queue pair's traffic class, while many
        # deployments give CNPs (and here all control frames) a class above
        # the data, so a job held behind a higher class still hears back.
        self.control_dscp = control_dscp
        self.peer_by_ip = peer_by_ip
        self.frames = frames
        frame_bytes = settings.payload + roce.FRAME_OVERHEAD
        self.ports = {
            p: Port(p, self.line_rate_bps, frame_bytes, QUEUE_FRAMES, settings.rto_s) for p in nic["ports"]
        }
        self.port_of_sock = {port.sock: port for port in self.ports.values()}
        self.picker = PortPicker(nic["ports"])
        self.outflows: dict[tuple[str, int], OutFlow] = {}  # (peer ip, qp) -> OutFlow
        # (peer ip, job id) -> Dcqcn: rate control per queue pair
        self.qps: dict[tuple[str, int], transport.Dcqcn] = {}
        self.ctrl: dict[tuple, roce.FrameTemplate] = {}  # (peer ip, qp, opcode) -> control template
        # (peer ip, dscp, length, opcode) -> scapy-built template
        self.templates: dict[tuple, roce.FrameTemplate] = {}
        self.any_paced = False  # some flow is held below line rate by DCQCN

    def qp_rate(self, peer_ip: str, job_id: int) -> transport.Dcqcn:
        """The DCQCN state of this job's queue pair toward a peer."""
        key = (peer_ip, job_id)
        rate = self.qps.get(key)
        if rate is None:
            rate = self.qps[key] = transport.Dcqcn(self.dcqcn_params)
        return rate

    def tick(self, now: float, settling: bool) -> None:
        """Timers that need no precision beyond the agent's tick: go-back-N
        timeouts, DCQCN's rate increase, the port each flow takes (asked
        again at every tick while the routes are `settling`)."""
        for rate in self.qps.values():
            rate.tick(now)
        if settling:
            self.picker.cache.clear()
        self.any_paced = False
        for flow in list(self.outflows.values()):
            flow.pacer.set_rate(flow.dcqcn.rate)
            flow.paced = flow.dcqcn.rate < self.line_rate_bps
            self.any_paced |= flow.paced
            if flow.gbn.check_timeout(now) or settling:
                self.route(flow, now)
        for port in self.ports.values():
            if not port.flows:
                port.backlogged = False  # nothing waits for this port any more

    def paced_wake(self) -> float:
        """When the earliest flow that DCQCN holds below line rate may send."""
        wake = IDLE
        for port in self.ports.values():
            for flow in port.flows:
                if flow.paced and flow.pacer.next_time is not None and flow.gbn.next_psn(0) is not None:
                    wake = min(wake, flow.pacer.next_time)
        return wake

    # --- transfers -----------------------------------------------------------
    def start_send(self, job: Job, step: Step, now: float) -> None:
        """Begin a send step of the job's current iteration."""
        rate = self.qp_rate(job.peers[step.peer]["ip"], job.id)
        flow = OutFlow(self.settings, job, job.iter, step, self.template, rate)
        self.any_paced |= flow.paced
        self.outflows[(flow.peer["ip"], flow.qp)] = flow
        self.route(flow, now)

    def route(self, flow: OutFlow, now: float) -> None:
        """Put the flow on the port it takes now."""
        pinned = flow.job.pins.get(flow.step.peer, flow.job.port)
        port = self.picker.pick(self.nic["ip"], flow.peer["ip"], flow.sport, pinned)
        if port == flow.port:
            return
        if flow.port is not None:
            self.ports[flow.port].flows.remove(flow)
        flow.port = port
        if port is not None:
            self.ports[port].flows.append(flow)

    def finish_send(self, job: Job, step: Step) -> bool:
        """Whether a send step's transfer is acknowledged in full; if so its
        counts go to the job and the flow is dropped."""
        key = job.transfer_key(step)
        flow = self.outflows.get(key)
        if flow is None or not flow.gbn.done:
            return False
        c = flow.job.counters
        c["bytes_sent"] += flow.step.nbytes
        if flow.iteration == flow.job.iter:
            flow.job.iter_bytes["sent"] += flow.step.nbytes
        c["retransmitted"] += flow.gbn.retransmitted
        c["timeouts"] += flow.gbn.timeouts
        c["naks_received"] += flow.gbn.naks
        if flow.port is not None:
            self.ports[flow.port].flows.remove(flow)
        del self.outflows[key]
        return True

    def on_ack(self, data: bytes, src_ip: str, qp: int, psn: int, now: float) -> OutFlow | None:
        """An ACK or NAK (`data`, the frame's UDP payload) for one of our
        transfers. Returns the transfer when that is now acknowledged in
        full (its step may end)."""
        flow = self.outflows.get((src_ip, qp))
        if flow is None:
            return None
        syndrome, _msn = roce.parse_aeth(data)
        if syndrome == roce.NAK_PSN_SEQ_ERROR:
            flow.gbn.on_nak(psn, now)
        else:
            flow.gbn.on_ack(psn, now)
            if flow.gbn.done:
                return flow
        return None

    def on_cnp(self, src_ip: str, job: Job, now: float) -> None:
        """A CNP for the job's queue pair toward `src_ip`: slow it down."""
        rate = self.qp_rate(src_ip, job.id)
        rate.on_cnp(now)
        job.counters["cnps_received"] += 1
        for flow in self.outflows.values():
            if flow.dcqcn is rate:
                flow.pacer.set_rate(rate.rate)
                flow.paced = rate.rate < self.line_rate_bps
                self.any_paced |= flow.paced

    # --- data frames ---------------------------------------------------------
    @staticmethod
    def heads(port: Port, now: float) -> list[OutFlow]:
        """The flow each peer's connection sends next: the oldest transfer to
        that peer with a packet to send. Transfers to one peer go in order (a
        NIC queue pair is FIFO), so a collective's chunk s arrives before
        chunk s+1 and the next rank can forward it at once; peers share the
        port round-robin."""
        heads: dict[str, OutFlow] = {}
        for flow in port.flows:
            if flow.gbn.next_psn(now) is None:
                continue
            best = heads.get(flow.peer["ip"])
            if best is None or flow.seq < best.seq:
                heads[flow.peer["ip"]] = flow
        return [heads[k] for k in sorted(heads)]

    def pump(self, now: float) -> None:
        """Fill every port's kernel queue from its flows, round-robin over
        peers, until the queue is full or no flow has a frame ready."""
        for port in self.ports.values():
            if port.blocked:
                continue
            while True:
                heads = [f for f in self.heads(port, now) if not f.paced or f.pacer.ready(now)]
                if not heads:
                    port.backlogged = False  # idle by the transport's choice, not the agent's
                    break
                port.rr = (port.rr + 1) % len(heads)
                # One frame per peer per turn when peers share the port; a
                # lone flow fills the queue in one go.
                burst = 1 if len(heads) > 1 else QUEUE_FRAMES * 4
                outcome = self._send_from(port, heads[port.rr], burst, now)
                if outcome is not True:
                    break

    def _send_from(self, port: Port, flow: OutFlow, burst: int, now: float) -> bool | None:
        """Up to `burst` frames of one flow; the last port.send_run outcome.
        A flow at line rate goes out in one run (the kernel paces it); one
        that DCQCN holds below line rate, a frame at a time as its pacer
        allows."""
        gbn, paced, total = flow.gbn, flow.paced, 0
        while total < burst:
            count = min(burst - total, gbn.room())
            if count <= 0 or (paced and not flow.pacer.ready(now)):
                return True
            if paced:
                count = 1
            first = gbn.nxt
            native, count = flow.next_run(first, count)
            if native is None:
                sent, nbytes, outcome = port.send_run(flow.frame, first, count, now)
            else:
                sent, nbytes, outcome = port.send_native(native, first, count, now)
            if sent:
                if paced:
                    flow.pacer.sent(nbytes, now)
                gbn.on_sent(first, now, sent)
                flow.job.counters["packets_sent"] += sent
                self.frames["data_sent"] += sent
                total += sent
            if outcome is not True:
                return outcome
        return True

    # --- control frames ------------------------------------------------------
    def warm(self, job: Job) -> None:
        """Send one small frame down every path this job's connections will
        take: each data connection's (its source port, its pinned port) and
        the control connection's (ACKs and NAKs) toward every peer.

        Why: Open vSwitch's kernel datapath sends the first frame of a flow
        it has no entry for up to ovs-vswitchd and forwards it when that has
        answered, while the frames after it, once the entry is in, go
        straight through and overtake it: a RoCE receiver takes that for
        loss. Frames that set the entries up before the job starts keep the
        job's own frames in order. They carry a QP number no receiver knows,
        so they are ignored on arrival."""
        sends = {s.peer for s in job.steps if s.kind == "send"}
        for rank in sorted({s.peer for s in job.steps}):
            peer = job.peers[rank]
            tpl = self.template(peer, job.dscp, 0, roce.ACK)
            paths = [(roce.ROCE_PORT, None)]
            if rank in sends:
                paths.append((flow_sport(job.id, rank, job.rank), job.pins.get(rank, job.port)))
            for sport, pinned in paths:
                port = self.picker.pick(self.nic["ip"], peer["ip"], sport, pinned)
                if port is None:
                    continue
                frame = tpl.retarget(sport, WARM_QP).frame(0, syndrome=roce.ACK_SYNDROME, msn=0)
                if self.ports[port].send_ctrl(frame):
                    self.frames["warm_sent"] += 1

    def send_ctrl(
        self,
        peer_ip: str,
        qp: int,
        dscp: int,
        opcode: int,
        psn: int = 0,
        syndrome: int | None = None,
        now: float = 0.0,
    ) -> None:
        """An ACK, NAK or CNP toward a peer's queue pair."""
        if self.control_dscp is not None:
            dscp = self.control_dscp
        port = self.picker.pick(self.nic["ip"], peer_ip, roce.ROCE_PORT)
        if port is None:
            return
        if opcode == roce.ACK:
            tpl = self.template(self.peer_by_ip[peer_ip], dscp, 0, opcode)
            frame = tpl.frame(psn, syndrome=syndrome, msn=0, dqpn=qp)
        else:
            key = (peer_ip, qp, opcode)
            copy = self.ctrl.get(key)
            if copy is None:
                copy = self.template(self.peer_by_ip[peer_ip], dscp, 0, opcode).retarget(roce.ROCE_PORT, qp)
                if len(self.ctrl) >= CTRL_TEMPLATES_KEPT:
                    self.ctrl.clear()
                self.ctrl[key] = copy
            frame = copy.frame(psn)
        if self.ports[port].send_ctrl(frame):  # control frames are small and rare: not paced
            self.frames["ctrl_sent"] += 1

    def template(
        self, peer: dict, dscp: int, payload_len: int, opcode: int = roce.SEND_MIDDLE
    ) -> roce.FrameTemplate:
        """A frame toward `peer` built with scapy once per kind; flows take
        copies retargeted to their own source port and QP."""
        key = (peer["ip"], dscp, payload_len, opcode)
        tpl = self.templates.get(key)
        if tpl is None:
            tpl = roce.FrameTemplate(
                self.nic["mac"],
                peer["mac"],
                self.nic["ip"],
                peer["ip"],
                roce.ROCE_PORT,
                0,
                dscp,
                payload_len,
                opcode=opcode,
                aeth=opcode == roce.ACK,
            )
            self.templates[key] = tpl
        return tpl

    def close(self) -> None:
        self.picker.close()
