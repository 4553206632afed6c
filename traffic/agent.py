"""Traffic agent: plays the ranks of training jobs that live on one host.

Started by the runner inside a host's network namespace:

    python -m traffic.agent CONFIG.json

Each rank runs its iterations: a compute phase (the GPU busy; here just
time passing), then the steps of its collective schedule, each a transfer
to or from a peer rank. Transfers are RoCEv2-looking frames (built once
with scapy, patched per packet; see roce.py) written to a raw socket on the
NIC port the kernel's multipath route picks for the flow (so the host's
per-flow spreading, dead-port skipping and /32 overrides apply), or on a
pinned port while its link is up. Reliability is go-back-N driven by
receiver ACK/NAKs and timeouts; the rate follows DCQCN on CNPs, per queue
pair. At line rate the kernel paces each port (see nic.Port); only a flow DCQCN holds below line
rate is paced here. Frames arrive on a UDP socket bound to port 4791 that
also reports each datagram's ECN bits.

The loop is driven by events, so that its CPU goes to packets, not to
bookkeeping: it sleeps in select() until a frame arrives, a full port
queue has room, a job's next phase begins, a paced flow may send, or the
housekeeping tick (timeouts, route refresh, DCQCN timers) is due.

Every time in the agent (timers, compute phases, deadlines) is multiplied
by the config's `time_dilation` N, as the link rates are divided by it.

Results (per job: iteration records, bytes, retransmissions, CNPs; per
port: whether the line stayed busy while frames waited; CPU time and frames
handled) go to the JSON file named in the config; one JSON line per
finished iteration goes to stdout for progress.
"""

import json
import os
import resource
import select
import signal
import socket
import sys
import time

from . import gobackn, roce, transport
from .nic import Port, PortPicker
from .roce import BTH_FIELDS
from .transfers import InFlow, Job, OutFlow, flow_sport, qp_job, qp_number

IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
PSN_MASK = roce.PSN_MASK
DATA_HEADER = roce.BTH_LEN + roce.ICRC_LEN  # a data frame's UDP payload beyond its payload
ROUTE_SETTLE_S = 0.05  # after a link or route event, re-ask the kernel this long
TICK_S = 0.01  # housekeeping: go-back-N timeouts, DCQCN timers, route refresh
QUEUE_FRAMES = 12  # frames a port's data socket may have waiting in the kernel
COALESCE_FRAMES = 6  # a wake-up comes at most every this many frame times
MAX_RECV_PER_PASS = 256  # frames received per loop pass, so sending never starves
MAX_FRAME = 9216  # no frame exceeds the largest MTU
WARM_LEAD_S = 0.1  # a job's paths are warmed again this long before it starts
WARM_QP = 0x7FFFFF  # no queue pair's number (theirs have the top bit set): ignored
MAX_GAP_EVENTS = 20  # gap events kept per job and rank for the report
RX_BUFFER = 4 << 20  # the receive socket's buffer: a few hundred jumbo frames
IDLE = float("inf")


