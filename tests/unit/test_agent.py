"""Pure pieces of the traffic agent (the agent itself runs in the
integration tier, inside emulated hosts): its transfers, a job's progress
through its steps, and the sending and receiving sides with fake sockets."""

import json
import socket
import time
from types import SimpleNamespace

import pytest

from traffic import agent, gobackn, receiver, roce, sender, transfers, transport
from traffic.job import IDLE, Job
from traffic.transfers import FlowSettings, InFlow, OutFlow, flow_sport


def test_qp_numbers_avoid_special_qps_and_round_trip():
    seen = set()
    for job in range(8):
        for it in range(20):
            for tag in (0, 1, 2, 65535):
                qp = transfers.qp_number(job, it, tag)
                assert qp >= 0x800000 and qp < 1 << 24  # never QP 0/1 (MAD)
                assert transfers.qp_job(qp) == job
                assert (qp >> 16) & 0xF == it % 16 and qp & 0xFFFF == tag
                seen.add((job, it % 16, tag, qp))
    assert len({s[3] for s in seen}) == len(seen)


def _flow(peer, seq, npackets=4, sent=0):
    gbn = gobackn.GbnSender(npackets, window=64, rto_s=0.25)
    for psn in range(sent):
        gbn.on_sent(psn, 0.0)
    return SimpleNamespace(peer={"ip": peer}, seq=seq, gbn=gbn)


def test_heads_are_fifo_per_peer_and_skip_flows_with_nothing_to_send():
    a_old, a_new = _flow("10.0.0.2", (0, 2)), _flow("10.0.0.2", (0, 4))
    b = _flow("10.0.0.3", (0, 3))
    done = _flow("10.0.0.4", (0, 1), npackets=2, sent=2)  # all sent, awaiting ACKs
    port = SimpleNamespace(flows=[a_new, b, done, a_old])
    heads = sender.Sender.heads(port, 0.0)
    assert heads == [a_old, b]  # oldest transfer per peer; peers in a stable order
    a_old.gbn.on_sent(0, 0.0)
    a_old.gbn.on_sent(1, 0.0)
    a_old.gbn.on_sent(2, 0.0)
    a_old.gbn.on_sent(3, 0.0)
    assert sender.Sender.heads(port, 0.0) == [a_new, b]  # the next chunk to that peer goes on


def test_gaps_are_counted_and_the_first_few_kept_with_sender_and_psns():
    Receiver, MAX_GAP_EVENTS = receiver.Receiver, receiver.MAX_GAP_EVENTS
    rank = SimpleNamespace(peer_by_ip={"10.0.0.2": {"host": "s0h1"}})
    job = SimpleNamespace(counters={"gaps_seen": 0}, gap_events=[], start_mono=100.0)
    qp = transfers.qp_number(1, 3, 5)
    for k in range(MAX_GAP_EVENTS + 5):
        Receiver._note_gap(rank, job, "10.0.0.2", qp, 7, 9 + k, 100.5 + k)
    assert job.counters["gaps_seen"] == MAX_GAP_EVENTS + 5
    assert len(job.gap_events) == MAX_GAP_EVENTS
    assert job.gap_events[0] == {"t": 0.5, "from": "s0h1", "iter": 3, "expected_psn": 7, "got_psn": 9}
    other = SimpleNamespace(counters={"gaps_seen": 0}, gap_events=[], start_mono=0.0)
    Receiver._note_gap(rank, other, "10.9.9.9", qp, 0, 1, 1.0)
    assert other.gap_events[0]["from"] == "10.9.9.9"  # an unknown sender: its address


SNMP = (
    "Ip: Forwarding DefaultTTL\nIp: 2 64\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors\n"
    "Udp: 1200 3 17 900 17 0 0\n"
    "UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n"
    "UdpLite: 0 0 0 0 99 0\n"
)


def test_receive_buffer_drops_are_read_from_the_udp_counters():
    assert receiver.parse_udp_rcvbuf_errors(SNMP) == 17  # Udp's, not UdpLite's
    assert receiver.parse_udp_rcvbuf_errors("Ip: a\nIp: 1\n") is None
    assert receiver.parse_udp_rcvbuf_errors("Udp: InDatagrams\nUdp: 5\n") is None
    assert receiver._delta(30, 17) == 13 and receiver._delta(None, 17) is None


