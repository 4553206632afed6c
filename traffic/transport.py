"""Transport logic of the traffic agents: DCQCN, pacing, the line meter.

Pure state machines: no sockets, no sleeping, no clock reads. Every method
where time matters takes `now` (float seconds, any monotonic origin), so the
agent drives them with time.monotonic() and the tests with a virtual clock.

DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
SIGCOMM 2015), reaction point, timer-driven variant:

    on CNP:   R_T = R_C
              R_C = R_C * (1 - alpha/2)
              alpha = (1 - g) * alpha + g
              restart the alpha timer and the increase stages
    every alpha_period without a CNP:   alpha = (1 - g) * alpha
    every increase_period without a CNP (i = periods since the last CNP):
              i <= F:        fast recovery        R_C = (R_T + R_C) / 2
              F < i <= 2F:   additive increase    R_T += R_AI, then as above
              i > 2F:        hyper increase       R_T += R_HAI, then as above
    R_T and R_C are clamped to [min_rate, line_rate].

The paper advances the stages with a timer and a byte counter; here the
timer alone does it (F periods of each stage), because at tens of Mbit/s
a byte counter sized like the paper's would hardly ever fire. The limiter
is engaged by the first CNP with alpha = 1 (so the first CNP halves the
rate, as on the NICs); until then the flow runs at line rate. Once R_T and
R_C are within RATE_SNAP of each other R_C takes R_T's value, so a flow
really gets back to line rate instead of approaching it forever.

Default parameters (`DcqcnParams`) are the paper's scaled to the
emulation: ports of tens of Mbit/s and RTTs of 1-100 ms, i.e. about 1000x
slower links and longer RTTs than the 40 Gbit/s, tens-of-microseconds
fabric DCQCN was tuned for:
    g = 1/256                   as in the paper
    cnp_interval_s = 4 ms       paper 50 us: a few RTTs; a 40 Mbit/s port
                                sends a 4 KiB packet every ~0.83 ms, so a
                                congested flow gets at most one CNP per ~5
    alpha_period_s = 5 ms       must exceed cnp_interval (paper: K = 55 us
                                > 50 us), else alpha decays between the
                                CNPs of a flow that is congested throughout
    increase_period_s = 5 ms    same reasoning as the paper's T = K
    fast_recovery_steps = 5     paper's F
    ai = 1% of line rate        (paper 40 Mbit/s of 40 Gbit/s = 0.1%; larger
                                here because there are far fewer periods per
                                second of emulated time)
    hai = 10% of line rate      10 x ai, the NICs' default ratio
    min_rate = 1% of line rate  a 4 KiB packet every ~80 ms at 40 Mbit/s.
                                Mind the go-back-N timer at such rates: if
                                ACKs come only every 8 packets they are
                                ~0.7 s apart, so a sender near min_rate must
                                ask for ACKs (ackreq) more often than once
                                per rto_s worth of packets, or use a larger
                                rto_s, to avoid spurious timeouts.
With these, recovery from min_rate to line rate without CNPs takes at most
2F + ceil((1 - 0.01 - F*0.01) / 0.1) + ceil(log2(0.99 / RATE_SNAP)) = 30
increase periods = 150 ms.

Go-back-N, the reliability half of the transport, is in gobackn.py.
"""

import math
from dataclasses import dataclass

RATE_SNAP = 1e-3  # R_C snaps to R_T within this fraction of line rate
DEFAULT_CNP_INTERVAL_S = 4e-3
_EPS = 1e-9  # float slack for comparing times (and period counts)


