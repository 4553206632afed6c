"""Collective schedules: volumes, step counts, pairing, deps, timing."""

import math
import random

import pytest

from traffic.collectives import (
    Schedule,
    Step,
    all_to_all,
    compile,
    crossing_bytes,
    halving_doubling_allreduce,
    hierarchical_allreduce,
    pipeline,
    ring_allreduce,
)
from traffic.makespan import analytical_time

NS = [2, 3, 4, 8, 16]
POW2 = [2, 4, 8, 16]
RATE = 100e9  # 100 Gbit/s per rank
LAT = 5e-6


def sizes(n):
    return [1_000_000, 999_983, n * 4096]


def chunks(size, k):
    """The documented rounding: first size % k pieces get one extra byte."""
    return [size // k + (1 if i < size % k else 0) for i in range(k)]


def counts(sched, rank):
    kinds = [s.kind for s in sched.steps[rank]]
    return kinds.count("send"), kinds.count("recv")


def all_ranks_balanced(sched):
    return sum(sched.bytes_sent(r) for r in range(sched.ranks)) == sum(
        sched.bytes_received(r) for r in range(sched.ranks)
    )


# ------------------------------------------------------------------ ring


@pytest.mark.parametrize("n", NS)
def test_ring_volumes_and_steps(n):
    for size in sizes(n):
        s = ring_allreduce(n, size)
        c = chunks(size, n)
        for r in range(n):
            assert counts(s, r) == (2 * (n - 1), 2 * (n - 1))
            assert s.bytes_sent(r) == 2 * size - c[r] - c[(r + 1) % n]
            assert s.bytes_received(r) == 2 * size - c[(r - 1) % n] - c[r]
            if size % n == 0:
                assert s.bytes_sent(r) == 2 * (n - 1) * size // n
            assert {st.peer for st in s.send_steps(r)} == {(r + 1) % n}
            assert {st.peer for st in s.steps[r] if st.kind == "recv"} == {(r - 1) % n}


def test_ring_deps_forward_previous_recv():
    s = ring_allreduce(4, 4096)
    for r in range(4):
        steps = s.steps[r]
        recvs = [st for st in steps if st.kind == "recv"]
        sends = s.send_steps(r)
        assert all(st.deps == () for st in recvs)
        assert sends[0].deps == ()
        for k in range(1, len(sends)):
            assert sends[k].deps == (recvs[k - 1].index,)
        phases = [st.phase for st in sends]
        assert phases == ["reduce-scatter"] * 3 + ["all-gather"] * 3


# ----------------------------------------------------- halving-doubling


def hd_expected_sent(n, size, r):
    """Independent recount: RS sends everything but chunk r, AG sends the
    aligned blocks of width 1, 2, ..., n/2 containing r."""
    c = chunks(size, n)
    ag = sum(sum(c[r // w * w : r // w * w + w]) for w in (1 << k for k in range(int(math.log2(n)))))
    return size - c[r] + ag


@pytest.mark.parametrize("n", POW2)
def test_halving_doubling_volumes_and_steps(n):
    levels = int(math.log2(n))
    for size in sizes(n):
        s = halving_doubling_allreduce(n, size)
        for r in range(n):
            assert counts(s, r) == (2 * levels, 2 * levels)
            assert s.bytes_sent(r) == hd_expected_sent(n, size, r)
            if size % n == 0:
                assert s.bytes_sent(r) == 2 * (n - 1) * size // n
                assert s.bytes_received(r) == 2 * (n - 1) * size // n
            peers = [st.peer for st in s.send_steps(r)]
            rs = [r ^ (n >> (k + 1)) for k in range(levels)]
            assert peers == rs + rs[::-1]
        assert all_ranks_balanced(s)


def test_halving_doubling_halves_then_doubles():
    s = halving_doubling_allreduce(8, 8 * 4096)
    assert [st.nbytes for st in s.send_steps(5)] == [16384, 8192, 4096, 4096, 8192, 16384]
    sends = s.send_steps(5)
    recvs = [st for st in s.steps[5] if st.kind == "recv"]
    for k in range(1, 6):
        assert sends[k].deps == (recvs[k - 1].index,)


@pytest.mark.parametrize("n", [3, 5, 6, 12])
def test_halving_doubling_rejects_non_power_of_two(n):
    with pytest.raises(ValueError, match="power of two"):
        halving_doubling_allreduce(n, 1_000_000)


# ---------------------------------------------------------- hierarchical


@pytest.mark.parametrize("g,m", [(2, 2), (4, 2), (2, 4), (4, 4), (8, 2), (3, 3)])
def test_hierarchical_equal_groups_three_phases(g, m):
    size = g * m * 4096
    groups = [list(range(k * g, (k + 1) * g)) for k in range(m)]
    s = hierarchical_allreduce(groups, size)
    for r in range(g * m):
        by_phase = {}
        for st in s.send_steps(r):
            by_phase[st.phase] = by_phase.get(st.phase, 0) + st.nbytes
        assert by_phase.get("intra-rs", 0) == (g - 1) * size // g
        assert by_phase.get("inter-ar", 0) == 2 * (m - 1) * (size // g) // m
        assert by_phase.get("intra-ag", 0) == (g - 1) * size // g
        assert s.bytes_received(r) == s.bytes_sent(r)


def test_hierarchical_unequal_groups():
    groups = [list(range(6)), [6, 7]]
    size = 8_000_000
    s = hierarchical_allreduce(groups, size)
    for r in range(8):
        assert s.bytes_sent(r) > 0 and s.bytes_received(r) > 0
    assert all_ranks_balanced(s)
    # L = 2 lanes of 4 MB. Only the lane all-reduces cross: per lane 2 ranks
    # (ranks 0,6 and 1,7), each sending 2*(2-1)/2 * 4 MB = 4 MB -> 4 * 4 MB = 16 MB.
    # Flat ring 0..7: only 5->6 and 7->0 cross; each sends 2*7 chunks of
    # 1 MB = 14 MB -> 28 MB.
    assert crossing_bytes(s, groups) == 16_000_000
    assert crossing_bytes(ring_allreduce(8, size), groups) == 28_000_000
    # Members 2..5 fold into lanes 0/1 and get their shard back.
    fwd = [st for st in s.send_steps(4) if st.tag.startswith("g0-fwd")]
    assert [(st.peer, st.nbytes) for st in fwd] == [(0, 1_333_333)]
    # Rank 0 (lane 0 head): RS 8M - 1333334, lane AR 4M, returns to 2 and 4
    # (1333333 each), AG 8M - 1333334.
    assert s.bytes_sent(0) == 6_666_666 + 4_000_000 + 2_666_666 + 6_666_666


def test_hierarchical_crosses_less_than_flat_ring_for_large_groups():
    for sizes_ in ([8, 8], [16, 12], [10, 10, 10], [5, 9, 7]):
        groups, start = [], 0
        for k in sizes_:
            groups.append(list(range(start, start + k)))
            start += k
        size = 1_000_000
        hier = crossing_bytes(hierarchical_allreduce(groups, size), groups)
        flat = crossing_bytes(ring_allreduce(start, size), groups)
        assert hier < flat


@pytest.mark.parametrize("groups", [[[0, 1], [1, 2]], [[0, 1], [3, 4]], [[0, 1], []], [[0]], [], "abc", 5])
def test_hierarchical_rejects_bad_groups(groups):
    with pytest.raises(ValueError):
        hierarchical_allreduce(groups, 1_000_000)


# ------------------------------------------------------------ all-to-all


@pytest.mark.parametrize("n", NS)
def test_all_to_all_volumes(n):
    for size in sizes(n):
        s = all_to_all(n, size)
        c = chunks(size, n)
        for r in range(n):
            assert counts(s, r) == (n - 1, n - 1)
            assert s.bytes_sent(r) == size - c[r]
            assert s.bytes_received(r) == (n - 1) * c[r]
            assert {st.peer for st in s.send_steps(r)} == set(range(n)) - {r}
            assert all(st.deps == () for st in s.steps[r])


# -------------------------------------------------------------- pipeline


@pytest.mark.parametrize("n,mb", [(2, 1), (4, 1), (4, 3), (8, 5)])
def test_pipeline_steps_and_deps(n, mb):
    s = pipeline(n, 1000, microbatches=mb)
    for i in range(n):
        sends, recvs = counts(s, i)
        assert sends == mb * ((i < n - 1) + (i > 0))
        assert recvs == sends
        steps = s.steps[i]
        for st in steps:
            if st.kind == "recv":
                assert st.deps == ()
                continue
            m = st.tag[3:]
            if st.phase == "pipeline-fwd":
                assert st.peer == i + 1
                if i > 0:  # forward what arrived from the previous stage
                    (d,) = st.deps
                    assert (steps[d].kind, steps[d].peer, steps[d].tag) == ("recv", i - 1, f"fwd{m}")
            else:
                assert st.peer == i - 1
                (d,) = st.deps
                want = (i - 1, f"fwd{m}") if i == n - 1 else (i + 1, f"bwd{m}")
                assert (steps[d].kind, steps[d].peer, steps[d].tag) == ("recv",) + want


def test_pipeline_forward_only():
    s = pipeline(4, 1000, microbatches=2, backward=False)
    assert [counts(s, i) for i in range(4)] == [(2, 0), (2, 2), (2, 2), (0, 2)]
    assert {st.phase for r in range(4) for st in s.steps[r]} == {"pipeline-fwd"}


# ------------------------------------------------------ shared properties


def test_port_recorded_on_every_step():
    built = [
        ring_allreduce(4, 4096, port=1),
        halving_doubling_allreduce(4, 4096, port=1),
        hierarchical_allreduce([[0, 1, 2], [3, 4]], 4096, port=1),
        all_to_all(4, 4096, port=1),
        pipeline(3, 100, 2, port=1),
    ]
    for s in built:
        assert {st.port for r in range(s.ranks) for st in s.steps[r]} == {1}
    assert {st.port for st in ring_allreduce(3, 999).steps[0]} == {None}


@pytest.mark.parametrize(
    "call",
    [
        lambda: ring_allreduce(1, 100),
        lambda: ring_allreduce(4, 3),
        lambda: ring_allreduce(4, 0),
        lambda: ring_allreduce(2.0, 100),
        lambda: ring_allreduce(True, 100),
        lambda: ring_allreduce(4, 100, port=-1),
        lambda: all_to_all(8, 7),
        lambda: halving_doubling_allreduce(8, 4),
        lambda: hierarchical_allreduce([[0, 1], [2, 3]], 3),
        lambda: pipeline(1, 100),
        lambda: pipeline(3, 0),
        lambda: pipeline(3, 10, microbatches=0),
        lambda: compile("butterfly", n=4, size=100),
        lambda: compile("ring", n=4),
        lambda: compile("hierarchical", size=100),
        lambda: analytical_time(ring_allreduce(2, 10), 0),
        lambda: analytical_time(ring_allreduce(2, 10), 1e9, latency_s=-1),
    ],
)
def test_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


def test_compile_dispatch():
    assert compile("ring", n=4, size=4096) == ring_allreduce(4, 4096)
    assert compile("halving-doubling", n=8, size=8192).algorithm == "halving-doubling"
    assert compile("hierarchical", groups=[[0, 1], [2, 3]], size=4096) == hierarchical_allreduce(
        [[0, 1], [2, 3]], 4096
    )
    assert compile("all-to-all", n=3, size=300, port=0) == all_to_all(3, 300, port=0)
    assert compile("pipeline", n=3, size=10, microbatches=2, backward=False) == pipeline(
        3, 10, microbatches=2, backward=False
    )
    assert compile("ring", groups=[[0, 1], [2]], size=30).ranks == 3


def test_random_combinations_balance():
    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(2, 12)
        size = rng.randint(n, 3_000_000)
        cuts = sorted(rng.sample(range(1, n), rng.randint(0, min(3, n - 1))))
        groups = [list(range(a, b)) for a, b in zip([0] + cuts, cuts + [n])]
        built = [
            ring_allreduce(n, size),
            all_to_all(n, size),
            hierarchical_allreduce(groups, size),
            pipeline(n, size, rng.randint(1, 4), rng.random() < 0.5),
        ]
        p2 = 1 << (n.bit_length() - 1)
        built.append(halving_doubling_allreduce(p2, max(size, p2)))
        for s in built:
            s.validate()
            assert all_ranks_balanced(s), s.algorithm


# ------------------------------------------------------------ validation


def sched(steps, n=2):
    return Schedule("hand", n, 10, steps)


def test_validate_catches_broken_schedules():
    send = Step(0, "send", 1, 10, "t", (), "x")
    recv = Step(0, "recv", 0, 10, "t", (), "x")
    sched({0: (send,), 1: (recv,)}).validate()
    bad = [
        {0: (send,), 1: ()},  # unmatched send
        {0: (send,), 1: (Step(0, "recv", 0, 9, "t", (), "x"),)},  # size mismatch
        {0: (send,), 1: (Step(0, "recv", 0, 10, "u", (), "x"),)},  # tag mismatch
        {0: (Step(0, "send", 0, 10, "t", (), "x"),), 1: (recv,)},  # peer == self
        {0: (Step(0, "send", 1, 0, "t", (), "x"),), 1: (Step(0, "recv", 0, 0, "t", (), "x"),)},  # nbytes 0
        {0: (Step(0, "send", 1, 10, "t", (0,), "x"),), 1: (recv,)},  # self dep
        {0: (Step(1, "send", 1, 10, "t", (), "x"),), 1: (recv,)},  # wrong index
        {0: (send, send), 1: (recv, recv)},  # duplicate tag
        {0: (send,)},  # rank missing
    ]
    for steps in bad:
        with pytest.raises(ValueError):
            sched(steps).validate()
    # Each rank waits for the other before sending: acyclic per rank,
    # cyclic across ranks.
    dead = {
        r: (
            Step(0, "recv", 1 - r, 10, f"to{r}", (), "x"),
            Step(1, "send", 1 - r, 10, f"to{1 - r}", (0,), "x"),
        )
        for r in (0, 1)
    }
    with pytest.raises(ValueError, match="deadlock"):
        sched(dead).validate()


def test_generated_deps_point_backwards():
    for s in [
        ring_allreduce(5, 999_983),
        halving_doubling_allreduce(16, 999_983),
        hierarchical_allreduce([[0, 1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11]], 999_983),
        pipeline(6, 10, 4),
    ]:
        for r in range(s.ranks):
            for st in s.steps[r]:
                assert all(d < st.index for d in st.deps)


# ---------------------------------------------------------------- timing


@pytest.mark.parametrize("n", NS)
def test_time_ring(n):
    size = n * 4096
    chunk_s = size / n * 8 / RATE
    assert analytical_time(ring_allreduce(n, size), RATE) == pytest.approx(2 * (n - 1) * chunk_s)
    assert analytical_time(ring_allreduce(n, size), RATE, LAT) == pytest.approx(
        2 * (n - 1) * chunk_s + 2 * (n - 1) * LAT
    )


@pytest.mark.parametrize("n", POW2)
def test_time_halving_doubling(n):
    size = n * 4096
    want = 2 * (n - 1) / n * size * 8 / RATE + 2 * math.log2(n) * LAT
    assert analytical_time(halving_doubling_allreduce(n, size), RATE, LAT) == pytest.approx(want)


@pytest.mark.parametrize("g,m", [(4, 2), (2, 4), (8, 3)])
def test_time_hierarchical_equal_groups(g, m):
    size = g * m * 4096
    groups = [list(range(k * g, (k + 1) * g)) for k in range(m)]
    bits = 2 * (g - 1) * size / g + 2 * (m - 1) * size / g / m
    hops = 2 * (g - 1) + 2 * (m - 1)
    got = analytical_time(hierarchical_allreduce(groups, size), RATE, LAT)
    assert got == pytest.approx(bits * 8 / RATE + hops * LAT)


@pytest.mark.parametrize("n", NS)
def test_time_all_to_all_shares_the_nic(n):
    size = n * 4096
    want = (n - 1) * (size / n) * 8 / RATE + LAT
    assert analytical_time(all_to_all(n, size), RATE, LAT) == pytest.approx(want)


def test_time_pipeline():
    t = 1000 * 8 / RATE
    # One microbatch: n-1 hops forward, n-1 back, strictly in sequence.
    assert analytical_time(pipeline(5, 1000), RATE, LAT) == pytest.approx(8 * (t + LAT))
    # Forward only, m microbatches in order: classic fill + drain, m + n - 2 slots.
    assert analytical_time(pipeline(5, 1000, 4, backward=False), RATE) == pytest.approx(7 * t)
    assert analytical_time(pipeline(5, 1000, 4, backward=False), RATE, LAT) == pytest.approx(7 * (t + LAT))


def test_time_unequal_hierarchical_is_finite_and_above_bound():
    groups = [list(range(6)), [6, 7]]
    s = hierarchical_allreduce(groups, 8_000_000)
    busiest = max(s.bytes_sent(r) for r in range(8))
    assert analytical_time(s, RATE) >= busiest * 8 / RATE