def test_the_receive_buffer_is_granted_past_rmem_max_for_root():
    import os
    import socket

    if os.geteuid() != 0:
        pytest.skip("SO_RCVBUFFORCE needs root (CAP_NET_ADMIN)")
    with open("/proc/sys/net/core/rmem_max") as fh:
        rmem_max = int(fh.read())
    want = max(receiver.RX_BUFFER, rmem_max + (1 << 20))  # past the cap, whatever this machine's is
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        # the kernel keeps twice what was asked (its bookkeeping overhead):
        # held to rmem_max, it would keep 2 * rmem_max, short of 2 * want
        assert receiver.receive_buffer(s, want) >= 2 * want


def _warming_sender():
    """A sender stand-in with what Sender.warm touches: a picker that answers
    port p1 for the pinned path and p0 otherwise, ports that keep the frames."""
    sent = {"p0": [], "p1": []}
    picks = []

    def pick(src, dst, sport, pinned=None):
        picks.append((dst, sport, pinned))
        return pinned or "p0"

    ports = {p: SimpleNamespace(send_ctrl=lambda f, p=p: sent[p].append(bytes(f)) or True) for p in sent}
    fake = SimpleNamespace(
        nic={"ip": "10.0.0.1", "mac": "02:00:0a:00:00:01"},
        templates={},
        picker=SimpleNamespace(pick=pick),
        ports=ports,
        frames={"warm_sent": 0},
    )
    fake.template = lambda *a, **k: sender.Sender.template(fake, *a, **k)
    fake.warm = lambda job: sender.Sender.warm(fake, job)
    return fake, sent, picks


def _peers(n):
    return [{"host": f"h{i}", "ip": f"10.0.0.{i + 1}", "mac": f"02:00:0a:00:00:0{i + 1}"} for i in range(n)]


def _spec(rank, n=3, **kw):
    """A ring AllReduce rank: with 3 ranks, rank 0 sends to rank 1 and receives from rank 2."""
    spec = {
        "id": 2,
        "name": "train",
        "rank": rank,
        "peers": _peers(n),
        "collective": "ring",
        "bytes": 3000,
        "compute_s": 1.0,
        "overlap": 0.0,
        "iterations": 2,
        "dscp": 26,
        "port": None,
        "pins": {"1": "p1"} if rank == 0 else {},
    }
    return {**spec, **kw}


def test_the_ranks_a_process_plays_share_their_jobs_schedule():
    """Built once per process (it costs time in ranks x steps), and the same
    as each rank building its own; another job's is its own."""
    from traffic import collectives

    a, b = Job(_spec(0, n=5), 0.0), Job(_spec(3, n=5), 0.0)
    assert a.schedule is b.schedule and a.tag_index is b.tag_index
    fresh = collectives.for_job("ring", 5, 3000)
    assert a.schedule == fresh and b.steps == fresh.steps[3]
    tags = sorted({s.tag for st in fresh.steps.values() for s in st})
    assert a.tag_index == {t: i for i, t in enumerate(tags)} and len(tags) > 1
    other = Job(_spec(0, n=5, bytes=6000), 0.0)
    assert other.schedule is not a.schedule and other.schedule.size == 6000


