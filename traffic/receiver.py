"""The receiving side of a traffic agent: every frame that arrives.

Frames arrive on a UDP socket bound to port 4791 that also reports each
datagram's ECN bits. Data frames feed the receives under way (InFlow): the
receiver answers with ACKs, NAKs for gaps and CNPs for CE marks, and
re-ACKs a transfer it already finished when its sender resends. ACKs, NAKs
and CNPs for this host's own transfers go to the sending side."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import roce
from .cframes import RECORD, SLOTS, CFrames, ip_name
from .roce import BTH_FIELDS, PSN_MASK
from .transfers import InFlow, qp_job
from .transport import ReadMeter

if TYPE_CHECKING:
    from .collectives import Step
    from .job import Job
    from .sender import Sender

IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("qq")
# Room for both control messages a frame brings: its arrival stamp (a
# timespec, SO_TIMESTAMPNS), then its TOS byte (IP_RECVTOS), in that order.
ANC_SPACE = socket.CMSG_SPACE(TIMESPEC.size) + socket.CMSG_SPACE(4)
DATA_HEADER = roce.BTH_LEN + roce.ICRC_LEN  # a data frame's UDP payload beyond its payload
MAX_RECV_PER_PASS = 256  # frames received per loop pass, so sending never starves
MAX_FRAME = 9216  # no frame exceeds the largest MTU
MAX_GAP_EVENTS = 100  # gap events kept per job and rank: enough to match each to its cause
RX_BUFFER = 4 << 20  # the receive socket's buffer: a few hundred jumbo frames
# Linux's option number (asm-generic/socket.h): Python's socket module names
# it only from 3.12, and without it the buffer stays at rmem_max.
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


class Receiver:
    """The receive socket and the receives under way.

    `transfer_ended(job, step, now)` is called when the transfer of a step
    of the job has ended (its last data frame arrived, or its last ACK);
    `frames` is the agent's count of the frames it handled (this
    side adds received)."""

    def __init__(
        self,
        jobs: list[Job],
        sender: Sender,
        transfer_ended: Callable[[Job, Step, float], None],
        peer_by_ip: dict[str, dict],
        frames: dict[str, int],
        payload: int,
        cnp_interval_s: float,
        nak_retry_s: float,
        reads: ReadMeter,
        cframes: CFrames | None = None,
    ) -> None:
        self.sender = sender
        self.reads = reads
        self.transfer_ended = transfer_ended
        self.peer_by_ip = peer_by_ip
        self.frames = frames
        self.payload = payload
        self.cnp_interval_s = cnp_interval_s
        self.nak_retry_s = nak_retry_s
        self.job_by_id = {job.id: job for job in jobs}
        self.qp_map = expected_receives(jobs)
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx_buffer = receive_buffer(self.rx, RX_BUFFER)
        self.rx_overflows_at_start = udp_rcvbuf_errors()
        self.rx.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        self.rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.rx.bind(("0.0.0.0", roce.ROCE_PORT))
        self.rx.setblocking(False)
        self.rx_buf = bytearray(MAX_FRAME)  # every frame is received into this one buffer
        self.rx_bufs = [self.rx_buf]
        self.rx_view = memoryview(self.rx_buf)
        self.native = cframes.receiver(MAX_FRAME) if cframes is not None else None
        self.inflows: dict[tuple[str, int], InFlow] = {}  # (peer ip, qp) -> InFlow
        # (peer ip, qp) -> (iteration, last psn) of finished receives
        self.completed: dict[tuple[str, int], tuple[int, int]] = {}

    def receive(self, now: float) -> bool:
        """Handle what arrived; True if anything did."""
        if self.native is not None:
            return self._receive_native(now)
        recv_into = self.rx.recvmsg_into
        buf, bufs, view = self.rx_buf, self.rx_bufs, self.rx_view
        inflows, dispatch = self.inflows, self._dispatch
        n = nbytes = 0
        first_anc, read_at = None, 0.0
        for n in range(MAX_RECV_PER_PASS):  # noqa: B007 (n counts the frames, read after the loop)
            try:
                size, anc, _flags, addr = recv_into(bufs, ANC_SPACE)
            except BlockingIOError:
                break
            if first_anc is None:  # the pass's oldest frame: how long it waited
                first_anc, read_at = anc, time.time()
            nbytes += size
            # The TOS byte comes last, after the arrival stamp.
            tos = anc[-1][2][0] if anc and anc[-1][1] == socket.IP_TOS else 0
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
        if n:
            self.frames["received"] += n
            arrived = arrival_s(first_anc)
            if arrived is not None:
                self.reads.read(max(0.0, read_at - arrived), nbytes)
        return n > 0

    def _receive_native(self, now: float) -> bool:
        """receive, with the C library reading the frames (up to SLOTS a
        system call) and grouping those the fast path takes into runs; each
        frame meets the same decisions as in receive, in the same order."""
        native = self.native
        assert native is not None
        fd, read, records = self.rx.fileno(), native.read, native.records_view
        inflows, dispatch, unpack = self.inflows, self._dispatch, RECORD.iter_unpack
        frames = nbytes = 0
        stamp_ns = read_ns = 0
        while frames < MAX_RECV_PER_PASS:
            n = read(fd, MAX_RECV_PER_PASS - frames)
            if not n:
                break
            got = native.frames.value
            if not frames:  # the pass's oldest frame: how long it waited
                stamp_ns, read_ns = native.stamp_ns.value, native.read_ns.value
            frames += got
            nbytes += native.nbytes.value
            for src, w1, w2, slot, count, run_bytes, _op, tos, fast in unpack(records[: n * RECORD.size]):
                ip = ip_name(src)
                if fast:
                    psn = w2 & PSN_MASK
                    inflow = inflows.get((ip, w1 & PSN_MASK))
                    if inflow is not None and inflow.rx.in_order_run(psn, count):
                        inflow.bytes += run_bytes
                        continue
                    for k in range(count):  # frame by frame, as receive does
                        inflow = inflows.get((ip, w1 & PSN_MASK))
                        if inflow is not None and inflow.rx.in_order((psn + k) & PSN_MASK):
                            inflow.bytes += native.payload(slot + k)
                        else:
                            dispatch(native.frame(slot + k), ip, tos, now)
                else:
                    dispatch(native.frame(slot), ip, tos, now)
            if got < SLOTS:
                break  # the socket was empty: no call to find that out
        if frames:
            self.frames["received"] += frames
            if stamp_ns:
                self.reads.read(max(0.0, (read_ns - stamp_ns) * 1e-9), nbytes)
        return frames > 0

    def _dispatch(self, data: bytes, src_ip: str, tos: int, now: float) -> None:
        opcode, qp, psn, ackreq, _fecn, _becn = roce.parse_bth(data)
        if opcode in roce.DATA_OPCODES:
            self._on_data(data, src_ip, qp, psn, ackreq, tos, now)
        elif opcode == roce.ACK:
            flow = self.sender.on_ack(data, src_ip, qp, psn, now)
            if flow is not None:
                self.transfer_ended(flow.job, flow.step, now)
        elif opcode == roce.CNP:
            job = self.job_by_id.get(qp_job(qp))
            if job is not None:
                self.sender.on_cnp(src_ip, job, now)

    def _on_data(
        self, data: bytes, src_ip: str, qp: int, psn: int, ackreq: bool, tos: int, now: float
    ) -> None:
        key = (src_ip, qp)
        inflow = self.inflows.get(key)
        send_ctrl = self.sender.send_ctrl
        if inflow is None and key in self.completed:
            done_iter, last = self.completed[key]
            target = self.qp_map.get((src_ip, qp_job(qp), qp & 0xFFFF))
            if target is not None and target[0].iter - done_iter < 8:
                # A retransmission after we finished (our ACK was lost): ACK again.
                send_ctrl(src_ip, qp, target[0].dscp, roce.ACK, last, syndrome=roce.ACK_SYNDROME, now=now)
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
                send_ctrl(src_ip, qp, job.dscp, roce.ACK, psn, syndrome=roce.ACK_SYNDROME, now=now)
                return
            inflow = InFlow(job, step, self.payload, self.cnp_interval_s, self.nak_retry_s)
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
                send_ctrl(src_ip, qp, job.dscp, roce.ACK, act[1], syndrome=roce.ACK_SYNDROME, now=now)
            elif act[0] == "nak":
                event = self._note_gap(job, src_ip, qp, act[1], psn, now)
                if inflow.open_gap is None or inflow.open_gap[0] != act[1]:
                    inflow.open_gap = (act[1], event, now)
                send_ctrl(src_ip, qp, job.dscp, roce.ACK, act[1], syndrome=roce.NAK_PSN_SEQ_ERROR, now=now)
            elif act[0] == "cnp":
                job.counters["cnps_sent"] += 1
                send_ctrl(src_ip, qp, job.dscp, roce.CNP, 0, now=now)
        if inflow.rx.done:
            self.transfer_ended(job, inflow.step, now)  # the step this transfer fed may end now

    def finish_recv(self, job: Job, step: Step) -> bool:
        """Whether a recv step's transfer has arrived in full; if so its
        bytes go to the job and it is kept only as finished (to re-ACK)."""
        key = job.transfer_key(step)
        inflow = self.inflows.get(key)
        if inflow is None or not inflow.rx.done:
            return False
        job.counters["bytes_received"] += inflow.bytes
        job.iter_bytes["received"] += inflow.bytes
        self.completed[key] = (job.iter, inflow.npackets - 1)
        del self.inflows[key]
        return True

    def _note_gap(self, job: Job, src_ip: str, qp: int, expected: int, got: int, now: float) -> dict | None:
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

    def overflows(self) -> int | None:
        """Frames the kernel dropped since the start because they were not
        read in time (None where the counter cannot be read)."""
        return _delta(udp_rcvbuf_errors(), self.rx_overflows_at_start)


def arrival_s(anc) -> float | None:
    """When the kernel took in a frame (wall clock, as time.time()), from
    its SO_TIMESTAMPNS control message; None without one."""
    for level, kind, data in anc or ():
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9
    return None


def expected_receives(jobs: list[Job]) -> dict[tuple[str, int, int], tuple[Job, Step]]:
    """(peer ip, job id, tag index) -> (job, recv step) for every recv this host expects."""
    out = {}
    for job in jobs:
        for s in job.steps:
            if s.kind == "recv":
                out[(job.peers[s.peer]["ip"], job.id, job.tag_index[s.tag])] = (job, s)
    return out


def receive_buffer(sock: socket.socket, want: int) -> int:
    """Give `sock` a receive buffer of `want` bytes, past net.core.rmem_max
    where allowed (the agents run as root; a stock kernel caps SO_RCVBUF at
    208 KB, some twenty jumbo frames). Returns what the kernel granted."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, want)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, want)
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


def parse_udp_rcvbuf_errors(snmp_text: str) -> int | None:
    """UDP's RcvbufErrors from the text of /proc/net/snmp (None if absent)."""
    rows = [line.split() for line in snmp_text.splitlines() if line.startswith("Udp:")]
    if len(rows) < 2 or "RcvbufErrors" not in rows[0]:
        return None
    try:
        return int(rows[1][rows[0].index("RcvbufErrors")])
    except (IndexError, ValueError):
        return None


def udp_rcvbuf_errors() -> int | None:
    """This network namespace's UDP receive-buffer drops so far."""
    try:
        with open("/proc/net/snmp") as fh:
            return parse_udp_rcvbuf_errors(fh.read())
    except OSError:
        return None


def _delta(end: int | None, start: int | None) -> int | None:
    return None if end is None or start is None else end - start
