"""Collective-communication schedules for the per-host traffic agents.

A schedule tells each rank which transfers to run (send/recv steps with a
peer, a byte count and a tag) and which earlier steps of the same rank each
one waits for. Only volumes, peers, order and dependencies are modelled,
never the data itself.

Rounding rule (all algorithms): a buffer of B bytes cut into k pieces uses
`_split(B, k)`: every piece gets B // k bytes and the first B % k pieces one
extra byte, so pieces differ by at most one byte and add up to B exactly.
Whenever an algorithm sends "a chunk" it sends one of these exact pieces, so
per-rank totals are exact integers (the closed forms hold exactly when B is
divisible by k and are off by less than one byte per chunk otherwise).

Ring conventions: member i of a ring of m sends to member i+1 and receives
from member i-1. In the reduce-scatter pass it sends chunk (i-s-1) % m at
step s, so it ends up owning the fully reduced chunk i; in the all-gather
pass it sends chunk (i-s) % m (its own chunk first, then what it has just
received). A ring all-reduce therefore sends 2B - c[i] - c[i+1] bytes from
member i and receives 2B - c[i-1] - c[i].
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

KINDS = ("send", "recv")


@dataclass(frozen=True)
class Step:
    index: int  # position in this rank's list
    kind: str  # "send" or "recv"
    peer: int  # the other rank
    nbytes: int  # bytes moved (> 0)
    tag: str  # pairs a send (a->b, tag) with the recv (b<-a, tag)
    deps: tuple  # indices of earlier steps of this rank that must finish first
    phase: str  # "reduce-scatter", "all-gather", "intra-rs", ...
    port: int | None = None  # NIC port (plane) pinned, None = per-flow spreading


@dataclass(frozen=True)
class Schedule:
    algorithm: str
    ranks: int
    size: int  # message size S in bytes (per-rank buffer)
    steps: dict  # rank -> tuple of Step

    def bytes_sent(self, rank: int) -> int:
        return sum(s.nbytes for s in self.steps[rank] if s.kind == "send")

    def bytes_received(self, rank: int) -> int:
        return sum(s.nbytes for s in self.steps[rank] if s.kind == "recv")

    def send_steps(self, rank: int) -> list[Step]:
        return [s for s in self.steps[rank] if s.kind == "send"]

    def matching(self) -> dict[tuple[int, int], tuple[int, int]]:
        """{(sender, send index): (receiver, recv index)} for every send."""
        recvs = {
            (r, s.peer, s.tag): (r, s.index) for r, st in self.steps.items() for s in st if s.kind == "recv"
        }
        return {
            (r, s.index): recvs[(s.peer, r, s.tag)]
            for r, st in self.steps.items()
            for s in st
            if s.kind == "send"
        }

    def validate(self) -> None:
        if set(self.steps) != set(range(self.ranks)):
            raise ValueError(f"steps must cover ranks 0..{self.ranks - 1}")
        sends: dict = {}
        recvs: dict = {}
        for rank, steps in self.steps.items():
            for pos, s in enumerate(steps):
                where = f"rank {rank} step {pos}"
                if s.index != pos:
                    raise ValueError(f"{where}: index {s.index} != position")
                if s.kind not in KINDS:
                    raise ValueError(f"{where}: kind {s.kind!r} not in {KINDS}")
                if not 0 <= s.peer < self.ranks or s.peer == rank:
                    raise ValueError(f"{where}: bad peer {s.peer}")
                if not isinstance(s.nbytes, int) or s.nbytes <= 0:
                    raise ValueError(f"{where}: nbytes must be a positive int")
                if any(not isinstance(d, int) or not 0 <= d < pos for d in s.deps):
                    # Pointing only backwards makes each rank's deps acyclic.
                    raise ValueError(f"{where}: deps {s.deps} must be earlier steps")
                if s.port is not None and (not isinstance(s.port, int) or s.port < 0):
                    raise ValueError(f"{where}: bad port {s.port!r}")
                side = sends if s.kind == "send" else recvs
                key = (rank, s.peer, s.tag) if s.kind == "send" else (s.peer, rank, s.tag)
                if key in side:
                    raise ValueError(f"{where}: duplicate {s.kind} {key}")
                side[key] = s.nbytes
        unpaired = sends.keys() ^ recvs.keys()
        if unpaired:
            key = min(unpaired)
            raise ValueError(
                f"transfer {key} has a {'send' if key in sends else 'recv'} without its counterpart"
            )
        for key, nb in sends.items():
            if recvs[key] != nb:
                raise ValueError(f"transfer {key}: send {nb} B != recv {recvs[key]} B")
        self._check_no_deadlock()

    def _check_no_deadlock(self):
        """Deps plus send->recv edges must form a DAG across ranks, otherwise
        two ranks could each wait for the other (Kahn's algorithm)."""
        match = self.matching()
        waits = {(r, s.index): len(s.deps) for r, st in self.steps.items() for s in st}
        kids = {k: [] for k in waits}
        for r, st in self.steps.items():
            for s in st:
                for d in s.deps:
                    kids[(r, d)].append((r, s.index))
        for snd, rcv in match.items():
            kids[snd].append(rcv)
            waits[rcv] += 1
        todo = [k for k, w in waits.items() if w == 0]
        done = 0
        while todo:
            k = todo.pop()
            done += 1
            for c in kids[k]:
                waits[c] -= 1
                if waits[c] == 0:
                    todo.append(c)
        if done != len(waits):
            raise ValueError("schedule deadlocks: cyclic wait across ranks")


# ---------------------------------------------------------------- helpers


def _split(total, k):
    """k pieces differing by at most one byte, summing to total exactly."""
    q, r = divmod(total, k)
    return [q + 1 if i < r else q for i in range(k)]


def _int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _check(n, size, port):
    _int("n", n, 2)
    _int("size", size, n)  # at least one byte per chunk
    if port is not None:
        _int("port", port, 0)


class _Builder:
    def __init__(self, n, port):
        self.steps = {r: [] for r in range(n)}
        self.port = port

    def add(self, rank: int, kind: str, peer: int, nbytes: int, tag: str, deps: Iterable, phase: str) -> int:
        idx = len(self.steps[rank])
        self.steps[rank].append(Step(idx, kind, peer, nbytes, tag, tuple(sorted(deps)), phase, self.port))
        return idx

    def xfer(self, src: int, dst: int, nbytes: int, tag: str, phase: str, deps: Iterable[int] = ()) -> int:
        """One transfer: a send on src (after deps) and a passive recv on dst.
        Returns the recv's index on dst."""
        self.add(src, "send", dst, nbytes, tag, deps, phase)
        return self.add(dst, "recv", src, nbytes, tag, (), phase)

    def build(self, algorithm: str, n: int, size: int) -> Schedule:
        sched = Schedule(algorithm, n, size, {r: tuple(s) for r, s in self.steps.items()})
        sched.validate()
        return sched


def _ring_pass(b, members, chunks, mode, phase, tag, ready):
    """One ring reduce-scatter (mode "rs") or all-gather ("ag") over members.
    ready: rank -> deps of its next send; each send forwards what the
    previous step delivered, so it waits for that recv. Returns new ready."""
    m = len(members)
    for s in range(m - 1):
        got = {}
        for i, src in enumerate(members):
            c = (i - s - 1) % m if mode == "rs" else (i - s) % m
            dst = members[(i + 1) % m]
            got[dst] = (b.xfer(src, dst, chunks[c], f"{tag}:{s}", phase, ready.get(src, ())),)
        ready = {**ready, **got}
    return ready


# ------------------------------------------------------------- algorithms


def ring_allreduce(n: int, size: int, port: int | None = None) -> Schedule:
    _check(n, size, port)
    b, chunks, ring = _Builder(n, port), _split(size, n), list(range(n))
    ready = _ring_pass(b, ring, chunks, "rs", "reduce-scatter", "ring-rs", {})
    _ring_pass(b, ring, chunks, "ag", "all-gather", "ring-ag", ready)
    return b.build("ring", n, size)


def halving_doubling_allreduce(n: int, size: int, port: int | None = None) -> Schedule:
    """Partner rule: reduce-scatter step k pairs r with r XOR (n >> (k+1))
    (distance n/2, n/4, ..., 1); the all-gather retraces it (1, 2, ..., n/2).
    Chunk c of the exact split ends up owned by rank c. At each halving step
    a rank keeps the half of its current chunk range that contains its own
    chunk and sends the other half; at each doubling step it sends its whole
    current range. Per rank: RS sends size - c[r]; AG sends the nested ranges
    of width 1, 2, ..., n/2 around r (2(n-1)/n * size in total when exact)."""
    _check(n, size, port)
    if n & (n - 1):
        raise ValueError(f"halving-doubling needs n to be a power of two, got {n}")
    b, chunks = _Builder(n, port), _split(size, n)
    ready: dict = {}
    levels = n.bit_length() - 1
    dists = [n >> (k + 1) for k in range(levels)] + [1 << k for k in range(levels)]
    for s, d in enumerate(dists):
        rs = s < levels
        got = {}
        for r in range(n):
            if rs:  # range width 2d: send the half not containing r
                base = r // (2 * d) * (2 * d) + (0 if r & d else d)
            else:  # range width d around r
                base = r // d * d
            nbytes = sum(chunks[base : base + d])
            got[r ^ d] = (
                b.xfer(
                    r, r ^ d, nbytes, f"hd:{s}", "reduce-scatter" if rs else "all-gather", ready.get(r, ())
                ),
            )
        ready = got
    return b.build("halving-doubling", n, size)


def _groups(groups):
    try:
        gs = [list(g) for g in groups]
    except TypeError:
        raise ValueError("groups must be a list of lists of ranks") from None
    flat = sorted(r for g in gs for r in g)
    if not gs or any(not g for g in gs) or flat != list(range(len(flat))):
        raise ValueError(f"groups must partition range(n) into non-empty lists: {groups!r}")
    return gs


def hierarchical_allreduce(groups: list[list[int]], size: int, port: int | None = None) -> Schedule:
    """Intra-group ring reduce-scatter, cross-group ring all-reduce per lane,
    intra-group ring all-gather.

    With unequal groups, L = min group size lanes run across groups. Lane j
    owns split(size, L)[j] bytes; inside a group that lane's bytes are cut
    among members j, j+L, j+2L, ... and those cuts are the chunks of the
    group's reduce-scatter. Members with index >= L then forward their shard
    to member index % L, so member j holds lane j whole. After the lane
    all-reduce the shards go back and the group all-gathers. Shard boundaries
    are modelled by volume only (no element offsets are tracked)."""
    gs = _groups(groups)
    n = sum(len(g) for g in gs)
    _check(n, size, port)
    lanes = min(len(g) for g in gs)
    lane_bytes = _split(size, lanes)
    b, group_chunks = _Builder(n, port), []
    ready: dict = {}
    for g, members in enumerate(gs):
        chunks = [0] * len(members)
        for j in range(lanes):
            owners = range(j, len(members), lanes)
            for i, part in zip(owners, _split(lane_bytes[j], len(owners))):
                chunks[i] = part
        group_chunks.append(chunks)
        ready = _ring_pass(b, members, chunks, "rs", "intra-rs", f"g{g}-rs", ready)
        for i in range(lanes, len(members)):  # fold extra members into lanes
            head = members[i % lanes]
            r = b.xfer(members[i], head, chunks[i], f"g{g}-fwd{i}", "intra-rs", ready[members[i]])
            ready[head] = ready[head] + (r,)
    for j in range(lanes):
        lane, parts = [g[j] for g in gs], _split(lane_bytes[j], len(gs))
        ready = _ring_pass(b, lane, parts, "rs", "inter-ar", f"lane{j}-rs", ready)
        ready = _ring_pass(b, lane, parts, "ag", "inter-ar", f"lane{j}-ag", ready)
    for g, members in enumerate(gs):
        chunks = group_chunks[g]
        for i in range(lanes, len(members)):  # hand the reduced shards back
            ready[members[i]] = (
                b.xfer(
                    members[i % lanes],
                    members[i],
                    chunks[i],
                    f"g{g}-ret{i}",
                    "intra-ag",
                    ready[members[i % lanes]],
                ),
            )
        _ring_pass(b, members, chunks, "ag", "intra-ag", f"g{g}-ag", ready)
    return b.build("hierarchical", n, size)


def crossing_bytes(schedule: Schedule, groups: list[list[int]]) -> int:
    """Total bytes sent between ranks of different groups (e.g. over the DCI)."""
    gs = _groups(groups)
    if sum(len(g) for g in gs) != schedule.ranks:
        raise ValueError("groups do not cover the schedule's ranks")
    home = {r: gi for gi, g in enumerate(gs) for r in g}
    return sum(
        s.nbytes
        for r, st in schedule.steps.items()
        for s in st
        if s.kind == "send" and home[s.peer] != home[r]
    )


def all_to_all(n: int, size: int, port: int | None = None) -> Schedule:
    """size = each rank's buffer; rank r sends slice d (split(size, n)[d]) to
    every rank d != r. So r sends size - c[r] and receives (n-1) * c[r].
    All transfers are independent (no deps)."""
    _check(n, size, port)
    b, chunks = _Builder(n, port), _split(size, n)
    for r in range(n):
        for k in range(1, n):  # start at the next rank so peers are staggered
            d = (r + k) % n
            b.xfer(r, d, chunks[d], "a2a", "alltoall")
    return b.build("all-to-all", n, size)


def pipeline(
    n: int, nbytes: int, microbatches: int = 1, backward: bool = True, port: int | None = None
) -> Schedule:
    """Stage i sends nbytes of activations to stage i+1 per microbatch, and
    (backward) nbytes of gradients to stage i-1. Stage i>0 forwards microbatch
    m once it received it; the last stage starts the backward pass of m once
    its forward recv is done; stage i<n-1 passes gradients on once received.
    Stage 0 injects microbatches in order (send m waits for send m-1):
    without it all microbatches would leave at once and share the NIC."""
    _int("n", n, 2)
    _int("nbytes", nbytes, 1)
    _int("microbatches", microbatches, 1)
    if port is not None:
        _int("port", port, 0)
    b = _Builder(n, port)
    fwd_recv: dict = {}
    prev0: tuple = ()
    # Emit stage by stage so every dep points to an earlier index.
    for i in range(n):
        for m in range(microbatches):
            if i > 0:
                fwd_recv[i, m] = b.add(i, "recv", i - 1, nbytes, f"fwd{m}", (), "pipeline-fwd")
            if i < n - 1:
                deps: tuple = (fwd_recv[i, m],) if i > 0 else prev0
                idx = b.add(i, "send", i + 1, nbytes, f"fwd{m}", deps, "pipeline-fwd")
                if i == 0:
                    prev0 = (idx,)
    if backward:
        for i in range(n - 1, -1, -1):
            for m in range(microbatches):
                got = None
                if i < n - 1:
                    got = b.add(i, "recv", i + 1, nbytes, f"bwd{m}", (), "pipeline-bwd")
                if i > 0:
                    deps = (fwd_recv[i, m],) if i == n - 1 else (got,)
                    b.add(i, "send", i - 1, nbytes, f"bwd{m}", deps, "pipeline-bwd")
    return b.build("pipeline", n, nbytes)


def compile(
    kind: str, n: int | None = None, size: int | None = None, groups: list[list[int]] | None = None, **kw
) -> Schedule:
    """Build a schedule by algorithm name (for scenario files)."""
    if kind == "hierarchical":
        if groups is None or size is None:
            raise ValueError("hierarchical needs groups and size")
        return hierarchical_allreduce(groups, size, **kw)
    table: dict[str, Callable[..., Schedule]] = {
        "ring": ring_allreduce,
        "halving-doubling": halving_doubling_allreduce,
        "all-to-all": all_to_all,
        "pipeline": pipeline,
    }
    if kind not in table:
        raise ValueError(f"unknown collective {kind!r}; known: {sorted(table) + ['hierarchical']}")
    if n is None and groups is not None:
        n = sum(len(g) for g in _groups(groups))
    if n is None or size is None:
        raise ValueError(f"{kind} needs n and size")
    return table[kind](n, size, **kw)


def for_job(
    collective: str,
    n: int,
    size: int,
    groups: list[list[int]] | None = None,
    port: int | None = None,
    microbatches: int = 1,
) -> Schedule:
    """The schedule the ranks of a training job run: `collective` over `n`
    ranks (`groups` of rank indices for hierarchical), `size` bytes per
    iteration. The traffic agents and the drill's analysis both build it
    here, so the volumes a report judges are the volumes the agents sent."""
    extra = {"microbatches": microbatches} if collective == "pipeline" else {}
    return compile(collective, n=n, size=size, groups=groups, port=port, **extra)