def test_warming_sends_one_frame_down_each_path_of_the_job():
    fake, sent, picks = _warming_sender()
    sender.Sender.warm(fake, Job(_spec(0), 10.0))
    # data connection to rank 1 (its own source port, pinned to p1); control
    # connections (source port 4791) to both peers, unpinned
    assert sorted(picks) == sorted(
        [
            ("10.0.0.2", roce.ROCE_PORT, None),
            ("10.0.0.2", flow_sport(2, 1, 0), "p1"),
            ("10.0.0.3", roce.ROCE_PORT, None),
        ]
    )
    assert fake.frames["warm_sent"] == 3 and len(sent["p1"]) == 1 and len(sent["p0"]) == 2
    (data,) = sent["p1"]
    f = roce.dissect(data)
    assert f["UDP"].sport == flow_sport(2, 1, 0) and f["IP"].tos >> 2 == 26
    opcode, qp, *_ = roce.parse_bth(data[roce.BTH_OFF :])
    assert opcode == roce.ACK and qp == sender.WARM_QP
    # a receiver finds no transfer under that QP: the frame changes nothing
    outgoing = SimpleNamespace(outflows={})
    outgoing.on_ack = lambda *a: sender.Sender.on_ack(outgoing, *a)
    advanced = []
    rx = SimpleNamespace(
        sender=outgoing, job_by_id={}, transfer_ended=lambda job, step, now: advanced.append(job)
    )
    receiver.Receiver._dispatch(rx, data[roce.BTH_OFF :], "10.0.0.1", 0, 0.0)
    assert advanced == []
    assert sender.WARM_QP < 0x800000 <= transfers.qp_number(0, 0, 0)  # never a transfer's QP


def test_a_later_job_warms_its_paths_just_before_it_starts(monkeypatch):
    fake, sent, _ = _warming_sender()
    job = Job(_spec(0, start=10.0), 0.0, warm_lead_s=0.4)
    # the start time given, the loop first wakes for the job one lead before it
    fake.jobs, fake.cfg = [job], {"deadline_s": 100.0}
    monkeypatch.setattr(agent.time, "monotonic", lambda: 1000.0)
    monkeypatch.setattr(agent.time, "time", lambda: 5000.0)
    agent.Agent.set_start(fake, 5000.0)
    assert job.wake_at == pytest.approx(1009.6)
    job.start_mono, job.wake_at = 10.0, 0.0
    job.advance(5.0, fake)
    assert job.wake_at == pytest.approx(9.6) and not job.warmed and fake.frames["warm_sent"] == 0
    job.advance(9.6, fake)
    assert job.warmed and fake.frames["warm_sent"] == 3 and job.wake_at == 10.0
    job.advance(9.8, fake)  # once only
    assert fake.frames["warm_sent"] == 3


@pytest.mark.parametrize("control_dscp, expected", [(None, 26), (48, 48)])
def test_control_frames_ride_the_jobs_class_or_their_own(control_dscp, expected):
    fake, sent, _ = _warming_sender()
    fake.control_dscp = control_dscp
    fake.ctrl = {}
    fake.peer_by_ip = {"10.0.0.2": {"ip": "10.0.0.2", "mac": "02:00:0a:00:00:02"}}
    fake.frames["ctrl_sent"] = 0
    for opcode in (roce.ACK, roce.CNP):
        sender.Sender.send_ctrl(fake, "10.0.0.2", 0x800001, 26, opcode, 5, syndrome=roce.ACK_SYNDROME)
    assert fake.frames["ctrl_sent"] == 2
    assert [roce.dissect(f)["IP"].tos >> 2 for f in sent["p0"]] == [expected, expected]


@pytest.mark.parametrize("opcode", [roce.ACK, roce.CNP])
def test_control_templates_kept_stay_few_and_every_frame_names_its_queue_pair(opcode):
    fake, sent, _ = _warming_sender()
    fake.control_dscp, fake.ctrl = None, {}
    fake.peer_by_ip = {"10.0.0.2": {"ip": "10.0.0.2", "mac": "02:00:0a:00:00:02"}}
    fake.frames["ctrl_sent"] = 0
    qps = [0x800000 + i for i in range(3 * sender.CTRL_TEMPLATES_KEPT)]
    for qp in qps + qps[:5]:  # each transfer's QP, then a few late re-ACKs
        sender.Sender.send_ctrl(fake, "10.0.0.2", qp, 26, opcode, 7, syndrome=roce.ACK_SYNDROME)
        # an ACK takes its QP per frame from one template; a CNP has a copy
        assert len(fake.ctrl) <= (0 if opcode == roce.ACK else sender.CTRL_TEMPLATES_KEPT)
    assert [roce.parse_bth(f[roce.BTH_OFF :])[:2] for f in sent["p0"]] == [(opcode, q) for q in qps + qps[:5]]
    assert all(roce.verify_icrc(f) for f in sent["p0"])


