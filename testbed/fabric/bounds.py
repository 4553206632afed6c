"""Bounds on what a file may cost (pure). The schema bounds each number on
its own; a file of numbers that are each in range can still multiply into
days of wall time, gigabytes of samples or captures, minutes of planning,
or a message the controller refuses. These checks bound the products, from
counts that cost nothing to compute (no schedule is built here), so that
`hpnlab check` refuses what `plan`, `crux plan`, bring-up or the run could
not handle. The constants below that mirror another part of hpnlab (which
this package does not import) are held to it by unit tests.
"""

import math

from .dilation import AUTO, MAX_DILATION
from .model import Fabric
from .problems import Problem, seconds
from .units import format_rate, format_time, parse_time

# --- wall time ---------------------------------------------------------------
# A drill at time dilation N takes N times its duration on the clock: 3600 s
# at 64 is 64 hours. Four hours is an afternoon's lab session; a longer run
# ties up the machine (and the other users of a shared one) for a day.
MAX_WALL_S = 4 * 3600

# --- samples the drill keeps in memory ----------------------------------------
QUEUE_SAMPLE_HZ = 100  # testbed/drill/queue_sampler.py: INTERVAL_S = 0.01
LINK_SAMPLE_HZ = 10  # testbed/drill/sampler.py: LinkSampler's interval = 0.1
# The queue sampler keeps three int64 counters per port, class and sample
# (backlog bytes, backlog packets, marks) and copies them once more when it
# computes the results; the link sampler keeps a dict entry of three ints
# per port and sample (measured: about 240 bytes). Every port counts (the
# link sampler reads hosts' ports only for the hosts that send).
QUEUE_SAMPLE_BYTES = 48
LINK_SAMPLE_BYTES = 240
# Both samplers run on the wall clock for the whole run, in the memory of
# the process that drives it: 2 GiB leaves the machine to the emulation.
MAX_SAMPLE_BYTES = 2 << 30
QUEUE_ENGINE_PORTS = 4096  # testbed/emulation/queues.py MAX_SLOTS (bpf/queue.c)

# --- captures ------------------------------------------------------------------
# tcpdump keeps whole frames (-s 0), up to the MTU each: 1 GiB is a
# single host's full 100,000 jumbo frames, and about what Wireshark opens.
MAX_CAPTURE_BYTES = 1 << 30

# --- planning the jobs -----------------------------------------------------------
# A transfer is one send of a job's schedule per iteration. `hpnlab plan`
# builds, checks for deadlock and simulates every one of them (a 256-rank
# hierarchical AllReduce, 65,536 transfers, takes it 4 s; a 256-rank ring,
# 130,560, takes 9 s), and every traffic agent of a job builds the whole
# schedule too.
MAX_TRANSFERS = 1 << 16
# A connection is one rank sending to one peer. The job announcement carries
# each one, about 170 bytes of JSON, to the controller, which reads at most
# 16 MiB (controllers/channel.py MAX_REQUEST): 16,384 leave room for long
# names.
MAX_CONNECTIONS = 1 << 14
# The controller (placement), `crux plan` and `plan` (path latency) search
# every connection's paths by walking the fabric's links, so their work is
# connections x links: at 2^21 (a 64-rank all-to-all on 520 links), `crux
# plan` takes 3 s and `plan` 1 s; 8 all-to-all jobs of 256 ranks on the same
# fabric asked 130 times as much, which took them minutes.
MAX_PATH_SEARCH = 1 << 21

# --- links -------------------------------------------------------------------------
# Rates after scaling (what this machine shapes before any time dilation).
# Below 1 Mbit/s a 9000-byte frame takes 72 ms to send, most of the agents'
# 100 ms queues and 250 ms retransmission timeout ('40Mbit' at scale 5000
# is 8 kbit/s: 9 s a frame). 100 Gbit/s is far more than a veth pair and
# Open vSwitch forward, and its 100 ms queue behind a port, 1.25 GB, is a
# third of what tc's 32-bit byte limits hold.
MIN_EMULATED_BPS, MAX_EMULATED_BPS = 1e6, 100e9
# A geostationary satellite hop is 0.27 s one way; no link on the ground
# comes close to a second (half the Earth's circumference in fibre: 0.1 s).
MAX_LINK_DELAY_S = 1.0

# --- transport knobs (times are emulated; the ranges are read as a file's are) ----------
# The agents check their timers every 10 ms (traffic/agent.py TICK_S), and
# linger two timeouts after their last transfer (a longer one stretches
# every run).
RTO_RANGE = ("10ms", "10s")
# At each tick the increase timer takes one step per period gone by: 100 us
# is 100 steps a tick; a rate cut recovers in 30 increase periods, 30 s at 1 s.
DCQCN_PERIOD_RANGE = ("100us", "1s")
CNP_INTERVAL_RANGE = ("0s", "1s")  # 0: a CNP for every marked packet


# --- a scenario's products ---------------------------------------------------------------