class Agent:
    def __init__(self, cfg):
        self.cfg = cfg
        self.nic = cfg["nic"]
        self.dilation = float(cfg.get("time_dilation", 1.0))
        d = self.dilation
        self.payload = cfg.get("payload", 4096)
        self.line_rate_bps = self.nic["rate_bps"]
        self.window = cfg.get("window", 64)
        # Longer than the deepest queue (100 ms) twice over: a timeout must
        # mean loss, not a full queue. NAKs repair ordinary loss much sooner.
        self.rto_s = cfg.get("rto_s", 0.25) * d
        # ACKs, NAKs and CNPs ride the job's own class unless told otherwise:
        # a RoCE NIC answers on the queue pair's traffic class, while many
        # deployments give CNPs (and here all control frames) a class above
        # the data, so a job held behind a higher class still hears back.
        self.control_dscp = cfg.get("control_dscp")
        self.linger_s = 2 * self.rto_s + 0.1 * d
        self.tick_s = TICK_S * d
        self.route_settle_s = ROUTE_SETTLE_S * d
        self.reroute_until = 0.0
        self.any_paced = False  # some flow is held below line rate by DCQCN
        self.nak_retry_s = gobackn.DEFAULT_NAK_RETRY_S * d
        dcqcn = dict(cfg.get("dcqcn", {}))
        for key in ("alpha_period_s", "increase_period_s", "cnp_interval_s"):
            dcqcn[key] = dcqcn.get(key, getattr(transport.DcqcnParams, key)) * d
        self.dcqcn_params = transport.DcqcnParams(line_rate_bps=self.line_rate_bps, **dcqcn)
        self.jobs = [Job(spec, 0.0) for spec in cfg["jobs"]]
        self.job_by_id = {job.id: job for job in self.jobs}
        frame_bytes = self.payload + roce.FRAME_OVERHEAD
        self.coalesce_s = COALESCE_FRAMES * frame_bytes * 8 / self.line_rate_bps
        self.ports = {
            p: Port(p, self.line_rate_bps, frame_bytes, QUEUE_FRAMES, self.rto_s) for p in self.nic["ports"]
        }
        self.port_of_sock = {port.sock: port for port in self.ports.values()}
        self.picker = PortPicker(self.nic["ports"])
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx_buffer = receive_buffer(self.rx, RX_BUFFER)
        self.rx_overflows_at_start = udp_rcvbuf_errors()
        self.rx.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        self.rx.bind(("0.0.0.0", roce.ROCE_PORT))
        self.rx.setblocking(False)
        self.rx_buf = bytearray(MAX_FRAME)  # every frame is received into this one buffer
        self.rx_bufs = [self.rx_buf]
        self.rx_view = memoryview(self.rx_buf)
        self.inflows = {}  # (peer ip, qp) -> InFlow
        self.completed = {}  # (peer ip, qp) -> (iteration, last psn) of finished receives
        self.outflows = {}  # (peer ip, qp) -> OutFlow
        self.qps = {}  # (peer ip, job id) -> Dcqcn: rate control per queue pair
        self.ctrl = {}  # (peer ip, qp, opcode) -> control FrameTemplate
        self.templates = {}  # (peer ip, dscp, length, opcode) -> scapy-built template
        self.peer_by_ip = {}
        for job in self.jobs:
            job.wake_at = 0.0
            for p in job.peers:
                self.peer_by_ip[p["ip"]] = p
        self.qp_map = self._qp_map()
        self.frames = {"data_sent": 0, "ctrl_sent": 0, "warm_sent": 0, "received": 0}
        self.warm_lead_s = WARM_LEAD_S * d
        self.stop = False

    def _qp_map(self):
        """(peer ip, job id, tag index) -> (job, recv step) for every recv this host expects."""
        out = {}
        for job in self.jobs:
            for s in job.steps:
                if s.kind == "recv":
                    out[(job.peers[s.peer]["ip"], job.id, job.tag_index[s.tag])] = (job, s)
        return out

    def qp_rate(self, peer_ip, job_id):
        """The DCQCN state of this job's queue pair toward a peer."""
        key = (peer_ip, job_id)
        rate = self.qps.get(key)
        if rate is None:
            rate = self.qps[key] = transport.Dcqcn(self.dcqcn_params)
        return rate

    def set_start(self, start_at):
        """All agents get the same wall-clock start (CLOCK_REALTIME is shared
        by every namespace of the machine); keep time on the monotonic clock."""
        start_mono = time.monotonic() + (start_at - time.time())
        for job in self.jobs:
            job.start_mono += start_mono
            job.wake_at = job.start_mono - self.warm_lead_s  # see _advance: warm, then start
        self.deadline = start_mono + self.cfg["deadline_s"]

    # --- main loop ---------------------------------------------------------
    def run(self):
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        done_at = None
        next_tick = 0.0
        events = self.picker.events
        rlist = [self.rx, events]
        readable = ()
        wakeups = 0
        wakeup_floor = self.coalesce_s
        while not self.stop:
            now = time.monotonic()
            if now >= self.deadline:
                break
            if done_at is None and all(j.done for j in self.jobs):
                done_at = now
            # Linger after the last job: a peer whose final ACK from us was
            # lost retransmits after its timeout and must get the ACK again.
            if done_at is not None and now >= done_at + self.linger_s:
                break
            if events in readable and self.picker.changed():
                # A link or route changed: every flow asks again now, and at
                # each tick for a little while, until the kernel has settled.
                self.reroute_until = now + self.route_settle_s
                next_tick = now
            if now >= next_tick:
                self._tick(now)
                next_tick = now + self.tick_s
            for job in self.jobs:
                if now >= job.wake_at:
                    self._advance(job, now)
            if self._receive(now):
                now = time.monotonic()
            self._pump(now)
            due = min(next_tick, self.deadline, *(j.wake_at for j in self.jobs))
            if self.any_paced:
                due = min(due, self._paced_wake())
            wlist = [p.sock for p in self.ports.values() if p.blocked]
            # Interrupt moderation, as NICs do it: a pass comes at most every
            # few frame times, so that each handles several frames. The
            # kernel queues hold more than that, so no port runs dry
            # meanwhile, and no timer is made later than it is due. Sleeping
            # first means that, under load, select() finds work waiting and
            # returns at once: one blocking call per pass, not two.
            rest = min(now + wakeup_floor, due) - time.monotonic()
            if rest > 0:
                time.sleep(rest)
            readable, writable, _ = select.select(rlist, wlist, [], max(0.0, due - time.monotonic()))
            wakeups += 1
            for sock in writable:
                self.port_of_sock[sock].blocked = False
        # getrusage, not os.times(): its total is exact (scheduler time), where
        # os.times() counts whole 10 ms ticks, a large error on 0.1 s of CPU.
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        user, system = cpu.ru_utime - cpu0.ru_utime, cpu.ru_stime - cpu0.ru_stime
        return {"cpu_s": user + system, "cpu_user_s": user, "cpu_system_s": system, "wakeups": wakeups}

    def _paced_wake(self):
        """When the earliest flow that DCQCN holds below line rate may send."""
        wake = IDLE
        for port in self.ports.values():
            for flow in port.flows:
                if flow.paced and flow.pacer.next_time is not None and flow.gbn.next_psn(0) is not None:
                    wake = min(wake, flow.pacer.next_time)
        return wake

    def _tick(self, now):
        """Timers that need no precision beyond TICK_S: go-back-N timeouts,
        DCQCN's rate increase, the port each flow takes."""
        for rate in self.qps.values():
            rate.tick(now)
        settling = now <= self.reroute_until
        if settling:
            self.picker.cache.clear()
        self.any_paced = False
        for flow in list(self.outflows.values()):
            flow.pacer.set_rate(flow.dcqcn.rate)
            flow.paced = flow.dcqcn.rate < self.line_rate_bps
            self.any_paced |= flow.paced
            if flow.gbn.check_timeout(now) or settling:
                self._route(flow, now)
        for port in self.ports.values():
            if not port.flows:
                port.backlogged = False  # nothing waits for this port any more

    def _advance(self, job, now):
        """Start what may start and finish what is done; set when the job
        next needs the clock (its start, a compute phase ending)."""
        if job.done:
            job.wake_at = IDLE
            return
        if now < job.start_mono:
            warm_at = job.start_mono - self.warm_lead_s
            if not job.warmed and now >= warm_at:
                self.warm(job)
                job.warmed = True
            job.wake_at = job.start_mono if job.warmed else warm_at
            return
        if job.iter < 0:
            job.begin_iteration(now)
        status = job.status
        while True:
            progressed = True
            while progressed:
                # Only the steps still open are looked at: a pass over the
                # whole schedule on every finished transfer cost more than
                # the transfers' frames. Only a step that ends can let a
                # waiting one start, so only that calls for another pass.
                progressed = False
                still = []
                for s in job.pending:
                    st = status[s.index]
                    if st == "wait" and now >= job.comm_start and all(status[d] == "done" for d in s.deps):
                        job.first_comm = job.first_comm or now
                        if s.kind == "send":
                            self._start_send(job, s, now)
                        status[s.index] = st = "active"
                    if st == "active" and self._step_done(job, s):
                        status[s.index] = "done"
                        if os.environ.get("HPNLAB_TRACE"):
                            job.trace.append((job.iter, s.index, s.kind, round(now - job.start_mono, 4)))
                        progressed = True
                        continue
                    still.append(s)
                job.pending = still
            if now >= job.compute_end and not job.pending:
                print(json.dumps(job.end_iteration(now)), flush=True)  # progress for the runner
                if job.done:
                    job.wake_at = IDLE
                    return
                status = job.status
                continue
            break
        if now < job.comm_start:
            job.wake_at = job.comm_start
        elif now < job.compute_end and not job.pending:
            job.wake_at = job.compute_end
        else:
            job.wake_at = IDLE  # waits for transfers: their events advance it

    def _step_done(self, job, s):
        if s.kind == "send":
            key = (job.peers[s.peer]["ip"], qp_number(job.id, job.iter, job.tag_index[s.tag]))
            flow = self.outflows.get(key)
            if flow is None or not flow.gbn.done:
                return False
            self._end_send(key, flow)
            return True
        key = (job.peers[s.peer]["ip"], qp_number(job.id, job.iter, job.tag_index[s.tag]))
        inflow = self.inflows.get(key)
        if inflow is None or not inflow.rx.done:
            return False
        job.counters["bytes_received"] += inflow.bytes
        job.iter_bytes["received"] += inflow.bytes
        self.completed[key] = (job.iter, inflow.npackets - 1)
        del self.inflows[key]
        return True

    # --- sending -----------------------------------------------------------
    def _start_send(self, job, step, now):
        flow = OutFlow(self, job, job.iter, step, now)
        self.outflows[(flow.peer["ip"], flow.qp)] = flow
        self._route(flow, now)

    def _route(self, flow, now):
        pinned = flow.job.pins.get(flow.step.peer, flow.job.port)
        port = self.picker.pick(self.nic["ip"], flow.peer["ip"], flow.sport, pinned)
        if port == flow.port:
            return
        if flow.port is not None:
            self.ports[flow.port].flows.remove(flow)
        flow.port = port
        if port is not None:
            self.ports[port].flows.append(flow)

    def _end_send(self, key, flow):
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

    @staticmethod
    def _heads(port, now):
        """The flow each peer's connection sends next: the oldest transfer to
        that peer with a packet to send. Transfers to one peer go in order (a
        NIC queue pair is FIFO), so a collective's chunk s arrives before
        chunk s+1 and the next rank can forward it at once; peers share the
        port round-robin."""
        heads = {}
        for flow in port.flows:
            if flow.gbn.next_psn(now) is None:
                continue
            best = heads.get(flow.peer["ip"])
            if best is None or flow.seq < best.seq:
                heads[flow.peer["ip"]] = flow
        return [heads[k] for k in sorted(heads)]

    def _pump(self, now):
        """Fill every port's kernel queue from its flows, round-robin over
        peers, until the queue is full or no flow has a frame ready."""
        for port in self.ports.values():
            if port.blocked:
                continue
            while True:
                heads = [f for f in self._heads(port, now) if not f.paced or f.pacer.ready(now)]
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

    def _send_from(self, port, flow, burst, now):
        """Up to `burst` frames of one flow; the last port.send outcome."""
        gbn, counters = flow.gbn, flow.job.counters
        for _ in range(burst):
            psn = gbn.next_psn(now)
            if psn is None or (flow.paced and not flow.pacer.ready(now)):
                return True
            frame = flow.frame(psn)
            outcome = port.send(frame, now)
            if outcome is not True:
                return outcome
            if flow.paced:
                flow.pacer.sent(len(frame), now)
            gbn.on_sent(psn, now)
            counters["packets_sent"] += 1
            self.frames["data_sent"] += 1
        return True

    def warm(self, job):
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

    def _send_ctrl(self, peer_ip, qp, dscp, opcode, psn=0, syndrome=None, now=0.0):
        if self.control_dscp is not None:
            dscp = self.control_dscp
        key = (peer_ip, qp, opcode)
        tpl = self.ctrl.get(key)
        if tpl is None:
            peer = self.peer_by_ip[peer_ip]
            tpl = self.template(peer, dscp, 0, opcode).retarget(roce.ROCE_PORT, qp)
            self.ctrl[key] = tpl
        port = self.picker.pick(self.nic["ip"], peer_ip, roce.ROCE_PORT)
        if port is None:
            return
        frame = tpl.frame(psn, syndrome=syndrome, msn=0) if opcode == roce.ACK else tpl.frame(psn)
        if self.ports[port].send_ctrl(frame):  # control frames are small and rare: not paced
            self.frames["ctrl_sent"] += 1

    def template(self, peer, dscp, payload_len, opcode=roce.SEND_MIDDLE):
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

    # --- receiving ---------------------------------------------------------
    def _receive(self, now):
        """Handle what arrived; True if anything did."""
        recv_into, space = self.rx.recvmsg_into, socket.CMSG_SPACE(4)
        buf, bufs, view = self.rx_buf, self.rx_bufs, self.rx_view
        inflows, dispatch = self.inflows, self._dispatch
        n = 0
        for n in range(MAX_RECV_PER_PASS):  # noqa: B007 (n counts the frames, read after the loop)
            try:
                size, anc, _flags, addr = recv_into(bufs, space)
            except BlockingIOError:
                break
            # IP_RECVTOS brings one control message: the TOS byte.
            tos = anc[0][2][0] if anc and anc[0][2] else 0
            # Fast path, most frames: the next in-order data frame of a
            # transfer under way, not CE-marked, asking nothing back. It
            # reads the frame where it landed; only others are copied out.
            op, _flags, _pkey, w1, w2 = BTH_FIELDS.unpack_from(buf)
            if op == roce.SEND_MIDDLE and w2 < 0x80000000 and tos & 3 != roce.CE:
                inflow = inflows.get((addr[0], w1 & PSN_MASK))
                if inflow is not None and inflow.rx.in_order(w2 & PSN_MASK):
                    inflow.bytes += size - DATA_HEADER - (buf[1] >> 4 & 3)
                    continue
            dispatch(view[:size].tobytes(), addr[0], tos, now)
        else:
            n = MAX_RECV_PER_PASS
        self.frames["received"] += n
        return n > 0

    def _dispatch(self, data, src_ip, tos, now):
        opcode, qp, psn, ackreq, _fecn, _becn = roce.parse_bth(data)
        if opcode in roce.DATA_OPCODES:
            self._on_data(data, src_ip, qp, psn, ackreq, tos, now)
        elif opcode == roce.ACK:
            flow = self.outflows.get((src_ip, qp))
            if flow is not None:
                syndrome, _msn = roce.parse_aeth(data)
                if syndrome == roce.NAK_PSN_SEQ_ERROR:
                    flow.gbn.on_nak(psn, now)
                else:
                    flow.gbn.on_ack(psn, now)
                    if flow.gbn.done:
                        self._advance(flow.job, now)
        elif opcode == roce.CNP:
            job = self.job_by_id.get(qp_job(qp))
            if job is not None:
                rate = self.qp_rate(src_ip, job.id)
                rate.on_cnp(now)
                job.counters["cnps_received"] += 1
                for flow in self.outflows.values():
                    if flow.dcqcn is rate:
                        flow.pacer.set_rate(rate.rate)
                        flow.paced = rate.rate < self.line_rate_bps
                        self.any_paced |= flow.paced

    def _on_data(self, data, src_ip, qp, psn, ackreq, tos, now):
        key = (src_ip, qp)
        inflow = self.inflows.get(key)
        if inflow is None and key in self.completed:
            done_iter, last = self.completed[key]
            target = self.qp_map.get((src_ip, qp_job(qp), qp & 0xFFFF))
            if target is not None and target[0].iter - done_iter < 8:
                # A retransmission after we finished (our ACK was lost): ACK again.
                self._send_ctrl(
                    src_ip, qp, target[0].dscp, roce.ACK, last, syndrome=roce.ACK_SYNDROME, now=now
                )
                return
            del self.completed[key]  # the QP number came round again (16 iterations later)
        if inflow is None:
            target = self.qp_map.get((src_ip, qp_job(qp), qp & 0xFFFF))
            if target is None:
                return
            job, step = target
            it = (qp >> 16) & 0xF
            if (job.iter & 0xF) != it and ((job.iter + 1) & 0xF) != it:
                # A late duplicate of a finished iteration: re-ACK so the sender can finish.
                self._send_ctrl(src_ip, qp, job.dscp, roce.ACK, psn, syndrome=roce.ACK_SYNDROME, now=now)
                return
            inflow = InFlow(step.nbytes, self.payload, self)
            inflow.job = job
            self.inflows[key] = inflow
        ce = (tos & 3) == roce.CE
        before = inflow.rx.received
        actions = inflow.rx.on_data(psn, ce, ackreq, now)
        if inflow.rx.received > before:
            inflow.bytes += roce.payload_length(data)
            if inflow.open_gap and psn == inflow.open_gap[0]:
                # The awaited packet came: within microseconds it was only
                # overtaken on the way, after a round trip it is the resend.
                _, event, seen = inflow.open_gap
                if event is not None:
                    event["filled_after_s"] = round(now - seen, 6)
                inflow.open_gap = None
        job = inflow.job
        if ce:
            job.counters["ce_marks"] += 1
        for act in actions:
            if act[0] == "ack":
                self._send_ctrl(src_ip, qp, job.dscp, roce.ACK, act[1], syndrome=roce.ACK_SYNDROME, now=now)
            elif act[0] == "nak":
                event = self._note_gap(job, src_ip, qp, act[1], psn, now)
                if inflow.open_gap is None or inflow.open_gap[0] != act[1]:
                    inflow.open_gap = (act[1], event, now)
                self._send_ctrl(
                    src_ip, qp, job.dscp, roce.ACK, act[1], syndrome=roce.NAK_PSN_SEQ_ERROR, now=now
                )
            elif act[0] == "cnp":
                job.counters["cnps_sent"] += 1
                self._send_ctrl(src_ip, qp, job.dscp, roce.CNP, 0, now=now)
        if inflow.rx.done:
            self._advance(job, now)  # the step this transfer fed may end now

    def _note_gap(self, job, src_ip, qp, expected, got, now):
        """A receiver saw a PSN beyond the one it expected: a packet of this
        transfer was lost (or overtaken) on the way. Kept so that a run can
        tell where loss showed up and when."""
        job.counters["gaps_seen"] += 1
        if len(job.gap_events) < MAX_GAP_EVENTS:
            peer = self.peer_by_ip.get(src_ip, {})
            event = {
                "t": round(now - job.start_mono, 4),
                "from": peer.get("host", src_ip),
                "iter": (qp >> 16) & 0xF,
                "expected_psn": expected,
                "got_psn": got,
            }
            job.gap_events.append(event)
            return event
        return None

    def results(self, extra):
        meters = {p.ifname: p.meter for p in self.ports.values()}
        return {
            "host": self.cfg["host"],
            "jobs": [j.results() for j in self.jobs],
            # Whether each port's line stayed busy while frames waited
            # for it: the generator's fidelity (see transport.LineMeter).
            "pacing": {
                "late_packets": sum(m.late for m in meters.values()),
                "max_lag_s": max(m.max_lag_s for m in meters.values()),
                "lost_s": sum(m.lost_s for m in meters.values()),
                "tx_s": sum(m.tx_s for m in meters.values()),
                "ports": {name: m.summary() for name, m in meters.items()},
            },
            "port_send_errors": {p.ifname: p.errors for p in self.ports.values()},
            "control_frames_dropped": sum(p.ctrl_dropped for p in self.ports.values()),
            "frames": dict(self.frames),
            "route_lookups": self.picker.lookups,
            # Frames the kernel dropped because this agent did not read
            # them in time (the host short of CPU): a loss the emulated
            # network did not cause.
            "rx_buffer_bytes": self.rx_buffer,
            "rx_overflows": _delta(udp_rcvbuf_errors(), self.rx_overflows_at_start),
            "time_dilation": self.dilation,
            **extra,
        }