def test_an_out_flow_is_given_its_settings_templates_and_rate():
    fake, _, _ = _warming_sender()
    job = Job(_spec(0, bytes=30000), 0.0)
    job.begin_iteration(0.0)
    step = job.steps[0]  # 10,000 bytes to rank 1
    settings = FlowSettings(payload=4096, window=16, rto_s=0.5, line_rate_bps=1e9, burst_packets=3)
    params = transport.DcqcnParams(line_rate_bps=1e9)
    flow = OutFlow(settings, job, job.iter, step, fake.template, transport.Dcqcn(params))
    assert (flow.npackets, flow.gbn.window, flow.gbn.rto_s) == (3, 16, 0.5)
    assert flow.pacer.burst_packets == 3 and not flow.paced  # at line rate: the kernel paces
    assert flow.qp == transfers.qp_number(2, 0, job.tag_index[step.tag]) and flow.sport == flow_sport(2, 1, 0)
    assert [roce.payload_length(bytes(flow.frame(p))[roce.BTH_OFF :]) for p in range(3)] == [4096, 4096, 1808]
    assert [flow.opcode(p) for p in range(3)] == [roce.SEND_FIRST, roce.SEND_MIDDLE, roce.SEND_LAST]
    slowed = transport.Dcqcn(params)
    slowed.on_cnp(0.0)  # the queue pair's rate, not the transfer's: a new flow starts paced
    assert OutFlow(settings, job, job.iter, step, fake.template, slowed).paced
    inflow = InFlow(job, step, 4096, cnp_interval_s=0.01, nak_retry_s=0.02)
    assert inflow.npackets == 3 and (inflow.rx.cnp_interval_s, inflow.rx.nak_retry_s) == (0.01, 0.02)


class _Driver:
    """A StepDriver whose transfers end when the test says so."""

    def __init__(self):
        self.started, self.finished, self.records, self.warmed = [], set(), [], 0

    def warm(self, job):
        self.warmed += 1

    def start_send(self, job, step, now):
        self.started.append((job.iter, step.index))

    def step_done(self, job, step):
        return (job.iter, step.index) in self.finished

    def progress(self, record):
        self.records.append(record)


def test_a_job_computes_then_runs_its_steps_as_their_deps_finish():
    job = Job(_spec(0, overlap=0.25), 0.0)
    driver = _Driver()
    job.advance(0.0, driver)  # iteration 0 begins: compute, communication from 0.75 s
    assert job.iter == 0 and job.wake_at == 0.75 and driver.started == []
    job.advance(0.75, driver)
    sends = [s.index for s in job.steps if s.kind == "send"]
    first = [s.index for s in job.steps if s.kind == "send" and not s.deps]
    assert [i for _, i in driver.started] == first and job.wake_at == IDLE  # waits for transfers
    for _ in range(len(job.steps)):  # each transfer ends in turn; each send waits for its deps
        for s in job.pending:
            driver.finished.add((0, s.index))
            job.transfer_ended(s)
            break
        job.advance(0.8, driver)
    assert sorted(i for _, i in driver.started) == sends and not job.pending
    assert job.iter == 0 and job.wake_at == 1.0  # the compute phase is not over yet
    job.advance(1.0, driver)
    assert [r["iter"] for r in driver.records] == [0] and job.iter == 1
    assert driver.records[0]["comm_s"] == pytest.approx(0.25) and job.wake_at == 1.75
    driver.finished |= {(1, s.index) for s in job.steps}
    job.advance(1.75, driver)
    job.advance(2.0, driver)
    assert job.done and job.wake_at == IDLE and [r["iter"] for r in driver.records] == [0, 1]
    assert driver.warmed == 0  # it started at once: nothing to warm again


