"""Pure pieces of the traffic agent (the agent itself runs in the
integration tier, inside emulated hosts)."""
from types import SimpleNamespace

import pytest

from traffic import agent, transport


def test_qp_numbers_avoid_special_qps_and_round_trip():
    seen = set()
    for job in range(8):
        for it in range(20):
            for tag in (0, 1, 2, 65535):
                qp = agent.qp_number(job, it, tag)
                assert qp >= 0x800000 and qp < 1 << 24      # never QP 0/1 (MAD)
                assert agent.qp_job(qp) == job
                assert (qp >> 16) & 0xF == it % 16 and qp & 0xFFFF == tag
                seen.add((job, it % 16, tag, qp))
    assert len({s[3] for s in seen}) == len(seen)


def _flow(peer, seq, npackets=4, sent=0):
    gbn = transport.GbnSender(npackets, window=64, rto_s=0.25)
    for psn in range(sent):
        gbn.on_sent(psn, 0.0)
    return SimpleNamespace(peer={"ip": peer}, seq=seq, gbn=gbn)


def test_heads_are_fifo_per_peer_and_skip_flows_with_nothing_to_send():
    a_old, a_new = _flow("10.0.0.2", (0, 2)), _flow("10.0.0.2", (0, 4))
    b = _flow("10.0.0.3", (0, 3))
    done = _flow("10.0.0.4", (0, 1), npackets=2, sent=2)   # all sent, awaiting ACKs
    port = SimpleNamespace(flows=[a_new, b, done, a_old])
    heads = agent.Agent._heads(port, 0.0)
    assert heads == [a_old, b]      # oldest transfer per peer; peers in a stable order
    a_old.gbn.on_sent(0, 0.0)
    a_old.gbn.on_sent(1, 0.0)
    a_old.gbn.on_sent(2, 0.0)
    a_old.gbn.on_sent(3, 0.0)
    assert agent.Agent._heads(port, 0.0) == [a_new, b]   # the next chunk to that peer goes on


def test_gaps_are_counted_and_the_first_few_kept_with_sender_and_psns():
    Agent, MAX_GAP_EVENTS = agent.Agent, agent.MAX_GAP_EVENTS
    rank = SimpleNamespace(peer_by_ip={"10.0.0.2": {"host": "s0h1"}})
    job = SimpleNamespace(counters={"gaps_seen": 0}, gap_events=[], start_mono=100.0)
    qp = agent.qp_number(1, 3, 5)
    for k in range(MAX_GAP_EVENTS + 5):
        Agent._note_gap(rank, job, "10.0.0.2", qp, 7, 9 + k, 100.5 + k)
    assert job.counters["gaps_seen"] == MAX_GAP_EVENTS + 5
    assert len(job.gap_events) == MAX_GAP_EVENTS
    assert job.gap_events[0] == {"t": 0.5, "from": "s0h1", "iter": 3, "expected_psn": 7,
                                 "got_psn": 9}
    other = SimpleNamespace(counters={"gaps_seen": 0}, gap_events=[], start_mono=0.0)
    Agent._note_gap(rank, other, "10.9.9.9", qp, 0, 1, 1.0)
    assert other.gap_events[0]["from"] == "10.9.9.9"   # an unknown sender: its address


SNMP = ("Ip: Forwarding DefaultTTL\nIp: 2 64\n"
        "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors\n"
        "Udp: 1200 3 17 900 17 0 0\n"
        "UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n"
        "UdpLite: 0 0 0 0 99 0\n")


def test_receive_buffer_drops_are_read_from_the_udp_counters():
    assert agent.parse_udp_rcvbuf_errors(SNMP) == 17          # Udp's, not UdpLite's
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
