"""How long a collective schedule takes on an idle fabric: the analytical
lower bound a drill's measured iteration times are compared with (the
schedules themselves are built in collectives.py)."""

import heapq

from .collectives import Schedule


def analytical_time(schedule: Schedule, rank_rate_bps: float, latency_s: float = 0.0) -> float:
    """Lower-bound makespan (s) of a schedule with no fabric contention.

    Model: every rank sends at rank_rate_bps; its sends that are in flight at
    the same time share that rate equally (processor sharing), receiving is
    never the bottleneck. A send starts once its deps are done; it finishes
    latency_s after its last bit left, and its recv finishes then too (or
    later, if the recv has unfinished deps). Ring, halving-doubling and
    hierarchical keep at most one send per rank in flight, so each step
    costs nbytes*8/rate + latency; all-to-all costs (size - c[r])*8/rate +
    latency for rank r.
    """
    if not rank_rate_bps > 0 or not latency_s >= 0:
        raise ValueError("rank_rate_bps must be > 0 and latency_s >= 0")
    schedule.validate()
    step, waits, kids = _graph(schedule)
    ready_at = dict.fromkeys(step, 0.0)
    finish: dict = {}
    pending: list = []  # heap of (ready time, send key)

    def done(key, t):
        stack = [(key, t)]
        while stack:
            k, t = stack.pop()
            finish[k] = t
            for c in kids[k]:
                ready_at[c] = max(ready_at[c], t)
                waits[c] -= 1
                if waits[c] == 0:
                    if step[c].kind == "recv":
                        stack.append((c, ready_at[c]))
                    else:
                        heapq.heappush(pending, (ready_at[c], c))

    for k in step:
        if waits[k] == 0:  # recvs always wait for their send
            heapq.heappush(pending, (0.0, k))
    active: dict = {}  # rank -> {send key: bits left}
    now = 0.0
    while pending or active:
        while pending and pending[0][0] <= now:
            _, k = heapq.heappop(pending)
            active.setdefault(k[0], {})[k] = step[k].nbytes * 8.0
        nxt = pending[0][0] if pending else float("inf")
        for flows in active.values():
            nxt = min(nxt, now + min(flows.values()) * len(flows) / rank_rate_bps)
        for k in _transmit(active, nxt - now, rank_rate_bps):
            done(k, nxt + latency_s)
        now = nxt
    if len(finish) != len(step):
        raise ValueError("schedule could not run to completion")
    return max(finish.values(), default=0.0)


def _graph(schedule: Schedule) -> tuple[dict, dict, dict]:
    """Every step by (rank, index); how many ends each waits for (its deps,
    and a recv its send's); the steps each one's end releases."""
    match = schedule.matching()
    step = {(r, s.index): s for r, st in schedule.steps.items() for s in st}
    waits = {k: len(s.deps) + (s.kind == "recv") for k, s in step.items()}
    kids: dict = {k: [] for k in step}
    for (r, i), s in step.items():
        for d in s.deps:
            kids[(r, d)].append((r, i))
    for snd, rcv in match.items():
        kids[snd].append(rcv)
    return step, waits, kids


def _transmit(active: dict, elapsed: float, rank_rate_bps: float) -> list:
    """Let `elapsed` seconds of sending pass: each rank's sends in flight
    share its rate equally. Returns the sends whose last bit left, in order."""
    finished = []
    for rank in list(active):
        flows = active[rank]
        sent = elapsed * rank_rate_bps / len(flows)
        for k in list(flows):
            flows[k] -= sent
            if flows[k] <= 1e-6:  # float slack, far below one bit
                del flows[k]
                finished.append(k)
        if not flows:
            del active[rank]
    return finished