class _Port:
    """A NIC port whose frames go into a list (the wire); the C library's
    runs go through a datagram socket pair into the same list."""

    def __init__(self):
        self.flows, self.blocked, self.rr, self.backlogged, self.out = [], False, 0, False, []
        self.native_runs = 0

    def send_run(self, make, first, count, now):
        frames = [bytes(make(psn)) for psn in range(first, first + count)]
        self.out += frames
        return count, sum(map(len, frames)), True

    def send_native(self, native, first, count, now):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        with a, b:
            a.setblocking(False)
            sent, outcome, _err = native.send(a.fileno(), first, count)
            self.out += [b.recv(65536) for _ in range(sent)]
        self.native_runs += 1
        return sent, sent * native.len, outcome

    def send_ctrl(self, frame):
        self.out.append(bytes(frame))
        return True


class _RxSocket:
    """The receive socket: hands over the queued frames' UDP payloads, with
    their TOS byte and source address, as recvmsg_into does."""

    def __init__(self):
        self.queue = []
        self.age = 0.0  # how long each frame has waited when read

    def recvmsg_into(self, bufs, space):
        if not self.queue:
            raise BlockingIOError
        frame = self.queue.pop(0)
        payload = frame[roce.BTH_OFF :]
        bufs[0][: len(payload)] = payload
        src = ".".join(str(b) for b in frame[26:30])  # the IPv4 source address
        arrived = time.time() - self.age
        timespec = receiver.TIMESPEC.pack(int(arrived), int(arrived % 1 * 1e9))
        stamp = (socket.SOL_SOCKET, receiver.SO_TIMESTAMPNS, timespec)
        anc = [stamp, (socket.IPPROTO_IP, socket.IP_TOS, frame[15:16])]
        return len(payload), anc, 0, (src, roce.ROCE_PORT)


class _LoopbackRx:
    """A host's receive socket for real, on loopback: the test hands it each
    frame's UDP payload from a socket bound to the frame's IPv4 source
    address (127.0.0.0/8), with the frame's TOS byte, as the fabric would."""

    def __init__(self, ip):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.IPPROTO_IP, receiver.IP_RECVTOS, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, receiver.SO_TIMESTAMPNS, 1)
        self.sock.bind((ip, 0))
        self.sock.setblocking(False)
        self.senders = {}

    def fileno(self):
        return self.sock.fileno()

    def recvmsg_into(self, bufs, space):
        return self.sock.recvmsg_into(bufs, space)

    def deliver(self, frame):
        src = socket.inet_ntoa(frame[26:30])
        tx = self.senders.get(src)
        if tx is None:
            tx = self.senders[src] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            tx.bind((src, 0))
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, frame[15])
        tx.sendto(frame[roce.BTH_OFF :], self.sock.getsockname())

    def close(self):
        for tx in self.senders.values():
            tx.close()
        self.sock.close()


def _host(spec, cframes=None):
    """One host's agent with its sending and receiving sides, sockets faked
    (their state as Sender/Receiver/Agent.__init__ set it up). With `cframes`
    (the C library), frames are received for real on loopback and the
    library does its part of the sending and receiving."""
    job = Job(spec, 0.0)
    me = spec["peers"][spec["rank"]]
    peer_by_ip = {p["ip"]: p for p in spec["peers"]}
    frames = {"data_sent": 0, "ctrl_sent": 0, "warm_sent": 0, "received": 0}
    host = object.__new__(agent.Agent)
    out = object.__new__(sender.Sender)
    vars(out).update(
        nic={"ip": me["ip"], "mac": me["mac"]},
        settings=FlowSettings(payload=1000, window=64, rto_s=0.25, line_rate_bps=1e9, cframes=cframes),
        line_rate_bps=1e9,
        dcqcn_params=transport.DcqcnParams(line_rate_bps=1e9),
        control_dscp=None,
        peer_by_ip=peer_by_ip,
        frames=frames,
        ports={"p0": _Port()},
        picker=SimpleNamespace(pick=lambda *a: "p0", cache={}),
        outflows={},
        qps={},
        ctrl={},
        templates={},
        any_paced=False,
    )
    rx_buf = bytearray(receiver.MAX_FRAME)
    into = object.__new__(receiver.Receiver)
    vars(into).update(
        sender=out,
        transfer_ended=host.transfer_ended,
        peer_by_ip=peer_by_ip,
        frames=frames,
        payload=1000,
        cnp_interval_s=4e-3,
        nak_retry_s=0.05,
        job_by_id={job.id: job},
        qp_map=receiver.expected_receives([job]),
        rx=_RxSocket() if cframes is None else _LoopbackRx(me["ip"]),
        rx_buf=rx_buf,
        rx_bufs=[rx_buf],
        rx_view=memoryview(rx_buf),
        inflows={},
        completed={},
        reads=transport.ReadMeter(1e9, 0.01),
        native=None if cframes is None else cframes.receiver(receiver.MAX_FRAME),
    )
    vars(host).update(jobs=[job], sender=out, receiver=into, frames=frames)
    return host


