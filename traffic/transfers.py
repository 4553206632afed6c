"""What a traffic agent keeps per rank and per transfer: queue-pair numbers
both ends derive from the schedule, a send step as a paced RoCE flow
(OutFlow), a receive (InFlow), and one rank of one job (Job) with its
iterations and counters."""

from . import collectives, gobackn, roce, transport
from .nic import PORT_BURST


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


class OutFlow:
    """One send step of one iteration: a RoCE flow to a peer."""

    def __init__(self, agent, job, iteration, step, now):
        self.job, self.iteration, self.step = job, iteration, step
        self.peer = job.peers[step.peer]
        self.qp = qp_number(job.id, iteration, job.tag_index[step.tag])
        self.sport = flow_sport(job.id, step.peer, job.rank)
        payload = agent.payload
        self.npackets = max(1, -(-step.nbytes // payload))
        tail = step.nbytes - (self.npackets - 1) * payload
        self.full = agent.template(self.peer, job.dscp, payload).retarget(self.sport, self.qp)
        self.last = (
            self.full
            if tail == payload
            else agent.template(self.peer, job.dscp, tail).retarget(self.sport, self.qp)
        )
        self.gbn = gobackn.GbnSender(self.npackets, agent.window, agent.rto_s)
        # Rate control belongs to the queue pair (this job's connection to
        # the peer), not to one transfer: a new transfer keeps the rate the
        # last one reached instead of starting at line rate again.
        self.dcqcn = agent.qp_rate(self.peer["ip"], job.id)
        self.pacer = transport.Pacer(self.dcqcn.rate, burst_packets=PORT_BURST)
        self.paced = self.dcqcn.rate < agent.line_rate_bps  # below line rate: pace in user space
        agent.any_paced |= self.paced
        self.port = None
        self.seq = (iteration, step.index)  # issue order: FIFO per peer

    def opcode(self, psn: int) -> int:
        if self.npackets == 1:
            return roce.SEND_ONLY
        if psn == 0:
            return roce.SEND_FIRST
        return roce.SEND_LAST if psn == self.npackets - 1 else roce.SEND_MIDDLE

    def frame(self, psn):
        tpl = self.last if psn == self.npackets - 1 else self.full
        ackreq = psn == self.npackets - 1 or psn % 8 == 7
        return tpl.frame(psn, opcode=self.opcode(psn), ackreq=ackreq)


class InFlow:
    def __init__(self, nbytes, payload, agent):
        self.nbytes = nbytes
        self.npackets = max(1, -(-nbytes // payload))
        self.rx = gobackn.GbnReceiver(
            self.npackets, cnp_interval_s=agent.dcqcn_params.cnp_interval_s, nak_retry_s=agent.nak_retry_s
        )
        self.bytes = 0
        self.open_gap = None  # (psn awaited, gap event or None, time the gap was seen)


class Job:
    """One rank of one job: its schedule, iterations and counters."""

    def __init__(self, spec, start_mono):
        self.id = spec["id"]
        self.name = spec["name"]
        self.rank = spec["rank"]
        self.peers = spec["peers"]
        self.dscp = spec["dscp"]
        self.port = spec.get("port")
        # {peer rank: NIC port}: where the controller pinned this rank's
        # connection to a peer (precise path selection); the rest spread
        self.pins = {int(peer): port for peer, port in (spec.get("pins") or {}).items()}
        self.compute_s = spec["compute_s"]
        self.overlap = spec["overlap"]
        self.iterations = spec["iterations"]
        self.schedule = collectives.for_job(
            spec["collective"],
            len(self.peers),
            spec["bytes"],
            groups=spec.get("groups"),
            port=self.port,
            microbatches=spec.get("microbatches", 1),
        )
        self.steps = self.schedule.steps[self.rank]
        tags = sorted({s.tag for steps in self.schedule.steps.values() for s in steps})
        self.tag_index = {t: i for i, t in enumerate(tags)}
        self.warmed = False  # its paths set up just before its start (Agent.warm)
        self.start_mono = start_mono + spec.get("start", 0.0)
        self.iter = -1
        self.records = []
        self.trace = []
        self.done = False
        self.status = {}
        self.pending = []
        self.counters = {
            "bytes_sent": 0,
            "bytes_received": 0,
            "packets_sent": 0,
            "retransmitted": 0,
            "timeouts": 0,
            "naks_received": 0,
            "cnps_received": 0,
            "cnps_sent": 0,
            "ce_marks": 0,
            "gaps_seen": 0,
        }
        self.gap_events = []  # the first few gaps this rank saw: where loss showed up

    def begin_iteration(self, now: float) -> None:
        self.iter += 1
        self.t_start = now
        self.comm_start = now + (1.0 - self.overlap) * self.compute_s
        self.compute_end = now + self.compute_s
        self.status = {s.index: "wait" for s in self.steps}
        self.pending = list(self.steps)  # steps not done yet, in schedule order
        self.iter_bytes = {"sent": 0, "received": 0}
        self.first_comm = None

    def end_iteration(self, now):
        """Record the iteration that ends now and begin the next one (or
        finish). Returns the record."""
        comm = now - self.first_comm if self.first_comm else 0.0
        rec = {
            "job": self.name,
            "rank": self.rank,
            "iter": self.iter,
            "start": self.t_start - self.start_mono,
            "end": now - self.start_mono,
            "compute_s": self.compute_s,
            "comm_s": comm,
            "iter_s": now - self.t_start,
            "bytes_sent": self.iter_bytes["sent"],
            "bytes_received": self.iter_bytes["received"],
        }
        self.records.append(rec)
        if self.iter + 1 >= self.iterations:
            self.done = True
        else:
            self.begin_iteration(now)
        return rec

    def results(self) -> dict:
        """What this rank measured, for the agent's results file."""
        return {
            "name": self.name,
            "rank": self.rank,
            "iterations_planned": self.iterations,
            "iterations": self.records,
            **self.counters,
            "bytes_per_iteration_planned": self.schedule.bytes_sent(self.rank),
            "gap_events": self.gap_events,
            "trace": self.trace,
        }