def cost_problems(file: str, doc: dict, duration: float, jobs: list, fabric: Fabric | None) -> list[Problem]:
    """Every bound below that the scenario `doc` breaks (`duration` in
    seconds, `jobs` as scenario._job_entry made them, `fabric` None when it
    could not be built)."""
    dilation = doc.get("time_dilation", 1)
    wall = wall_seconds(duration, dilation)
    problems = []
    if duration <= MAX_WALL_S < wall:  # a longer duration is refused on its own (semantics.py)
        problems += wall_time_problems(file, duration, dilation, wall)
    elif wall <= MAX_WALL_S and fabric is not None:
        classes = len((doc.get("queues") or {}).get("classes", []))
        problems += sample_problems(file, fabric, classes, wall)
    if fabric is None:
        return problems
    if doc.get("capture") is not None:
        problems += capture_problems(file, doc["capture"], fabric.mtu)
    return problems + planner_problems(file, jobs, fabric)


def wall_seconds(duration: float, dilation: float | str) -> float:
    """The run's longest time on the clock: 'auto' may choose MAX_DILATION."""
    return duration * (MAX_DILATION if dilation == AUTO else float(dilation))


def wall_time_problems(file: str, duration: float, dilation: float | str, wall: float) -> list[Problem]:
    factor = f"up to {MAX_DILATION:g} ('auto')" if dilation == AUTO else f"{float(dilation):g}"
    return [
        Problem(
            file,
            "time_dilation",
            f"expected duration x time_dilation of at most "
            f"{seconds(MAX_WALL_S)} ({MAX_WALL_S // 3600} hours of wall time), got "
            f"{seconds(duration)} x {factor} = {seconds(wall)}",
        )
    ]


def sample_problems(file: str, fabric: Fabric, classes: int, wall: float) -> list[Problem]:
    """The queue sampler keeps every port's classes at QUEUE_SAMPLE_HZ, the
    link sampler every port at LINK_SAMPLE_HZ, for the whole wall time."""
    ports = 2 * len(fabric.links)
    if classes and ports > QUEUE_ENGINE_PORTS:
        return [
            Problem(
                file,
                "queues",
                f"expected at most {QUEUE_ENGINE_PORTS} ports (the queue "
                f"engine's slots) in a fabric with queues, got {ports} ports "
                f"({len(fabric.links)} links)",
            )
        ]
    queue = ports * classes * QUEUE_SAMPLE_HZ * wall * QUEUE_SAMPLE_BYTES
    link = ports * LINK_SAMPLE_HZ * wall * LINK_SAMPLE_BYTES
    if queue + link <= MAX_SAMPLE_BYTES:
        return []
    what = (
        f"{ports} ports x 10/s"
        if not classes
        else f"{ports} ports x {classes} classes x 100/s, and {ports} ports x 10/s,"
    )
    return [
        Problem(
            file,
            "queues" if classes else "duration",
            f"expected samples of at most {_size(MAX_SAMPLE_BYTES)} kept for the run, got "
            f"{_size(queue + link)} ({what} over {seconds(wall)} of wall time)",
        )
    ]


def capture_problems(file: str, capture: dict, mtu: int) -> list[Problem]:
    hosts, packets = len(capture["hosts"]), capture.get("packets", 1000)
    total = hosts * packets * mtu
    if total <= MAX_CAPTURE_BYTES:
        return []
    return [
        Problem(
            file,
            "capture",
            f"expected captures of at most {_size(MAX_CAPTURE_BYTES)} "
            f"(hosts x packets x MTU), got {hosts} x {packets} x {mtu} = {_size(total)}",
        )
    ]


def _size(nbytes):
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= mult:
            return f"{nbytes / mult:.3g} {unit}"
    return f"{nbytes:.0f} bytes"


# --- planning ------------------------------------------------------------------------