def _two_agents_play(lose=None, mark=None, cframes=None, nbytes=10000):
    """A 2-rank ring AllReduce of 5-packet transfers, both agents' sending
    and receiving sides wired back to back; with `lose`, the frame with that
    PSN of the first transfer is lost once and go-back-N repairs it; with
    `mark`, the first frame with that PSN arrives CE-marked. Returns the
    two hosts when their job is done."""
    n = 2
    peers = (
        _peers(n) if cframes is None else [{**p, "ip": f"127.0.3.{i + 1}"} for i, p in enumerate(_peers(n))]
    )
    a, b = (
        _host(_spec(r, n=n, peers=peers, bytes=nbytes, compute_s=0.0, iterations=1, pins={}), cframes)
        for r in (0, 1)
    )
    lost, marked = [], []
    t = 0.0
    try:
        for _ in range(500):
            for host in (a, b):
                host.sender.tick(t, False)
                for job in host.jobs:
                    if t >= job.wake_at:
                        job.advance(t, host)
                host.sender.pump(t)
            for src, dst in ((a, b), (b, a)):
                for frame in src.sender.ports["p0"].out:
                    opcode, qp, psn, *_ = roce.parse_bth(frame[roce.BTH_OFF :])
                    if opcode in roce.DATA_OPCODES and psn == lose and not lost:
                        lost.append(psn)
                        continue
                    if opcode in roce.DATA_OPCODES and psn == mark and not marked:
                        marked.append(psn)
                        frame = frame[:15] + bytes([frame[15] | roce.CE]) + frame[16:]
                    if cframes is None:
                        dst.receiver.rx.queue.append(frame)
                    else:
                        dst.receiver.rx.deliver(frame)
                src.sender.ports["p0"].out.clear()
            for host in (a, b):
                host.receiver.receive(t)
            if all(j.done for h in (a, b) for j in h.jobs):
                break
            t += 0.001
    finally:
        if cframes is not None:
            for host in (a, b):
                host.receiver.rx.close()
    return a, b


def test_a_turn_reads_and_sends_only_when_prompted_or_due():
    """An agent whose sockets select() did not name, and whose timers and
    jobs are not due, has nothing to do in a pass (a process's pass often
    comes for another of its hosts): it neither reads nor fills its ports."""
    host = _host(_spec(0, n=2, pins={}))
    host.begin()
    vars(host).update(deadline=IDLE, linger_s=1.0, tick_s=3600.0, reroute_until=0.0, split=None)
    host.jobs[0].set_clock(time.monotonic() + 3600.0)  # starts in an hour
    host.sender.picker.events = object()
    calls = []
    host.receiver.receive = lambda now: calls.append("receive") or False
    host.sender.pump = lambda now: calls.append("pump")
    host.sender.tick = lambda now, settling: calls.append("tick")
    assert host.turn((), prompted=False) and calls == ["tick", "receive", "pump"]  # due at first
    assert host.due_at > time.monotonic() + 3000  # its next tick and its job's start: an hour on
    calls.clear()
    assert host.turn((), prompted=False) and calls == []
    assert host.turn((), prompted=True) and calls == ["receive", "pump"]
    calls.clear()
    host.due_at = time.monotonic()  # a timer came due
    assert host.turn((), prompted=False) and calls == ["receive", "pump"]
    host.deadline = 0.0
    assert not host.turn((), prompted=False)  # through, prompted or not


