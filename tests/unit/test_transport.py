"""Transport logic on a virtual clock: pacing, DCQCN, go-back-N over a lossy channel."""

import heapq
import math
import random

import pytest

from traffic import transport
from traffic.gobackn import GbnReceiver, GbnSender
from traffic.transport import RATE_SNAP, Dcqcn, DcqcnParams, Pacer, recovery_bound_s

LINE = 40e6


# --- Pacer ----------------------------------------------------------------------


def paced_count(rate, nbytes, duration):
    p = Pacer(rate)
    t, n = 0.0, 0
    while t < duration:
        if p.ready(t):
            p.sent(nbytes, t)
            n += 1
        else:
            t += p.wait_time(t)
    return p, n


def test_pacer_lets_line_rate_through():
    p, n = paced_count(40e6, 4158, 1.0)
    assert abs(n - 1203) <= 1  # 40e6 / (4158 * 8) = 1202.5 per second
    assert p.late == 0 and p.max_lag_s < 1e-6
    _, n = paced_count(20e6, 4158, 1.0)
    assert abs(n - 601) <= 1


def test_pacer_does_not_burst_after_idling():
    p = Pacer(40e6)
    tx = 4158 * 8 / 40e6
    t = 0.0
    for _ in range(10):
        t += p.wait_time(t)
        p.sent(4158, t)
    t += 1.0  # nothing to send for a second
    sent = 0
    while p.ready(t):
        p.sent(4158, t)
        sent += 1
    assert sent == 2  # burst capped at 2 packets
    assert p.wait_time(t) == pytest.approx(tx)
    assert p.late == 0  # idle time is not lag


def test_pacer_counts_late_polls():
    p = Pacer(40e6)
    t = 0.0
    p.sent(4158, t)
    w = p.wait_time(t)  # caller is told to wait ...
    assert w > 0 and not p.ready(t)
    t += w + 0.005  # ... and comes back 5 ms late
    assert p.ready(t)
    p.sent(4158, t + 0.0001)
    assert p.late == 1
    assert p.max_lag_s == pytest.approx(0.005)
    # a small lag (below the 1 ms tolerance) is recorded but not counted
    t += 0.0001
    t += p.wait_time(t) + 0.0005
    p.sent(4158, t)  # sent without polling ready again
    assert p.late == 1 and p.max_lag_s == pytest.approx(0.005)


def test_pacer_rate_change_and_validation():
    p = Pacer(40e6)
    p.sent(1000, 0.0)
    p.set_rate(8e6)
    p.sent(1000, 0.0002)  # spaced at the old rate
    assert p.wait_time(0.0002) == pytest.approx(0.0002 + 0.001 - 0.0002)
    with pytest.raises(ValueError):
        p.set_rate(0)


# --- DCQCN ----------------------------------------------------------------------


def test_params_defaults_scale_with_line_rate():
    p = DcqcnParams(line_rate_bps=LINE)
    assert p.min_rate_bps == pytest.approx(0.01 * LINE)
    assert p.ai_rate_bps == pytest.approx(0.01 * LINE)
    assert p.hai_rate_bps == pytest.approx(0.1 * LINE)
    assert p.g == 1 / 256 and p.fast_recovery_steps == 5
    assert p.alpha_period_s > p.cnp_interval_s
    assert DcqcnParams(line_rate_bps=LINE, ai_rate_bps=1e5).ai_rate_bps == 1e5
    with pytest.raises(ValueError):
        DcqcnParams(line_rate_bps=LINE, min_rate_bps=2 * LINE)


def test_no_cnp_no_change():
    d = Dcqcn(DcqcnParams(line_rate_bps=LINE))
    d.tick(10.0)
    assert d.rate == LINE and d.alpha == 1.0 and d.cnps == 0


def test_cnp_cuts_rate_by_alpha_over_two():
    params = DcqcnParams(line_rate_bps=LINE)
    d = Dcqcn(params)
    d.on_cnp(1.0)
    assert d.rate == pytest.approx(LINE / 2)  # alpha starts at 1
    assert d.target == LINE and d.cnps == 1
    d.tick(1.1)
    rate, alpha = d.rate, d.alpha
    assert alpha == pytest.approx((1 - params.g) ** 20)  # 100 ms / 5 ms periods
    d.on_cnp(1.1)
    assert d.rate == pytest.approx(rate * (1 - alpha / 2))
    assert d.target == rate
    assert d.alpha == pytest.approx((1 - params.g) * alpha + params.g)


