"""Per-flow throughput read from iperf3 servers' reports."""

import pytest

from testbed.fabric.scenario import load_scenario
from traffic.iperf import (
    CPORT_END,
    PairSpec,
    client_argv,
    cport_window,
    plan_pairs,
    receiver_series,
    spread_cport,
)


def stream(start, end, nbytes):
    return {
        "start": start,
        "end": end,
        "seconds": end - start,
        "bytes": nbytes,
        "bits_per_second": nbytes * 8 / (end - start),
    }


def test_a_sliver_of_an_interval_joins_the_next_and_no_byte_is_lost():
    """A server's timer that fired late makes an interval of 0.18 s and then
    one of 2 ms; the sliver's rate alone would read 1,600 Mbit/s."""
    pair = PairSpec("s0h0", "s1h0", "10.0.1.1", 1, 0.0, 5201)
    intervals = [
        stream(0.0, 0.1, 125_000),  # 10 Mbit/s
        stream(0.1, 0.28, 225_000),  # late: 0.18 s at 10 Mbit/s
        stream(0.28, 0.282, 400_000),  # a read's worth in 2 ms
        stream(0.282, 0.382, 125_000),
    ]
    series = receiver_series({"intervals": [{"streams": [s]} for s in intervals]}, pair, offset=1.0)
    points = series["s0h0->s1h0#0"]
    assert [round(t, 3) for t, _ in points] == [1.1, 1.28, 1.382]
    assert points[0][1] == pytest.approx(10.0) and points[1][1] == pytest.approx(10.0)
    assert points[2][1] == pytest.approx((400_000 + 125_000) * 8 / 0.102 / 1e6)
    assert max(mbit for _, mbit in points) < 50  # no spike
    # every byte is in some point: rate x duration adds back to what arrived
    durations = [0.1, 0.18, 0.102]
    assert sum(m * d for (_, m), d in zip(points, durations)) * 1e6 / 8 == pytest.approx(875_000)


def test_every_client_asks_for_cubic_whatever_the_machine_default():
    argv = client_argv(PairSpec("s0h0", "s1h0", "10.0.1.1", 4, 0.0, 5201), 10)
    assert argv[argv.index("-C") + 1] == "cubic"


def test_streams_start_at_the_source_port_that_spreads_them_over_the_nic_ports():
    """Candidates 100-105 and the port (2 or 3) the kernel named for each:
    the first run of two that takes both ports starts at 101, and so does
    the first even run of four (2, 3, 2, 3); with 5 streams over 2 ports, a
    run of 3 and 2 beats one of 4 and 1."""
    oif_of = {100: 2, 101: 2, 102: 3, 103: 2, 104: 3, 105: 3}
    assert spread_cport(oif_of, 2) == 101
    assert spread_cport(oif_of, 4) == 101
    assert spread_cport({100: 2, 101: 2, 102: 2, 103: 3, 104: 2, 105: 3}, 4) == 102
    assert spread_cport({100: 2, 101: 2, 102: 2, 103: 2, 104: 3, 105: 3}, 5) == 101  # 3 and 2
    # nothing to spread: one stream, or one port named for every candidate
    assert spread_cport(oif_of, 1) is None
    assert spread_cport({100: 2, 101: 2, 102: 2}, 2) is None
    # a candidate the kernel did not answer for is never in a run
    assert spread_cport({100: 2, 101: None, 102: 3, 103: 2}, 2) == 102
    assert spread_cport({100: 2, 101: None, 102: 3}, 2) is None
    # the best run there is when none is even: 3 ports, 2 streams
    assert spread_cport({100: 2, 101: 3, 102: 4}, 2) == 100


def test_each_pair_of_a_host_has_its_own_window_below_the_ephemeral_ports():
    windows = [cport_window(i) for i in range(200)]
    usable = [w for w in windows if w is not None]
    assert usable and all(w.stop <= CPORT_END <= 32768 for w in usable)
    assert windows[len(usable)] is None and all(w is None for w in windows[len(usable) :])
    ports = [port for w in usable for port in w]
    assert len(ports) == len(set(ports))  # no two windows share a port
    assert all(len(w) >= 16 + 1 for w in usable)  # room for the most streams a pair may have


def test_a_client_binds_its_streams_from_the_chosen_port_or_leaves_them_to_the_kernel():
    pair = PairSpec("s0h0", "s1h0", "10.0.1.1", 2, 0.0, 5201)
    argv = client_argv(pair, 10, 20005)
    assert argv[argv.index("--cport") + 1] == "20005"
    assert "--cport" not in client_argv(pair, 10)


def test_two_entries_between_the_same_hosts_number_their_flows_on(tmp_path):
    """A second entry between the same hosts (another DSCP, a later start)
    gets flow ids of its own: with the same ids, the later entry's series
    replaced the earlier's, and the report counted one flow fewer for each."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ntopology: {kind: hpn}\nduration: 10\ntraffic:\n"
        "  - {src: s0h0, dst: [s1h0, s1h1], parallel: 2}\n"
        "  - {src: s0h0, dst: s1h0, parallel: 1, start: 2}\n"
    )
    sc = load_scenario(path)
    pairs = plan_pairs(sc.fabric, sc.traffic)
    assert [p.flow_ids() for p in pairs] == [
        ["s0h0->s1h0#0", "s0h0->s1h0#1"],
        ["s0h0->s1h1#0", "s0h0->s1h1#1"],
        ["s0h0->s1h0#2"],
    ]
    assert len({p.port for p in pairs}) == 3
