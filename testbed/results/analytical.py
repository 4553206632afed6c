"""What a training job should take on an idle fabric (pure): the bytes each
rank must move by the algorithm's formula, and the analytical iteration
time (compute plus the schedule at one port's payload rate plus the
store-and-forward delay of the longest path). Job measurements are judged
against these. Given a time-dilated fabric and jobs, the time is this
machine's, like the measurements beside it: both are brought back to
emulated time together (results/dilation.py)."""

from testbed.fabric.model import Fabric
from testbed.fabric.paths import compute_routes, trace
from testbed.fabric.records import Job
from traffic import collectives, makespan, roce


def schedule_of(job: Job) -> collectives.Schedule:
    """The schedule a job's ranks run (the one the agents build from the
    same fields): the one place a scenario's job becomes its schedule."""
    return collectives.for_job(
        job.collective,
        job.ranks,
        job.bytes,
        groups=job.rank_groups,
        port=job.port,
        microbatches=job.microbatches,
    )


def expected_bytes_per_rank(job: Job) -> int | None:
    """Bytes a rank must move per iteration by the algorithm's formula
    (independent of the schedule code for the AllReduces)."""
    n, s = len(job.hosts), job.bytes
    if job.collective in ("ring", "halving-doubling") and s % n == 0:
        return 2 * (n - 1) * s // n
    return None  # other collectives: the schedule's volume is the reference


def frame_bytes(fabric: Fabric) -> int:
    """A full RoCE frame on this fabric: the largest payload its MTU allows
    plus Ethernet, IPv4, UDP, BTH and ICRC."""
    return roce.payload_for_mtu(fabric.mtu) + roce.FRAME_OVERHEAD


def goodput_bps(fabric: Fabric) -> float:
    """Payload rate of one NIC port: its line rate less RoCE framing."""
    port = min(fabric.scaled_bps(l) for l in fabric.links if l.kind == "access")
    payload = roce.payload_for_mtu(fabric.mtu)
    return port * payload / (payload + roce.FRAME_OVERHEAD)


def path_latency_s(fabric: Fabric, job: Job, frame_bytes: int | None = None) -> float:
    """The longest store-and-forward delay between two ranks that exchange
    data: after the sender's own port, every further hop serializes the
    frame again at its link's (scaled) rate. Paths follow the controller's
    routes on the healthy fabric."""
    frame_bytes = frame_bytes or globals()["frame_bytes"](fabric)
    routes = compute_routes(fabric)
    sched = schedule_of(job)
    worst = 0.0
    pairs = {(r, s.peer) for r, steps in sched.steps.items() for s in steps if s.kind == "send"}
    for r, p in pairs:
        src, dst = job.hosts[r], job.hosts[p]
        ifname = fabric.nics_of(src)[0].ports[0]
        path = trace(fabric, routes, ifname, fabric.nics_of(dst)[0].ip)
        if not path:
            continue
        hops = list(zip(path, path[1:]))
        delay = sum(frame_bytes * 8 / fabric.scaled_bps(fabric.links_between(a, b)[0]) for a, b in hops)
        worst = max(worst, delay)
    return worst


def analytical_iteration_s(job: Job, port_rate_bps: float, latency_s: float = 0.0) -> float:
    """Iteration time on an idle fabric: compute plus the schedule's
    communication time at one port's rate (one flow per transfer), with the
    overlapped share of compute hidden."""
    comm = makespan.analytical_time(schedule_of(job), port_rate_bps, latency_s)
    compute = job.compute_s
    return max(compute, (1.0 - job.overlap) * compute + comm)