def test_fast_recovery_halves_the_gap():
    params = DcqcnParams(line_rate_bps=LINE)
    d = Dcqcn(params)
    d.on_cnp(0.0)
    d.tick(params.increase_period_s)
    assert d.rate == pytest.approx(0.75 * LINE)
    d.tick(2 * params.increase_period_s)
    assert d.rate == pytest.approx(0.875 * LINE)
    assert d.target == LINE


def test_repeated_cnps_converge_to_min_rate():
    params = DcqcnParams(line_rate_bps=LINE)
    d = Dcqcn(params)
    t, rates = 0.0, []
    for _ in range(300):  # one CNP per interval for 1.2 s
        d.on_cnp(t)
        rates.append(d.rate)
        t += params.cnp_interval_s
    assert all(b <= a for a, b in zip(rates, rates[1:]))
    assert d.rate == params.min_rate_bps
    assert d.alpha > 0.99


def test_recovers_to_line_rate_within_bound():
    params = DcqcnParams(line_rate_bps=LINE)
    f = params.fast_recovery_steps
    # Periods: F fast recovery, F additive, hyper until R_T = line rate, then
    # R_C halves its distance to line rate each period until within RATE_SNAP.
    periods = (
        2 * f
        + math.ceil(max(0.0, LINE - params.min_rate_bps - f * params.ai_rate_bps) / params.hai_rate_bps)
        + math.ceil(math.log2((LINE - params.min_rate_bps) / (RATE_SNAP * LINE)))
    )
    bound = periods * params.increase_period_s
    assert bound == pytest.approx(recovery_bound_s(params))
    assert bound == pytest.approx(0.150)  # 30 periods of 5 ms with the defaults

    d = Dcqcn(params)
    t = 0.0
    while d.rate > params.min_rate_bps:
        d.on_cnp(t)
        t += params.cnp_interval_s
    last_cnp = t - params.cnp_interval_s
    prev, reached = d.rate, None
    while t <= last_cnp + 2 * bound:
        d.tick(t)
        assert d.rate >= prev
        prev = d.rate
        if reached is None and d.rate == LINE:
            reached = t
        t += 0.0005
    assert reached is not None and reached - last_cnp <= bound + 1e-9
    assert d.rate == LINE and d.target == LINE
    # and not trivially: half-way through it was still recovering
    d2 = Dcqcn(params)
    t = 0.0
    while d2.rate > params.min_rate_bps:
        d2.on_cnp(t)
        t += params.cnp_interval_s
    d2.tick(t - params.cnp_interval_s + bound / 2)
    assert d2.rate < LINE


def test_tick_is_idempotent_and_independent_of_polling():
    params = DcqcnParams(line_rate_bps=LINE)
    fine, coarse = Dcqcn(params), Dcqcn(params)
    cnp_times = [0.0, 0.003, 0.02, 0.021, 0.09, 0.4]
    t = 0.0
    for ct in cnp_times:
        while t < ct:
            fine.tick(t)
            t += 0.0001
        fine.on_cnp(ct)
        coarse.on_cnp(ct)
    for d in (fine, coarse):
        d.tick(0.47)
        d.tick(0.47)
    assert fine.rate == pytest.approx(coarse.rate)
    assert fine.target == pytest.approx(coarse.target)
    assert fine.alpha == pytest.approx(coarse.alpha)
    rate = coarse.rate
    coarse.tick(0.47)
    coarse.tick(0.2)  # going back in time: no effect
    assert coarse.rate == rate


# --- go-back-N ------------------------------------------------------------------

DELAY = 0.002  # one-way
PKT = 1000  # bytes per data packet (pacing only)


