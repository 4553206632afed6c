"""Traffic agent: plays the ranks of training jobs that live on one host.

Started by the runner inside a host's network namespace:

    python -m traffic.agent CONFIG.json

Each rank runs its iterations: a compute phase (the GPU busy; here just
time passing), then the steps of its collective schedule, each a transfer
to or from a peer rank. Transfers are RoCEv2-looking frames (built once
with scapy, patched per packet; see roce.py) written to a raw socket on the
NIC port the kernel's multipath route picks for the flow (so the host's
per-flow spreading, dead-port skipping and /32 overrides apply), or on a
pinned port. Reliability is go-back-N driven by receiver ACK/NAKs and
timeouts; the rate follows DCQCN on CNPs; every port is paced at its line
rate (transport.py). Frames arrive on a UDP socket bound to port 4791 that
also reports each datagram's ECN bits.

Results (per job: iteration records, bytes, retransmissions, CNPs, pacing
lag, CPU time) go to the JSON file named in the config; one JSON line per
finished iteration goes to stdout for progress.
"""
import json
import os
import select
import signal
import socket
import sys
import time

from . import roce, transport
from .nic import Port, PortPicker
from .transfers import InFlow, Job, OutFlow, qp_job, qp_number

IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
ROUTE_REFRESH_S = 0.1       # how often a flow re-asks the kernel which port to use
WAKE_BATCH = 2              # frames sent per wake-up of a backlogged port (< PORT_BURST)
MAX_BURST_PER_PASS = 16     # packets per port per loop pass, so receiving never starves
MAX_GAP_EVENTS = 20         # gap events kept per job and rank for the report