@pytest.mark.parametrize("lose", [None, 2])
def test_two_agents_carry_a_job_over_a_fake_wire(lose, capsys):
    a, b = _two_agents_play(lose)
    for host in (a, b):
        (job,) = host.jobs
        assert job.done and [r["iter"] for r in job.records] == [0]
        c = job.counters
        assert c["bytes_sent"] == c["bytes_received"] == 10000 and c["packets_sent"] >= 10
        assert not host.sender.outflows and not host.receiver.inflows
    gaps = a.jobs[0].counters["gaps_seen"] + b.jobs[0].counters["gaps_seen"]
    naks = a.jobs[0].counters["naks_received"] + b.jobs[0].counters["naks_received"]
    assert (gaps, naks) == ((0, 0) if lose is None else (1, 1))
    assert a.frames["received"] > 0 and a.frames["ctrl_sent"] > 0
    assert a.receiver.reads.reads > 0 and a.receiver.reads.late_s == 0.0  # read as they came
    progress = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["rank"] for r in progress) == [0, 1]  # one line per finished iteration


@pytest.mark.parametrize(
    "lose, mark, nbytes",
    [
        (None, None, 10000),
        (2, None, 10000),
        (None, 3, 10000),
        (2, 2, 10000),
        (None, None, 60000),
        (11, None, 60000),
        (None, 13, 60000),
        (12, 20, 60000),
    ],
)
def test_the_c_frame_library_decides_every_frame_as_python_does(lose, mark, nbytes, c_frames, capsys):
    """The same job with the C library sending the middle frames and
    receiving (in runs) as without it: the same counters, frames, records
    and gaps, whether a frame is lost, CE-marked or both; with 30-packet
    transfers, runs also meet the frames that ask for an ACK and the
    receiver's own ACK every 8 packets, after a loss out of step with them."""
    roce.psn_tables(1000)  # the table path from the first middle frame on: the library's part
    plain = _two_agents_play(lose, mark, nbytes=nbytes)
    native = _two_agents_play(lose, mark, c_frames, nbytes=nbytes)
    assert all(h.jobs[0].done for h in plain + native)
    for p, c in zip(plain, native):
        assert c.jobs[0].counters == p.jobs[0].counters
        assert c.frames == p.frames
        assert [r["iter_s"] for r in c.jobs[0].records] == [r["iter_s"] for r in p.jobs[0].records]
        gaps = [[(e["expected_psn"], e["got_psn"]) for e in h.jobs[0].gap_events] for h in (p, c)]
        assert gaps[0] == gaps[1]
    assert sum(h.sender.ports["p0"].native_runs for h in native) > 0  # the library sent some runs
    assert sum(h.jobs[0].counters["cnps_sent"] for h in plain) == int(mark is not None)


def test_the_kernel_stamps_a_datagrams_arrival_before_its_tos_byte():
    # what the receiver's parsing relies on, on this kernel (loopback only)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
    ):
        rx.setsockopt(socket.IPPROTO_IP, receiver.IP_RECVTOS, 1)
        rx.setsockopt(socket.SOL_SOCKET, receiver.SO_TIMESTAMPNS, 1)
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5.0)
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x8B)
        before = time.time()
        tx.sendto(b"x" * 100, rx.getsockname())
        size, anc, flags, _ = rx.recvmsg_into([bytearray(200)], receiver.ANC_SPACE)
        after = time.time()
    assert size == 100 and not flags & socket.MSG_CTRUNC
    assert anc[-1][:2] == (socket.IPPROTO_IP, socket.IP_TOS) and anc[-1][2][0] == 0x8B
    assert before <= receiver.arrival_s(anc) <= after


def test_a_pass_that_reads_frames_late_says_by_how_much():
    a, b = (_host(_spec(r, n=2, bytes=10000, compute_s=0.0, iterations=1, pins={})) for r in (0, 1))
    for job in a.jobs:
        job.advance(0.0, a)
    a.sender.pump(0.0)
    frames = a.sender.ports["p0"].out
    assert len(frames) >= 5
    b.receiver.rx.queue.extend(frames)
    b.receiver.rx.age = 0.03  # the oldest waited 30 ms, against 10 ms allowed
    assert b.receiver.receive(0.0)
    reads = b.receiver.reads
    assert (reads.reads, reads.late_reads) == (1, 1)
    assert reads.late_s == pytest.approx(0.02, abs=0.005)
    payloads = sum(len(f) - roce.BTH_OFF for f in frames)
    assert reads.rx_s == pytest.approx(payloads * 8 / 1e9)