@dataclass
class DcqcnParams:
    """DCQCN knobs; the bps ones left at None are derived from line_rate_bps."""

    line_rate_bps: float
    min_rate_bps: float | None = None  # 1% of line rate
    g: float = 1 / 256
    alpha_period_s: float = 5e-3
    increase_period_s: float = 5e-3
    fast_recovery_steps: int = 5
    ai_rate_bps: float | None = None  # 1% of line rate
    hai_rate_bps: float | None = None  # 10% of line rate
    cnp_interval_s: float = DEFAULT_CNP_INTERVAL_S

    def __post_init__(self):
        if self.line_rate_bps <= 0:
            raise ValueError("line_rate_bps must be > 0")
        if self.min_rate_bps is None:
            self.min_rate_bps = 0.01 * self.line_rate_bps
        if self.ai_rate_bps is None:
            self.ai_rate_bps = 0.01 * self.line_rate_bps
        if self.hai_rate_bps is None:
            self.hai_rate_bps = 0.1 * self.line_rate_bps
        if not 0 < self.min_rate_bps <= self.line_rate_bps:
            raise ValueError("need 0 < min_rate_bps <= line_rate_bps")
        if not 0 < self.g <= 1:
            raise ValueError("need 0 < g <= 1")
        if self.alpha_period_s <= 0 or self.increase_period_s <= 0:
            raise ValueError("periods must be > 0")


class Dcqcn:
    """DCQCN reaction point of one flow: `rate` is what the pacer should use.

    Timer periods are counted from the last CNP (period k ends at
    t_cnp + k * period), so the outcome does not depend on how often the
    caller ticks.
    """

    def __init__(self, params):
        self.p = params
        self.rate = float(params.line_rate_bps)  # R_C
        self.target = float(params.line_rate_bps)  # R_T
        self.alpha = 1.0
        self.cnps = 0
        self.stage_steps = 0  # increase periods applied since the last CNP
        self._alpha_steps = 0  # alpha periods applied since the last CNP
        self._since = None  # time of the last CNP; None: limiter idle

    def on_cnp(self, now: float) -> None:
        self.tick(now)
        p = self.p
        self.cnps += 1
        self.target = self.rate
        self.rate = max(p.min_rate_bps, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - p.g) * self.alpha + p.g
        self.stage_steps = self._alpha_steps = 0
        self._since = now

    def tick(self, now: float) -> None:
        """Apply every alpha/increase period that ended by `now` (idempotent)."""
        if self._since is None or now <= self._since:
            return
        p = self.p
        elapsed = now - self._since
        n = int(elapsed / p.alpha_period_s + _EPS)
        if n > self._alpha_steps:
            self.alpha *= (1 - p.g) ** (n - self._alpha_steps)
            self._alpha_steps = n
        n = int(elapsed / p.increase_period_s + _EPS)
        line = p.line_rate_bps
        while self.stage_steps < n:
            if self.rate == line and self.target == line:
                self.stage_steps = n  # nothing left to increase
                break
            self._increase()

    def _increase(self):
        p = self.p
        self.stage_steps += 1
        f = p.fast_recovery_steps
        if self.stage_steps > 2 * f:
            self.target += p.hai_rate_bps
        elif self.stage_steps > f:
            self.target += p.ai_rate_bps
        self.target = min(self.target, p.line_rate_bps)
        self.rate = min((self.target + self.rate) / 2, p.line_rate_bps)
        if self.target - self.rate <= RATE_SNAP * p.line_rate_bps:
            self.rate = self.target