class Agent:
    def __init__(self, cfg):
        self.cfg = cfg
        self.nic = cfg["nic"]
        self.payload = cfg.get("payload", 4096)
        self.frame_bits = (self.payload + roce.FRAME_OVERHEAD) * 8
        self.window = cfg.get("window", 64)
        # Longer than the deepest queue (100 ms) twice over: a timeout must
        # mean loss, not a full queue. NAKs repair ordinary loss much sooner.
        self.rto_s = cfg.get("rto_s", 0.25)
        self.linger_s = 2 * self.rto_s + 0.1
        self.dcqcn_params = transport.DcqcnParams(line_rate_bps=self.nic["rate_bps"],
                                                  **cfg.get("dcqcn", {}))
        self.jobs = [Job(spec, 0.0) for spec in cfg["jobs"]]
        self.ports = {p: Port(p, self.nic["rate_bps"]) for p in self.nic["ports"]}
        self.picker = PortPicker(self.nic["ports"])
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.rx.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        self.rx.bind(("0.0.0.0", roce.ROCE_PORT))
        self.rx.setblocking(False)
        self.inflows = {}          # (peer ip, qp) -> InFlow
        self.completed = {}        # (peer ip, qp) -> (iteration, last psn) of finished receives
        self.outflows = {}         # (peer ip, qp) -> OutFlow
        self.ctrl = {}             # (peer ip, qp, opcode) -> control FrameTemplate
        self.templates = {}        # (peer ip, dscp, length, opcode) -> scapy-built template
        self.peer_by_ip = {}
        for job in self.jobs:
            for p in job.peers:
                self.peer_by_ip[p["ip"]] = p
        self.qp_map = self._qp_map()
        self.stop = False

    def _qp_map(self):
        """(peer ip, job id, tag index) -> (job, recv step) for every recv this host expects."""
        out = {}
        for job in self.jobs:
            for s in job.steps:
                if s.kind == "recv":
                    out[(job.peers[s.peer]["ip"], job.id, job.tag_index[s.tag])] = (job, s)
        return out

    def set_start(self, start_at):
        """All agents get the same wall-clock start (CLOCK_REALTIME is shared
        by every namespace of the machine); keep time on the monotonic clock."""
        start_mono = time.monotonic() + (start_at - time.time())
        for job in self.jobs:
            job.start_mono += start_mono
        self.deadline = start_mono + self.cfg["deadline_s"]

    # --- main loop ---------------------------------------------------------
    def run(self):
        t_cpu0 = os.times()
        done_at = None
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
            for job in self.jobs:
                self._advance(job, now)
            self._timers(now)
            self._send(now)
            if self._receive(now):
                # Data that completed a step starts the next one now, not
                # after the next sleep: each ring step would otherwise pay it.
                now = time.monotonic()
                for job in self.jobs:
                    self._advance(job, now)
                self._send(now)
            select.select([self.rx], [], [], self._idle_time(time.monotonic()))
        cpu = os.times()
        return {"cpu_s": (cpu.user - t_cpu0.user) + (cpu.system - t_cpu0.system)}

    def _idle_time(self, now):
        """How long the loop may sleep on the socket: until the next packet a
        pacer allows, a job's next phase, a flow's timer, or 5 ms. Never 0
        for nothing: 8 agents busy-polling would eat the CPU the switches need."""
        waits = [0.005]
        for port in self.ports.values():
            sendable = self._heads(port, now)
            if sendable:
                flow_wait = min(f.pacer.wait_time(now) for f in sendable)
                wait = max(port.pacer.wait_time(now), flow_wait)
                if wait > 0:
                    # Wake once per WAKE_BATCH frames: the burst credit sends
                    # them back to back, at half the context switches.
                    wait += (WAKE_BATCH - 1) * self.frame_bits / port.pacer.rate_bps
                waits.append(wait)
        for flow in self.outflows.values():
            waits.append(flow.next_lookup - now)
            if flow.gbn.una < flow.gbn.high:
                waits.append(flow.gbn.timer_start + self.rto_s - now)
        for job in self.jobs:
            if job.done:
                continue
            for t in ((job.start_mono,) if job.iter < 0 else (job.comm_start, job.compute_end)):
                if t > now:
                    waits.append(t - now)
        return max(0.0, min(waits))

    def _advance(self, job, now):
        if job.done or now < job.start_mono:
            return
        if job.iter < 0:
            job.begin_iteration(now)
        progressed = True
        while progressed:
            progressed = False
            for s in job.steps:
                st = job.status[s.index]
                if st == "wait" and now >= job.comm_start and all(
                        job.status[d] == "done" for d in s.deps):
                    job.first_comm = job.first_comm or now
                    if s.kind == "send":
                        self._start_send(job, s, now)
                        job.status[s.index] = "active"
                    else:
                        job.status[s.index] = "active"
                    progressed = True
                if job.status[s.index] == "active" and self._step_done(job, s):
                    job.status[s.index] = "done"
                    if os.environ.get("HPNLAB_TRACE"):
                        job.trace.append((job.iter, s.index, s.kind, round(now - job.start_mono, 4)))
                    progressed = True
        if all(v == "done" for v in job.status.values()) and now >= job.compute_end:
            print(json.dumps(job.end_iteration(now)), flush=True)   # progress for the runner

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
        port = self.picker.pick(self.nic["ip"], flow.peer["ip"], flow.sport, flow.job.port)
        flow.next_lookup = now + ROUTE_REFRESH_S
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
        c["cnps_received"] += flow.dcqcn.cnps
        if flow.port is not None:
            self.ports[flow.port].flows.remove(flow)
        del self.outflows[key]

    def _timers(self, now):
        for flow in list(self.outflows.values()):
            flow.dcqcn.tick(now)
            flow.pacer.set_rate(flow.dcqcn.rate)
            if flow.gbn.check_timeout(now) or now >= flow.next_lookup:
                self._route(flow, now)

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

    def _send(self, now):
        for port in self.ports.values():
            budget = MAX_BURST_PER_PASS
            while budget > 0:
                # Ask the pacers only when there is something to send: asking
                # marks them as waited on, and idle time is not lateness.
                heads = self._heads(port, now)
                if not heads or not port.pacer.ready(now):
                    break
                ready = [f for f in heads if f.pacer.ready(now)]
                if not ready:
                    break
                port.rr = (port.rr + 1) % len(ready)
                flow = ready[port.rr]
                psn = flow.gbn.next_psn(now)
                frame = flow.frame(psn)
                if not port.send(frame, now):
                    break
                flow.pacer.sent(len(frame), now)
                flow.gbn.on_sent(psn, now)
                flow.job.counters["packets_sent"] += 1
                budget -= 1

    def _send_ctrl(self, peer_ip, qp, dscp, opcode, psn=0, syndrome=None, now=0.0):
        key = (peer_ip, qp, opcode)
        tpl = self.ctrl.get(key)
        if tpl is None:
            peer = self.peer_by_ip[peer_ip]
            tpl = self.template(peer, dscp, 0, opcode).retarget(roce.ROCE_PORT, qp)
            self.ctrl[key] = tpl
            tpl.port_name = None
            tpl.next_lookup = 0.0
        if now >= tpl.next_lookup or tpl.port_name is None:
            tpl.port_name = self.picker.pick(self.nic["ip"], peer_ip, roce.ROCE_PORT)
            tpl.next_lookup = now + ROUTE_REFRESH_S
        if tpl.port_name is None:
            return
        frame = tpl.frame(psn, syndrome=syndrome, msn=0) if opcode == roce.ACK else tpl.frame(psn)
        try:  # control frames are small and rare: not paced
            self.ports[tpl.port_name].sock.send(frame)
        except OSError:
            tpl.port_name = None

    def template(self, peer, dscp, payload_len, opcode=roce.SEND_MIDDLE):
        """A frame toward `peer` built with scapy once per kind; flows take
        copies retargeted to their own source port and QP."""
        key = (peer["ip"], dscp, payload_len, opcode)
        tpl = self.templates.get(key)
        if tpl is None:
            tpl = roce.FrameTemplate(self.nic["mac"], peer["mac"], self.nic["ip"], peer["ip"],
                                     roce.ROCE_PORT, 0, dscp, payload_len, opcode=opcode,
                                     aeth=opcode == roce.ACK)
            self.templates[key] = tpl
        return tpl

    # --- receiving ---------------------------------------------------------
    def _receive(self, now):
        """Handle what arrived; True if anything did."""
        got = False
        for _ in range(256):
            try:
                data, anc, _flags, addr = self.rx.recvmsg(65535, socket.CMSG_SPACE(4))
            except BlockingIOError:
                return got
            got = True
            tos = 0
            for level, kind, val in anc:
                if level == socket.IPPROTO_IP and kind == socket.IP_TOS and val:
                    tos = val[0]
            self._dispatch(data, addr[0], tos, now)
        return got

    def _dispatch(self, data, src_ip, tos, now):
        opcode, qp, psn, ackreq, _fecn, _becn = roce.parse_bth(data)
        if opcode in (roce.SEND_FIRST, roce.SEND_MIDDLE, roce.SEND_LAST, roce.SEND_ONLY):
            self._on_data(data, src_ip, qp, psn, ackreq, tos, now)
        elif opcode == roce.ACK:
            flow = self.outflows.get((src_ip, qp))
            if flow is not None:
                syndrome, _msn = roce.parse_aeth(data)
                if syndrome == roce.NAK_PSN_SEQ_ERROR:
                    flow.gbn.on_nak(psn, now)
                else:
                    flow.gbn.on_ack(psn, now)
        elif opcode == roce.CNP:
            flow = self.outflows.get((src_ip, qp))
            if flow is not None:
                flow.dcqcn.on_cnp(now)
                flow.pacer.set_rate(flow.dcqcn.rate)

    def _on_data(self, data, src_ip, qp, psn, ackreq, tos, now):
        key = (src_ip, qp)
        inflow = self.inflows.get(key)
        if inflow is None and key in self.completed:
            done_iter, last = self.completed[key]
            target = self.qp_map.get((src_ip, qp_job(qp), qp & 0xFFFF))
            if target is not None and target[0].iter - done_iter < 8:
                # A retransmission after we finished (our ACK was lost): ACK again.
                self._send_ctrl(src_ip, qp, target[0].dscp, roce.ACK, last,
                                syndrome=roce.ACK_SYNDROME, now=now)
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
                self._send_ctrl(src_ip, qp, job.dscp, roce.ACK, act[1],
                                syndrome=roce.NAK_PSN_SEQ_ERROR, now=now)
            elif act[0] == "cnp":
                job.counters["cnps_sent"] += 1
                self._send_ctrl(src_ip, qp, job.dscp, roce.CNP, 0, now=now)

    def _note_gap(self, job, src_ip, qp, expected, got, now):
        """A receiver saw a PSN beyond the one it expected: a packet of this
        transfer was lost (or overtaken) on the way. Kept so that a run can
        tell where loss showed up and when."""
        job.counters["gaps_seen"] += 1
        if len(job.gap_events) < MAX_GAP_EVENTS:
            peer = self.peer_by_ip.get(src_ip, {})
            event = {"t": round(now - job.start_mono, 4), "from": peer.get("host", src_ip),
                     "iter": (qp >> 16) & 0xF, "expected_psn": expected, "got_psn": got}
            job.gap_events.append(event)
            return event
        return None

    def results(self, extra):
        return {"host": self.cfg["host"],
                "jobs": [j.results() for j in self.jobs],
                # The ports' line-rate pacers are the generator's clock: how
                # often and how far the loop fell behind them.
                "pacing": {"late_packets": sum(p.pacer.late for p in self.ports.values()),
                           "max_lag_s": max(p.pacer.max_lag_s for p in self.ports.values()),
                           "lost_s": sum(p.pacer.lost_s for p in self.ports.values()),
                           "tx_s": sum(p.pacer.tx_s for p in self.ports.values())},
                "port_send_errors": {p.ifname: p.errors for p in self.ports.values()},
                **extra}


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
    # Tell the runner we are set up, then wait for the common start time.
    print(json.dumps({"event": "ready", "host": cfg["host"]}), flush=True)
    line = sys.stdin.readline()
    if not line:
        return  # the runner went away before the start
    agent.set_start(json.loads(line)["start_at"])
    if os.environ.get("HPNLAB_PROFILE"):  # developer aid: where the agent's CPU goes
        import cProfile
        prof = cProfile.Profile()
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
