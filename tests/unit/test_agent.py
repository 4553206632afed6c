"""Pure pieces of the traffic agent (the agent itself runs in the
integration tier, inside emulated hosts)."""

from types import SimpleNamespace

import pytest

from traffic import agent, gobackn


def test_qp_numbers_avoid_special_qps_and_round_trip():
    seen = set()
    for job in range(8):
        for it in range(20):
            for tag in (0, 1, 2, 65535):
                qp = agent.qp_number(job, it, tag)
                assert qp >= 0x800000 and qp < 1 << 24  # never QP 0/1 (MAD)
                assert agent.qp_job(qp) == job
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
    heads = agent.Agent._heads(port, 0.0)
    assert heads == [a_old, b]  # oldest transfer per peer; peers in a stable order
    a_old.gbn.on_sent(0, 0.0)
    a_old.gbn.on_sent(1, 0.0)
    a_old.gbn.on_sent(2, 0.0)
    a_old.gbn.on_sent(3, 0.0)
    assert agent.Agent._heads(port, 0.0) == [a_new, b]  # the next chunk to that peer goes on


def test_gaps_are_counted_and_the_first_few_kept_with_sender_and_psns():
    Agent, MAX_GAP_EVENTS = agent.Agent, agent.MAX_GAP_EVENTS
    rank = SimpleNamespace(peer_by_ip={"10.0.0.2": {"host": "s0h1"}})
    job = SimpleNamespace(counters={"gaps_seen": 0}, gap_events=[], start_mono=100.0)
    qp = agent.qp_number(1, 3, 5)
    for k in range(MAX_GAP_EVENTS + 5):
        Agent._note_gap(rank, job, "10.0.0.2", qp, 7, 9 + k, 100.5 + k)
    assert job.counters["gaps_seen"] == MAX_GAP_EVENTS + 5
    assert len(job.gap_events) == MAX_GAP_EVENTS
    assert job.gap_events[0] == {"t": 0.5, "from": "s0h1", "iter": 3, "expected_psn": 7, "got_psn": 9}
    other = SimpleNamespace(counters={"gaps_seen": 0}, gap_events=[], start_mono=0.0)
    Agent._note_gap(rank, other, "10.9.9.9", qp, 0, 1, 1.0)
    assert other.gap_events[0]["from"] == "10.9.9.9"  # an unknown sender: its address


SNMP = (
    "Ip: Forwarding DefaultTTL\nIp: 2 64\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors\n"
    "Udp: 1200 3 17 900 17 0 0\n"
    "UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n"
    "UdpLite: 0 0 0 0 99 0\n"
)


def test_receive_buffer_drops_are_read_from_the_udp_counters():
    assert agent.parse_udp_rcvbuf_errors(SNMP) == 17  # Udp's, not UdpLite's
    assert agent.parse_udp_rcvbuf_errors("Ip: a\nIp: 1\n") is None
    assert agent.parse_udp_rcvbuf_errors("Udp: InDatagrams\nUdp: 5\n") is None
    assert agent._delta(30, 17) == 13 and agent._delta(None, 17) is None


def test_the_receive_buffer_is_granted_past_rmem_max_for_root():
    import os
    import socket

    if os.geteuid() != 0:
        pytest.skip("SO_RCVBUFFORCE needs root (CAP_NET_ADMIN)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        # the kernel reports twice what was asked (its bookkeeping overhead)
        assert agent.receive_buffer(s, agent.RX_BUFFER) >= agent.RX_BUFFER


def _warming_agent():
    """An agent stand-in with what Agent.warm touches: a picker that answers
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
        warm_lead_s=0.4,
    )
    fake.template = lambda *a, **k: agent.Agent.template(fake, *a, **k)
    fake.warm = lambda job: agent.Agent.warm(fake, job)
    return fake, sent, picks


def _warm_job(start_mono=10.0):
    peers = [{"ip": f"10.0.0.{i + 1}", "mac": f"02:00:0a:00:00:0{i + 1}"} for i in range(3)]
    steps = [
        SimpleNamespace(kind="send", peer=1),
        SimpleNamespace(kind="recv", peer=2),
        SimpleNamespace(kind="send", peer=1),
    ]
    return SimpleNamespace(
        id=2,
        rank=0,
        peers=peers,
        steps=steps,
        dscp=26,
        pins={1: "p1"},
        port=None,
        start_mono=start_mono,
        warmed=False,
        done=False,
        wake_at=0.0,
    )


def test_warming_sends_one_frame_down_each_path_of_the_job():
    from traffic import roce
    from traffic.transfers import flow_sport

    fake, sent, picks = _warming_agent()
    agent.Agent.warm(fake, _warm_job())
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
    assert opcode == roce.ACK and qp == agent.WARM_QP
    # a receiver finds no transfer under that QP: the frame changes nothing
    rx = SimpleNamespace(outflows={}, job_by_id={})
    agent.Agent._dispatch(rx, data[roce.BTH_OFF :], "10.0.0.1", 0, 0.0)
    assert agent.WARM_QP < 0x800000 <= agent.qp_number(0, 0, 0)  # never a transfer's QP


def test_a_later_job_warms_its_paths_just_before_it_starts(monkeypatch):
    fake, sent, _ = _warming_agent()
    job = _warm_job(start_mono=10.0)
    # the start time given, the loop first wakes for the job one lead before it
    fake.jobs, fake.cfg = [job], {"deadline_s": 100.0}
    monkeypatch.setattr(agent.time, "monotonic", lambda: 1000.0)
    monkeypatch.setattr(agent.time, "time", lambda: 5000.0)
    agent.Agent.set_start(fake, 5000.0)
    assert job.wake_at == pytest.approx(1009.6)
    job.start_mono, job.wake_at = 10.0, 0.0
    agent.Agent._advance(fake, job, 5.0)
    assert job.wake_at == pytest.approx(9.6) and not job.warmed and fake.frames["warm_sent"] == 0
    agent.Agent._advance(fake, job, 9.6)
    assert job.warmed and fake.frames["warm_sent"] == 3 and job.wake_at == 10.0
    agent.Agent._advance(fake, job, 9.8)  # once only
    assert fake.frames["warm_sent"] == 3


@pytest.mark.parametrize("control_dscp, expected", [(None, 26), (48, 48)])
def test_control_frames_ride_the_jobs_class_or_their_own(control_dscp, expected):
    from traffic import roce

    fake, sent, _ = _warming_agent()
    fake.control_dscp = control_dscp
    fake.ctrl = {}
    fake.peer_by_ip = {"10.0.0.2": {"ip": "10.0.0.2", "mac": "02:00:0a:00:00:02"}}
    fake.frames["ctrl_sent"] = 0
    for opcode in (roce.ACK, roce.CNP):
        agent.Agent._send_ctrl(fake, "10.0.0.2", 0x800001, 26, opcode, 5, syndrome=roce.ACK_SYNDROME)
    assert fake.frames["ctrl_sent"] == 2
    assert [roce.dissect(f)["IP"].tos >> 2 for f in sent["p0"]] == [expected, expected]