class Pacer:
    """Token-bucket pacing of one sender: packet k+1 may leave nbytes*8/rate
    after packet k. Idle time earns credit for at most `burst_packets`
    back-to-back packets, so a sender that waited (window full, no data)
    does not then blast a burst into the fabric.

    Lost time: when a late send is beyond what the burst credit can
    recover, the schedule slips; `lost_s` adds up those slips, and
    `efficiency` = tx time / (tx time + lost time) is the rate the pacer
    really achieved while backlogged, relative to its configured rate.

    Lateness: a packet is late if it leaves more than `tolerance_s` after
    the pacer allowed it *while the caller was waiting for the pacer*, i.e.
    after ready()/wait_time() had answered "not yet" since the previous
    send. The lag is taken at the first poll that finds the pacer ready
    (or at the send, if the caller sends without polling), so time a
    sender spends with nothing to send is not counted as lag.
    """

    def __init__(self, rate_bps, burst_packets=2, tolerance_s=1e-3):
        if burst_packets < 1:
            raise ValueError("burst_packets must be >= 1")
        self.set_rate(rate_bps)
        self.burst_packets = burst_packets
        self.tolerance_s = tolerance_s
        self.next_time = None  # earliest departure of the next packet
        self.late = 0
        self.max_lag_s = 0.0
        self.lost_s = 0.0  # schedule time lost to lateness beyond the burst credit
        self.tx_s = 0.0  # sum of the packets' transmission times at the rate
        self.packets = 0
        self.bytes = 0
        self._waiting = False  # caller was told "not yet" since the last send
        self._lag = None  # lag noticed at the first ready poll

    def set_rate(self, rate_bps: float) -> None:
        """New rate; it spaces the packets sent from now on."""
        if rate_bps <= 0:
            raise ValueError("rate must be > 0")
        self.rate_bps = float(rate_bps)

    def wait_time(self, now: float) -> float:
        if self.next_time is None or now >= self.next_time - _EPS:
            if self._waiting and self._lag is None and self.next_time is not None:
                self._lag = now - self.next_time
            return 0.0
        self._waiting = True
        return self.next_time - now

    def ready(self, now: float) -> bool:
        return self.wait_time(now) == 0.0

    def sent(self, nbytes: int, now: float) -> None:
        tx = nbytes * 8 / self.rate_bps
        if self.next_time is None:
            base = now  # a fresh pacer starts without credit
        else:
            if self._waiting:
                lag = self._lag if self._lag is not None else now - self.next_time
                if lag > self.max_lag_s:
                    self.max_lag_s = lag
                if lag > self.tolerance_s:
                    self.late += 1
            earliest = now - (self.burst_packets - 1) * tx
            if self._waiting and earliest > self.next_time:
                self.lost_s += earliest - self.next_time
            base = max(self.next_time, earliest)
        self.next_time = base + tx
        self._waiting = False
        self._lag = None
        self.packets += 1
        self.bytes += nbytes
        self.tx_s += tx

    @property
    def efficiency(self) -> float | None:
        """Share of its rate the pacer achieved while it had packets waiting:
        1.0 unless the caller polled it late (a CPU-starved generator)."""
        return self.tx_s / (self.tx_s + self.lost_s) if self.tx_s else None


MAX_GAPS = 5000


class LineMeter:
    """Did a port keep its line busy while the agent had frames for it?

    The kernel paces a port: its HTB at line rate drains the frames the
    agent queues on a socket whose send buffer holds only a few, and wakes
    the agent when there is room again. The meter replays that shaper's
    clock: `drain_at` is when everything queued so far will have left.
    A frame queued after `drain_at` by an agent that had frames waiting
    all along (`backlogged`) means the line sat idle for the difference
    because the agent did not run in time: `lost_s`. Gaps longer than
    `max_gap_s` are not the agent's lateness but a port that stopped
    draining (a failed link holds its queue): they are counted apart, in
    `stalls`. `efficiency` = tx / (tx + lost) is the share of line rate
    the port achieved while backlogged.
    """

    def __init__(self, rate_bps, max_gap_s, tolerance_s=1e-3):
        if rate_bps <= 0 or max_gap_s <= 0:
            raise ValueError("need rate_bps > 0 and max_gap_s > 0")
        self.rate_bps = float(rate_bps)
        self.max_gap_s = max_gap_s
        self.tolerance_s = tolerance_s
        self.drain_at = None
        self.tx_s = 0.0
        self.lost_s = 0.0
        self.late = 0  # frames queued more than tolerance_s after the line went idle
        self.max_lag_s = 0.0
        self.stalls = 0
        self.packets = 0
        self.resyncs = 0
        self.gaps = []  # (start, length) of every late gap, monotonic clock

    def sent(self, nbytes: int, now: float, backlogged: bool, frames: int = 1) -> None:
        """`frames` frames of `nbytes` bytes in all were queued at `now`,
        back to back (after the first, each waits behind the one before)."""
        tx = nbytes * 8 / self.rate_bps
        start = now
        if self.drain_at is not None:
            if self.drain_at > now:
                start = self.drain_at  # queued behind what is still draining
            elif backlogged:
                gap = now - self.drain_at
                if gap > self.max_gap_s:
                    self.stalls += 1
                else:
                    self.lost_s += gap
                    self.max_lag_s = max(self.max_lag_s, gap)
                    if gap > self.tolerance_s:
                        self.late += 1
                        if len(self.gaps) < MAX_GAPS:  # when, so a pause can explain it
                            self.gaps.append((round(self.drain_at, 6), round(gap, 6)))
        self.drain_at = start + tx
        self.tx_s += tx
        self.packets += frames

    def idle_since(self, now: float) -> bool:
        """The replayed clock says the line went idle before `now`."""
        return self.drain_at is not None and self.drain_at < now

    def still_queued(self, now: float) -> None:
        """The kernel queue still held frames although the replayed clock
        says it ran dry: the line did not sit idle (a paused class, or a
        port slower than its line rate for a while, drains late). Resync
        the clock to now instead of counting a gap."""
        if self.drain_at is not None and self.drain_at < now:
            self.drain_at = now
        self.resyncs += 1

    @property
    def efficiency(self) -> float | None:
        return self.tx_s / (self.tx_s + self.lost_s) if self.tx_s else None

    def summary(self) -> dict:
        return {
            "tx_s": round(self.tx_s, 6),
            "lost_s": round(self.lost_s, 6),
            "packets": self.packets,
            "late_packets": self.late,
            "max_lag_s": round(self.max_lag_s, 6),
            "stalls": self.stalls,
            "resyncs": self.resyncs,
            "gaps": self.gaps,
        }