def planner_problems(file: str, jobs: list, fabric: Fabric) -> list[Problem]:
    """At most one problem: the connections (announcement, path search)
    before the transfers (schedules)."""
    links = len(fabric.links)
    limit = min(MAX_CONNECTIONS, MAX_PATH_SEARCH // max(links, 1))
    total = sum(connections(j.collective, len(j.hosts), _group_sizes(j), j.microbatches) for j in jobs)
    if total > limit:
        return [
            Problem(
                file,
                "jobs",
                f"expected at most {limit} connections (a rank sending to "
                f"a peer) in all jobs on a fabric of {links} links, got {total}",
            )
        ]
    total = sum(transfers(j.collective, len(j.hosts), _group_sizes(j), j.microbatches) for j in jobs)
    if total > MAX_TRANSFERS:
        return [
            Problem(
                file,
                "jobs",
                f"expected at most {MAX_TRANSFERS} transfers per iteration "
                f"in all jobs (each one is built and simulated to plan them), got {total}",
            )
        ]
    return []


def _group_sizes(job):
    groups = job.groups
    return None if groups is None else [len(g) for g in groups]


def transfers(collective: str, n: int, groups: list[int] | None = None, microbatches: int = 1) -> int:
    """Sends per iteration in the schedule of traffic/collectives.py (ring:
    2 passes of n-1 steps of n sends; halving-doubling: 2 log2(n) steps of n;
    hierarchical: per group its two ring passes and the shards folded into
    lanes and handed back, per lane a ring AllReduce across the groups)."""
    if collective == "ring":
        return 2 * n * (n - 1)
    if collective == "halving-doubling":
        return 2 * n * (n.bit_length() - 1)
    if collective == "all-to-all":
        return n * (n - 1)
    if collective == "pipeline":
        return 2 * (n - 1) * microbatches
    sizes = groups or [n]
    lanes, count = min(sizes), len(sizes)
    return sum(2 * g * (g - 1) + 2 * (g - lanes) for g in sizes) + 2 * lanes * count * (count - 1)


def connections(collective: str, n: int, groups: list[int] | None = None, microbatches: int = 1) -> int:
    """Distinct (rank, peer) pairs that send, as testbed/drill/announce.py
    lists them."""
    if collective == "ring":
        return n if n > 1 else 0
    if collective == "halving-doubling":
        return n * (n.bit_length() - 1)
    if collective == "all-to-all":
        return n * (n - 1)
    if collective == "pipeline":
        return 2 * (n - 1)
    return len(_hierarchical_pairs(groups or [n]))


def _hierarchical_pairs(sizes):
    """The pairs of hierarchical_allreduce, from group sizes alone (ranks
    numbered group after group): each group's ring, its members past the
    lanes to their lane head and back, and each lane's ring across groups."""
    firsts = [sum(sizes[:k]) for k in range(len(sizes))]
    lanes, pairs = min(sizes), set()
    for first, g in zip(firsts, sizes):
        pairs |= _ring_pairs([first + i for i in range(g)])
        for i in range(lanes, g):
            pairs |= {(first + i, first + i % lanes), (first + i % lanes, first + i)}
    for j in range(lanes):
        pairs |= _ring_pairs([first + j for first in firsts])
    return pairs


def _ring_pairs(members):
    m = len(members)
    return {(members[i], members[(i + 1) % m]) for i in range(m)} if m > 1 else set()


# --- links -----------------------------------------------------------------------------


def link_problem(fabric: Fabric) -> tuple[str, str] | None:
    """(field, message) for the first link this machine cannot emulate, or
    None: every rate after scaling within [MIN_EMULATED_BPS,
    MAX_EMULATED_BPS], every delay within MAX_LINK_DELAY_S. The field is
    the parameter that set it: a host rate, an oversubscription, the DCI's."""
    low, high = MIN_EMULATED_BPS * fabric.scale, MAX_EMULATED_BPS * fabric.scale
    for kind in ("access", "fabric", "dci"):
        for link in fabric.links:
            if link.kind != kind:
                continue
            if not low <= link.rate_bps <= high:
                return _rate_field(fabric, link), (
                    f"expected {_link_words(link)} from {format_rate(low)} to {format_rate(high)} "
                    f"({format_rate(MIN_EMULATED_BPS)} to {format_rate(MAX_EMULATED_BPS)} after "
                    f"scaling by {fabric.scale:g}), got {_rate_text(link.rate_bps)} "
                    f"({_rate_text(link.rate_bps / fabric.scale)} after scaling)"
                )
            if link.delay_s > MAX_LINK_DELAY_S:
                return "dci.delay", (
                    f"expected a delay from 0s to {seconds(MAX_LINK_DELAY_S)}, got {seconds(link.delay_s)}"
                )
    return None


def _rate_text(bps):
    return format_rate(bps) if math.isfinite(bps) else "a rate too large to write"


def _link_words(link):
    return {"access": "a host rate", "fabric": "switch links", "dci": "interconnect links"}[link.kind]


def _rate_field(fabric, link):
    """The parameter a link's rate comes from, as a path in the file."""
    if link.kind == "dci":
        return "dci.rate" if "rate" in fabric.params.get("dci", {}) else "dci.oversubscription"
    prefix, params = "", fabric.params
    if fabric.kind == "region":
        dc = fabric.nodes[link.a.node].dc
        prefix, params = f"fabrics[{dc}].", fabric.params["fabrics"][dc]
    if link.kind == "access" or params["kind"] == "fat-tree":  # a fat-tree's links all run at it
        return f"{prefix}rates.host"
    return f"{prefix}oversubscription"


# --- transport -------------------------------------------------------------------------


def transport_problems(file: str, raw: dict | None) -> list[Problem]:
    """The agents' timers within the ranges above, as written."""
    raw = raw or {}
    checks = [("transport.rto", raw.get("rto"), RTO_RANGE)]
    dcqcn = raw.get("dcqcn") or {}
    checks += [
        (f"transport.dcqcn.{key}", dcqcn.get(key), DCQCN_PERIOD_RANGE)
        for key in ("alpha_period", "increase_period")
    ]
    checks.append(("transport.dcqcn.cnp_interval", dcqcn.get("cnp_interval"), CNP_INTERVAL_RANGE))
    problems = []
    for field, value, (low, high) in checks:
        if value is not None and not parse_time(low) <= parse_time(value) <= parse_time(high):
            problems.append(
                Problem(
                    file, field, f"expected a time from {low} to {high}, got {format_time(parse_time(value))}"
                )
            )
    return problems
