"""What a traffic agent keeps per transfer: queue-pair numbers both ends
derive from the schedule, a send step as a paced RoCE flow (OutFlow), and a
receive (InFlow). One rank of a job, whose steps these transfers carry out,
is in job.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import roce, transport
from .gobackn import GbnReceiver, GbnSender
from .nic import PORT_BURST

if TYPE_CHECKING:
    from .cframes import CFrames, CSend
    from .collectives import Step
    from .job import Job


def qp_number(job_id: int, iteration: int, tag_index: int) -> int:
    """Destination QP: 1 | job (3 bits) | iteration mod 16 (4 bits) | transfer
    (16 bits). Both ends derive it from the same schedule, so no handshake
    is needed; the top bit keeps clear of InfiniBand's special QPs 0 and 1
    (which Wireshark would decode as management datagrams)."""
    return 0x800000 | (job_id & 0x7) << 20 | (iteration & 0xF) << 16 | (tag_index & 0xFFFF)


def qp_job(qp: int) -> int:
    return (qp >> 20) & 0x7


def flow_sport(job_id: int, peer: int, rank: int) -> int:
    """The UDP source port of rank `rank`'s connection to rank `peer` of job
    `job_id`: flow entropy per connection, as a RoCE NIC sets it per QP. A
    connection's transfers take one path and stay in order, different peers
    spread over the ports, and the controller, told the same numbers, can
    pin each connection to a path (the source port is the path selector)."""
    return 49152 + ((job_id << 12 | peer) * 7919 + rank * 131) % 16384


@dataclass(frozen=True)
class FlowSettings:
    """What every send flow of an agent is given: its frames' payload size,
    the go-back-N window and timeout, and the line rate below which DCQCN's
    rate is paced in user space (with `burst_packets` of catch-up credit)."""

    payload: int  # bytes of payload in a full frame
    window: int  # packets in flight at most
    rto_s: float  # the go-back-N timeout (time-dilated)
    line_rate_bps: float  # the NIC port's rate
    burst_packets: int = PORT_BURST
    cframes: CFrames | None = None  # the C library that sends middle frames (None: Python does)


# (peer, dscp, payload length) -> a frame template toward that peer
TemplateFor = Callable[[dict, int, int], roce.FrameTemplate]


class OutFlow:
    """One send step of one iteration: a RoCE flow to a peer.

    `template` builds (or finds) the frame template for a peer, class and
    payload length; `dcqcn` is the rate control of the queue pair the flow
    belongs to (this job's connection to the peer), not of one transfer: a
    new transfer keeps the rate the last one reached instead of starting at
    line rate again."""

    def __init__(
        self,
        settings: FlowSettings,
        job: Job,
        iteration: int,
        step: Step,
        template: TemplateFor,
        dcqcn: transport.Dcqcn,
    ) -> None:
        self.job, self.iteration, self.step = job, iteration, step
        self.peer = job.peers[step.peer]
        self.qp = qp_number(job.id, iteration, job.tag_index[step.tag])
        self.sport = flow_sport(job.id, step.peer, job.rank)
        payload = settings.payload
        self.npackets = max(1, -(-step.nbytes // payload))
        tail = step.nbytes - (self.npackets - 1) * payload
        self.full = template(self.peer, job.dscp, payload).retarget(self.sport, self.qp)
        self.last = (
            self.full
            if tail == payload
            else template(self.peer, job.dscp, tail).retarget(self.sport, self.qp)
        )
        self.gbn = GbnSender(self.npackets, settings.window, settings.rto_s)
        self.dcqcn = dcqcn
        self.pacer = transport.Pacer(self.dcqcn.rate, burst_packets=settings.burst_packets)
        self.paced = self.dcqcn.rate < settings.line_rate_bps  # below line rate: pace in user space
        self.port: str | None = None
        self.seq = (iteration, step.index)  # issue order: FIFO per peer
        self.cframes = settings.cframes
        self.native: CSend | None = None

    def opcode(self, psn: int) -> int:
        if self.npackets == 1:
            return roce.SEND_ONLY
        if psn == 0:
            return roce.SEND_FIRST
        return roce.SEND_LAST if psn == self.npackets - 1 else roce.SEND_MIDDLE

    def next_run(self, first: int, count: int) -> tuple[CSend | None, int]:
        """How the next of `count` frames from `first` go out: (the C
        library's sender, n) for n middle frames, or (None, n) for n frames
        that self.frame makes (up to the first the library could take)."""
        last = self.npackets - 1
        if self.cframes is None or first >= last:
            return None, count
        if first == 0:
            return None, 1
        if self.native is None:
            table = self.full.table_icrc(roce.SEND_MIDDLE)
            if table is None:  # it comes once a middle frame was hashed the long way
                return None, 1
            self.native = self.cframes.sender(self.full.buf, roce.BTH_OFF, *table)
        return self.native, min(count, last - first)

    def frame(self, psn: int) -> bytearray:
        """The frame of one PSN (in the template's reused buffer: send it at once)."""
        if psn == self.npackets - 1:
            return self.last.frame(psn, self.opcode(psn), True)
        return self.full.frame(psn, roce.SEND_FIRST if psn == 0 else roce.SEND_MIDDLE, psn % 8 == 7)


class InFlow:
    """One receive step of one iteration under way: go-back-N's receiving
    end and what arrived."""

    def __init__(self, job: Job, step: Step, payload: int, cnp_interval_s: float, nak_retry_s: float) -> None:
        self.job, self.step = job, step
        self.nbytes = step.nbytes
        self.npackets = max(1, -(-self.nbytes // payload))
        self.rx = GbnReceiver(self.npackets, cnp_interval_s=cnp_interval_s, nak_retry_s=nak_retry_s)
        self.bytes = 0
        # (psn awaited, gap event or None, time the gap was seen)
        self.open_gap: tuple[int, dict | None, float] | None = None