def transfer(n, window=32, rto=0.03, loss=0.0, seed=0, drop_first=(), limit=30.0):
    """Sender and receiver over a lossy, in-order channel on a virtual clock."""
    rng = random.Random(seed)
    snd, rcv = GbnSender(n, window, rto), GbnReceiver(n, ack_every=8)
    pacer = Pacer(40e6)
    wire, seq, delivered, dropped_once = [], 0, [], set()
    t, dt = 0.0, 0.0001

    def put(kind, psn, ackreq=False):
        nonlocal seq
        if rng.random() < loss:
            return
        if kind == "data" and psn in drop_first and psn not in dropped_once:
            dropped_once.add(psn)
            return
        heapq.heappush(wire, (t + DELAY, seq, kind, psn, ackreq))
        seq += 1

    while t < limit and not (snd.done and rcv.done and not wire):
        while wire and wire[0][0] <= t:
            _, _, kind, psn, ackreq = heapq.heappop(wire)
            if kind == "data":
                before = rcv.received
                for act in rcv.on_data(psn, False, ackreq, t):
                    put(act[0], act[1] if len(act) > 1 else None)
                if rcv.received > before:
                    delivered.append(psn)
            elif kind == "ack":
                snd.on_ack(psn, t)
            elif kind == "nak":
                snd.on_nak(psn, t)
        snd.check_timeout(t)
        while pacer.ready(t):
            psn = snd.next_psn(t)
            if psn is None:
                break
            snd.on_sent(psn, t)
            pacer.sent(PKT, t)
            put("data", psn, ackreq=psn == n - 1 or psn % 16 == 15)
        t += dt
    return snd, rcv, delivered, t


def test_lossless_transfer_has_no_retransmissions():
    snd, rcv, delivered, _ = transfer(500)
    assert snd.done and rcv.done
    assert delivered == list(range(500))
    assert snd.retransmitted == 0 and snd.timeouts == 0 and snd.naks == 0
    assert rcv.duplicates == 0 and rcv.out_of_order == 0 and rcv.received == 500


@pytest.mark.parametrize("seed", range(6))
def test_lossy_transfer_delivers_everything_once_in_order(seed):
    snd, rcv, delivered, t = transfer(400, loss=0.05, seed=seed)
    assert snd.done and rcv.done, f"stalled at una={snd.una} expected={rcv.expected}"
    assert delivered == list(range(400))
    assert snd.retransmitted > 0
    assert snd.naks + snd.timeouts > 0
    assert rcv.received == 400


def test_lost_last_packet_is_recovered_by_timeout():
    snd, rcv, delivered, _ = transfer(100, drop_first={99})
    assert delivered == list(range(100))
    assert snd.timeouts >= 1 and snd.naks == 0 and snd.retransmitted >= 1


def test_lost_middle_packet_is_recovered_by_one_nak():
    snd, rcv, delivered, _ = transfer(300, drop_first={50})
    assert delivered == list(range(300))
    assert snd.naks == 1 and snd.timeouts == 0
    assert 1 <= snd.retransmitted <= snd.window


def test_sender_window_and_bookkeeping():
    s = GbnSender(10, window=4, rto_s=0.1)
    for i in range(4):
        assert s.next_psn(0.0) == i
        s.on_sent(i, 0.0)
    assert s.next_psn(0.0) is None and s.outstanding == 4
    s.on_ack(1, 0.01)
    assert s.una == 2 and s.next_psn(0.01) == 4
    with pytest.raises(ValueError):
        s.on_sent(7, 0.01)
    # stale and bogus acks/naks change nothing
    for f, psn in ((s.on_ack, 0), (s.on_ack, 1), (s.on_ack, 9), (s.on_nak, 1), (s.on_nak, 8)):
        f(psn, 0.02)
    assert (s.una, s.nxt, s.high, s.naks) == (2, 4, 4, 0)
    s.on_nak(3, 0.03)  # 0..2 arrived, resend from 3
    assert s.una == 3 and s.next_psn(0.03) == 3 and s.naks == 1
    s.on_sent(3, 0.03)
    assert s.retransmitted == 1
    assert not s.check_timeout(0.1)
    assert s.check_timeout(0.13) and s.next_psn(0.13) == 3 and s.timeouts == 1
    assert not s.check_timeout(0.14)  # timer restarted by the go-back
    s.on_ack(3, 0.15)
    assert not s.check_timeout(1.0)  # nothing outstanding
    with pytest.raises(ValueError):
        GbnSender(2**24, 8, 0.1)


