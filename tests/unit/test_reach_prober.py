"""The reachability prober's schedule (testbed/emulation/probe.py), driven
by a fake clock: what it sends when, and when it gives up."""

from testbed.emulation import probe, reachability
from testbed.emulation.probe import Schedule


def drive(n, timeout, window, rtt, dead=(), step=0.01, limit=600.0):
    """Run a Schedule against a fabric answering every request to a live
    pair `rtt` s after it is sent; returns (result, sends per pair, most
    in flight at once, end time)."""
    s = Schedule(n, timeout, window, 0.0)
    pending = []  # (answer time, pair, attempt)
    sends = [0] * n
    most, now = 0, 0.0
    while not s.finished(now) and now < limit:
        for i in s.due(now):
            sends[i] += 1
            if i not in dead:
                pending.append((now + rtt, i, s.attempt(i)))
        for t, i, a in sorted(pending):
            if t <= now:
                s.answered(i, now, a)
        pending = [p for p in pending if p[0] > now]
        answered = {i for i, r in s.result().items() if r is not None}
        most = max(most, len({i for _, i, _ in pending} - answered))
        now = round(now + step, 6)
    return s.result(), sends, most, now


def test_a_small_fabric_sends_every_pair_at_once_and_each_once():
    result, sends, most, end = drive(14, 5.0, reachability.window(8), rtt=0.002)
    assert all(r is not None and r < 0.05 for r in result.values())
    assert sends == [1] * 14 and most == 14 and end < 0.1


def test_a_large_fabric_keeps_only_its_window_in_flight():
    result, sends, most, _ = drive(254, 30.0, reachability.window(128), rtt=0.3)
    assert reachability.window(128) == 4 and most <= 4
    assert all(r is not None for r in result.values())
    # the measured round trip sets the resend time: past the first window
    # (sent before any reply, resent after 100 ms), no pair was resent
    assert max(sends[4:]) == 1


def test_dead_pairs_are_given_up_after_the_timeout_and_do_not_block_the_rest():
    dead = set(range(0, 40, 2))
    result, sends, _, end = drive(40, 5.0, 4, rtt=0.05, dead=dead)
    assert {i for i, r in result.items() if r is None} == dead
    assert all(sends[i] >= 3 for i in dead)
    # overdue pairs free their place: far less than 20 dead pairs x 5 s in turn
    assert end < 20


def test_nothing_answering_ends_after_twice_the_timeout():
    result, sends, _, end = drive(254, 5.0, 4, rtt=0.01, dead=set(range(254)))
    assert all(r is None for r in result.values())
    # every pair was tried, the last ones once the silence had lasted 5 s
    assert min(sends) >= 3
    assert 10.0 <= end < 10.2


def test_live_pairs_behind_a_block_of_dead_ones_are_still_tried():
    """A port that is down comes first in a host's list: its pairs must not
    take the rest down with them."""
    dead = set(range(127))
    result, _, _, end = drive(254, 5.0, 4, rtt=0.01, dead=dead)
    assert {i for i, r in result.items() if r is None} == dead
    assert end < 11


def test_the_request_carries_the_pair_index_and_a_valid_checksum():
    pkt = probe.echo(0x1234, 77, attempt=3)
    assert pkt[0] == probe.ICMP_ECHO and int.from_bytes(pkt[6:8], "big") == 77
    assert probe.checksum(pkt) == 0
    assert probe.attempt_of(pkt) == 3 and probe.attempt_of(pkt[:-1]) is None