def receive_buffer(sock, want):
    """Give `sock` a receive buffer of `want` bytes, past net.core.rmem_max
    where allowed (the agents run as root; a stock kernel caps SO_RCVBUF at
    208 KB, some twenty jumbo frames). Returns what the kernel granted."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUFFORCE, want)
    except (OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, want)
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


def parse_udp_rcvbuf_errors(snmp_text):
    """UDP's RcvbufErrors from the text of /proc/net/snmp (None if absent)."""
    rows = [line.split() for line in snmp_text.splitlines() if line.startswith("Udp:")]
    if len(rows) < 2 or "RcvbufErrors" not in rows[0]:
        return None
    try:
        return int(rows[1][rows[0].index("RcvbufErrors")])
    except (IndexError, ValueError):
        return None


def udp_rcvbuf_errors():
    """This network namespace's UDP receive-buffer drops so far."""
    try:
        with open("/proc/net/snmp") as fh:
            return parse_udp_rcvbuf_errors(fh.read())
    except OSError:
        return None


def _delta(end, start):
    return None if end is None or start is None else end - start


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as fh:
        cfg = json.load(fh)
    agent = Agent(cfg)
    try:
        # The agent stands in for NIC hardware: let it preempt ordinary
        # processes so its pacing stays on time (Open vSwitch runs at -10).
        os.nice(-5)
    except OSError:
        pass

    def stop(signum, frame):
        agent.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # Set up the switches' entries for every path now (see Agent.warm);
    # a job that starts later warms its paths again just before, since
    # idle entries expire. Then tell the runner we are set up, and wait for
    # the common start time.
    for job in agent.jobs:
        agent.warm(job)
    print(json.dumps({"event": "ready", "host": cfg["host"]}), flush=True)
    line = sys.stdin.readline()
    if not line:
        return  # the runner went away before the start
    agent.set_start(json.loads(line)["start_at"])
    if os.environ.get("HPNLAB_PROFILE"):  # developer aid: where the agent's CPU goes
        import cProfile

        prof = cProfile.Profile(time.process_time)
        extra = prof.runcall(agent.run)
        prof.dump_stats(cfg["out"] + ".prof")
    else:
        extra = agent.run()
    out = agent.results(extra)
    tmp = cfg["out"] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(tmp, cfg["out"])
    agent.picker.close()


if __name__ == "__main__":
    main()