def test_the_timer_backs_off_while_nothing_moves_and_resets_on_progress():
    # times in 1/64 s, which floats hold exactly
    s = GbnSender(100, 4, 8 / 64)
    for psn in range(4):
        s.on_sent(psn, 0.0)
    fired = []
    for tick in range(1, 3 * 64):  # nothing is ever acked
        if s.check_timeout(tick / 64):
            fired.append(tick)
            for psn in range(s.una, 4):
                s.on_sent(psn, tick / 64)
    # waits of 1, 2, 4 then 8 x rto (the cap), not one every rto
    assert fired == [8, 8 + 16, 24 + 32, 56 + 64, 120 + 64]
    s.on_ack(0, 190 / 64)  # the receiver is there: the next wait is rto again
    assert not s.check_timeout(197 / 64) and s.check_timeout(198 / 64)
    s.on_nak(1, 200 / 64)  # so is a NAK that moves the window
    assert s.backoff == 1 and s.check_timeout(208 / 64)


def test_receiver_acks_naks_and_duplicates():
    r = GbnReceiver(20, ack_every=4, nak_retry_s=0.05)
    acts = [r.on_data(i, False, False, 0.0) for i in range(4)]
    assert acts == [[], [], [], [("ack", 3)]]
    assert r.on_data(4, False, True, 0.0) == [("ack", 4)]  # ackreq
    assert r.on_data(6, False, False, 0.01) == [("nak", 5)]  # gap
    assert r.on_data(7, False, False, 0.02) == []  # same gap: quiet
    assert r.on_data(8, False, False, 0.07) == [("nak", 5)]  # retry after 50 ms
    assert r.on_data(3, False, False, 0.08) == [("ack", 4)]  # duplicate: re-ACK
    assert r.on_data(5, False, False, 0.09) == []
    assert r.on_data(7, False, False, 0.09) == [("nak", 6)]  # a new gap
    for i in range(6, 19):
        r.on_data(i, False, False, 0.1)
    assert r.on_data(19, False, False, 0.1) == [("ack", 19)]  # last packet
    assert r.done and r.received == 20
    assert r.out_of_order == 4 and r.duplicates == 1
    assert r.on_data(19, False, False, 0.2) == [("ack", 19)]  # late duplicate after done
    assert r.on_data(25, False, False, 0.2) == []  # beyond the transfer


def test_receiver_rate_limits_cnps():
    r = GbnReceiver(100, ack_every=100, cnp_interval_s=0.004)
    cnps = []
    for i in range(50):  # every packet CE marked, one per ms
        if ("cnp",) in r.on_data(i, True, False, i * 0.001):
            cnps.append(i)
    assert cnps == list(range(0, 50, 4))
    assert r.ce_marks == 50 and r.cnps_sent == len(cnps)
    assert ("cnp",) not in r.on_data(50, False, False, 0.1)


def test_line_meter_counts_idle_line_only_while_the_agent_had_frames_waiting():
    from traffic.transport import LineMeter

    frame = 5000  # 1 ms at 40 Mbit/s
    m = LineMeter(40e6, max_gap_s=0.25)
    m.sent(frame, 0.0, backlogged=False)
    m.sent(frame, 0.0, backlogged=False)  # queued behind the first: drains at 2 ms
    m.sent(frame, 0.005, backlogged=False)  # idle by choice (nothing to send): not lost
    assert m.lost_s == 0.0
    m.sent(frame, 0.009, backlogged=True)  # line idle 3 ms while frames waited
    assert abs(m.lost_s - 0.003) < 1e-9 and m.late == 1
    m.sent(frame, 0.5, backlogged=True)  # a port that stopped draining: a stall
    assert m.stalls == 1 and abs(m.lost_s - 0.003) < 1e-9
    assert abs(m.efficiency - m.tx_s / (m.tx_s + 0.003)) < 1e-12