class _Sock:
    """A data socket whose kernel queue takes `room` more frames."""

    def __init__(self, room, error=None):
        self.room, self.error, self.out = room, error, []

    def send(self, frame):
        if self.error is not None and len(self.out) == self.room:
            raise self.error
        if len(self.out) == self.room:
            raise BlockingIOError
        self.out.append(bytes(frame))


@pytest.mark.parametrize(
    "room, error, expected",
    [(10, None, (5, True)), (3, None, (3, False)), (2, OSError(100, "down"), (2, None))],
)
def test_a_run_of_frames_stops_where_the_kernel_stops_taking_them(room, error, expected):
    from traffic.nic import Port

    port = object.__new__(Port)
    vars(port).update(
        sock=_Sock(room, error),
        meter=transport.LineMeter(1e9, 0.25),
        blocked=False,
        backlogged=False,
        errors=0,
    )
    sent, nbytes, outcome = port.send_run(lambda psn: bytes([psn]) * 100, 7, 5, 1.0)
    assert (sent, outcome) == expected and nbytes == 100 * sent
    assert port.sock.out == [bytes([p]) * 100 for p in range(7, 7 + sent)]
    assert port.meter.packets == sent and port.meter.tx_s == pytest.approx(sent * 800 / 1e9)
    assert (port.blocked, port.backlogged, port.errors) == (
        outcome is False,
        outcome is False,
        int(outcome is None),
    )


@pytest.mark.parametrize("collective", ["ring", "halving-doubling", "all-to-all"])
def test_every_step_starts_once_and_only_after_all_its_dependencies_ended(collective):
    """The steps' dependencies as the schedule gives them: a step starts
    (a send's transfer begins) only once each of its deps has ended, and
    ends only after it started; transfers end here in a shuffled order."""
    import random

    job = Job(_spec(1, n=4, collective=collective, compute_s=0.0, iterations=1, bytes=4096 * 8), 0.0)
    driver = _Driver()
    ended, started_at = [], {}
    rng = random.Random(5)
    job.advance(0.0, driver)
    while not job.done:
        for s in job.steps:
            if job.status[s.index] == "active" and s.index not in started_at:
                started_at[s.index] = len(ended)
                assert all(d in ended for d in s.deps), (s.index, s.deps, ended)
        active = [s.index for s in job.steps if job.status[s.index] == "active"]
        assert active, "the job waits for nothing"
        pick = rng.choice(active)
        driver.finished.add((0, pick))
        job.transfer_ended(job.steps[pick])
        ended.append(pick)
        job.advance(0.0, driver)
    assert sorted(ended) == [s.index for s in job.steps] and len(set(ended)) == len(ended)
    sends = sorted(i for _, i in driver.started)
    assert sends == [s.index for s in job.steps if s.kind == "send"]


def test_a_transfer_that_ends_has_its_own_step_asked_not_every_step_under_way():
    """A 64-rank ring keeps 63 receives open at once: each step is asked
    whether it is done when it starts and when its transfer ends, so an
    iteration asks about twice per step, not once per step per transfer."""

    class Counting(_Driver):
        asked = 0

        def step_done(self, job, step):
            self.asked += 1
            return super().step_done(job, step)

    job = Job(_spec(5, n=64, compute_s=0.0, iterations=1, bytes=4096 * 64 * 4), 0.0)
    driver = Counting()
    job.advance(0.0, driver)
    order = []
    while not job.done:
        s = next(s for s in job.steps if job.status[s.index] == "active")
        driver.finished.add((0, s.index))
        order.append(s.index)
        job.transfer_ended(s)
        job.advance(0.0, driver)
    assert sorted(order) == [s.index for s in job.steps] and len(job.steps) == 2 * 2 * 63
    assert driver.asked <= 2 * len(job.steps)