class ReadMeter:
    """Did the agent read its frames in time?

    The sending side's meter cannot see an agent that falls behind in
    reading: its peers then wait for ACKs, their ports look idle by choice,
    and only the iteration time shows it. So each pass that reads frames
    reports how long the oldest of them waited in the kernel (its arrival
    stamp against the clock when it was read). The agent sleeps up to
    `allowance_s` between passes by design (interrupt moderation); a wait
    beyond that is lateness, `late_s`. `rx_s` is the time the frames read
    took on the wire at line rate, so `on_time` = rx / (rx + late) reads
    like the sending side's efficiency.
    """

    def __init__(self, rate_bps: float, allowance_s: float) -> None:
        if rate_bps <= 0 or allowance_s < 0:
            raise ValueError("need rate_bps > 0 and allowance_s >= 0")
        self.rate_bps = float(rate_bps)
        self.allowance_s = allowance_s
        self.rx_s = 0.0
        self.late_s = 0.0
        self.reads = 0
        self.late_reads = 0
        self.max_wait_s = 0.0

    def read(self, waited_s: float, nbytes: int) -> None:
        """A pass read `nbytes` bytes; the oldest frame had waited `waited_s`."""
        self.reads += 1
        self.rx_s += nbytes * 8 / self.rate_bps
        if waited_s > self.max_wait_s:
            self.max_wait_s = waited_s
        late = waited_s - self.allowance_s
        if late > 0:
            self.late_s += late
            self.late_reads += 1

    @property
    def on_time(self) -> float | None:
        return self.rx_s / (self.rx_s + self.late_s) if self.rx_s else None

    def summary(self) -> dict:
        return {
            "rx_s": round(self.rx_s, 6),
            "late_s": round(self.late_s, 6),
            "reads": self.reads,
            "late_reads": self.late_reads,
            "max_wait_s": round(self.max_wait_s, 6),
            "allowance_s": round(self.allowance_s, 6),
        }


def recovery_bound_s(params: DcqcnParams) -> float:
    """Upper bound on the time DCQCN needs, without CNPs, to get from
    min_rate back to line rate (see the module docstring)."""
    p = params
    # set by DcqcnParams.__post_init__ when left out
    assert p.min_rate_bps is not None and p.ai_rate_bps is not None and p.hai_rate_bps is not None
    f = p.fast_recovery_steps
    line, low = p.line_rate_bps, p.min_rate_bps
    to_line = max(0.0, line - low - f * p.ai_rate_bps)
    steps = 2 * f + math.ceil(to_line / p.hai_rate_bps)
    if line > low:
        steps += math.ceil(math.log2((line - low) / (RATE_SNAP * line)))
    return steps * p.increase_period_s