def test_in_order_fast_path_matches_on_data():
    """The receive loop's shortcut must leave the receiver exactly as
    on_data would, and decline every packet that needs an answer."""
    fast, slow = GbnReceiver(40, ack_every=8), GbnReceiver(40, ack_every=8)
    answers = 0
    for psn in list(range(20)) + [25, 20, 21] + list(range(22, 40)):
        took = fast.in_order(psn)
        acts = slow.on_data(psn, False, False, 0.0)
        if took:
            assert acts == []  # nothing was owed for it
        else:
            answers += 1
            fast.on_data(psn, False, False, 0.0)
        assert (fast.expected, fast.received, fast._unacked) == (slow.expected, slow.received, slow._unacked)
    assert fast.done and answers >= 40 // 8


def test_a_run_of_sends_is_booked_as_the_sends_one_by_one():
    one, run = GbnSender(20, window=8, rto_s=0.1), GbnSender(20, window=8, rto_s=0.1)
    assert run.room() == 8
    for psn in range(5):
        one.on_sent(psn, 0.5)
    run.on_sent(0, 0.5, count=5)
    one.on_nak(2, 0.6)
    run.on_nak(2, 0.6)  # resend from 2: 2..4 again, then 5..9 new
    assert run.room() == 8
    for psn in range(2, 10):
        one.on_sent(psn, 0.7)
    run.on_sent(2, 0.7, count=8)
    assert vars(one) == vars(run) and run.retransmitted == 3 and run.room() == 0
    with pytest.raises(ValueError):
        run.on_sent(10, 0.8)  # the window is full
    run.on_ack(9, 0.9)
    with pytest.raises(ValueError):
        run.on_sent(10, 0.9, count=11)  # beyond the transfer's 20 packets


def test_the_line_meter_takes_a_run_of_frames_as_the_frames_one_by_one():
    from traffic.transport import LineMeter

    one, run = LineMeter(40e6, max_gap_s=0.25), LineMeter(40e6, max_gap_s=0.25)
    for now, backlogged in ((0.0, False), (0.009, True), (0.5, True)):
        for _ in range(3):
            one.sent(5000, now, backlogged)
        run.sent(15000, now, backlogged, frames=3)
    assert run.summary() == one.summary() and run.packets == 9 and run.late == 1 and run.stalls == 1


def test_reads_within_the_allowance_are_on_time_and_later_ones_count_their_excess():
    m = transport.ReadMeter(rate_bps=8e6, allowance_s=0.002)  # 1 byte per us
    m.read(0.001, 10_000)  # 10 ms on the wire, waited 1 ms: on time
    assert (m.rx_s, m.late_s, m.on_time) == (pytest.approx(0.01), 0.0, 1.0)
    m.read(0.012, 10_000)  # waited 12 ms: 10 ms late
    assert m.late_s == pytest.approx(0.01) and m.late_reads == 1 and m.reads == 2
    assert m.on_time == pytest.approx(0.02 / 0.03)
    assert m.summary()["max_wait_s"] == pytest.approx(0.012)
    assert transport.ReadMeter(8e6, 0.0).on_time is None  # nothing read: nothing to judge
    with pytest.raises(ValueError):
        transport.ReadMeter(0, 0.001)


def test_a_run_in_order_is_taken_whole_exactly_when_each_packet_would_be():
    """GbnReceiver.in_order_run(psn, n) against n calls of in_order on a twin,
    from every state a short transfer passes through (ACKs due, a gap
    NAKed, the last packet near): all taken, or none and nothing changed."""
    import copy
    import itertools

    from traffic.gobackn import GbnReceiver

    checked = 0
    for expected, unacked, naked in itertools.product(range(12), range(8), (False, True)):
        for psn, count in itertools.product(range(expected - 1, expected + 2), range(1, 9)):
            rx = GbnReceiver(12)
            rx.expected = rx.received = expected
            rx._unacked = unacked
            rx._nak_psn = expected if naked else None
            twin = copy.deepcopy(rx)
            whole = rx.in_order_run(psn, count)
            one_by_one = [twin.in_order(psn + k) for k in range(count)]
            if whole:
                assert all(one_by_one) and vars(rx) == vars(twin)
            else:
                assert not all(one_by_one) and vars(rx) == vars(GbnReceiver(12)) | {
                    "expected": expected,
                    "received": expected,
                    "_unacked": unacked,
                    "_nak_psn": expected if naked else None,
                }
            checked += whole
    assert checked > 0
