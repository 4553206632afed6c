"""Pure pieces of the traffic agent (the agent itself runs in the
integration tier, inside emulated hosts)."""
from types import SimpleNamespace

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
