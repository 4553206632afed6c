"""Go-back-N, the reliability half of the traffic agents' transport (the
rate half, DCQCN and pacing, is in transport.py).

Go-back-N (`GbnSender`/`GbnReceiver`) follows the RC transport: PSN ==
packet index, cumulative ACKs, a NAK (PSN sequence error) names the PSN the
receiver expects, and a sender timeout goes back to the oldest unacked PSN.
Like a RoCE NIC's retry timer with back-off, each timeout without progress
since the last one doubles the next wait, up to MAX_BACKOFF x rto_s; an ACK
or NAK that moves the window (the receiver is there) resets it. Without the
back-off, a connection held behind a higher priority class resends its
whole window every rto_s while its frames still wait in the queue.

Pure state machines like those of transport.py: every method where time
matters takes `now`.
"""

from .transport import DEFAULT_CNP_INTERVAL_S

DEFAULT_NAK_RETRY_S = 0.05
MAX_BACKOFF = 8  # the go-back-N timer grows to at most 8 x rto_s
_EPS = 1e-9  # float slack for comparing times


class GbnSender:
    """Go-back-N over packet indices 0..npackets-1 (PSN == index).

    `una` is the oldest unacknowledged PSN, `nxt` the next one to send
    (moved back to una by a NAK or a timeout), `high` one past the highest
    PSN ever sent. The timer runs while una < high; it restarts on ACK
    progress, on a go-back and when a send finds nothing outstanding.
    Stale or bogus ACKs/NAKs (below una, or beyond what was sent) are ignored.
    The caller should set ackreq at least once per window (and on the last
    packet) so that the receiver's ACKs keep the window open.
    """

    def __init__(self, npackets, window, rto_s):
        if not 0 < npackets < 2**24:
            raise ValueError("need 0 < npackets < 2**24 (PSNs are 24 bits)")
        if window < 1 or rto_s <= 0:
            raise ValueError("need window >= 1 and rto_s > 0")
        self.npackets, self.window, self.rto_s = npackets, window, rto_s
        self.una = self.nxt = self.high = 0
        self.timer_start = 0.0
        self.retransmitted = 0  # sends of a PSN that had been sent before
        self.timeouts = 0
        self.naks = 0
        self.backoff = 1  # the timer waits backoff x rto_s

    @property
    def done(self) -> bool:
        return self.una >= self.npackets

    @property
    def outstanding(self) -> int:
        return self.high - self.una

    def next_psn(self, now: float) -> int | None:
        if self.nxt >= self.npackets or self.nxt - self.una >= self.window:
            return None
        return self.nxt

    def room(self) -> int:
        """How many PSNs may be sent now, from `nxt` on (window and transfer permitting)."""
        return max(0, min(self.npackets - self.nxt, self.window - (self.nxt - self.una)))

    def on_sent(self, psn: int, now: float, count: int = 1) -> None:
        """PSNs psn .. psn+count-1 were sent, in order, at `now`."""
        if psn != self.nxt:
            raise ValueError(f"sent psn {psn}, expected {self.nxt}")
        if not 0 < count <= self.room():
            raise ValueError(f"sent {count} packets from psn {psn}, room for {self.room()}")
        if self.una >= self.high:
            self.timer_start = now  # first packet in flight: arm the timer
        end = psn + count
        self.retransmitted += max(0, min(self.high, end) - psn)
        self.high = max(self.high, end)
        self.nxt = end

    def on_ack(self, psn: int, now: float) -> None:
        """Cumulative: every PSN <= psn has been received in order."""
        if self.una <= psn < self.high:
            self.una = psn + 1
            self.nxt = max(self.nxt, self.una)
            self.timer_start = now
            self.backoff = 1

    def on_nak(self, psn: int, now: float) -> None:
        """The receiver expects psn: everything below it arrived; resend from psn."""
        if self.una <= psn < self.high:
            self.naks += 1
            self.una = psn
            self.nxt = psn
            self.timer_start = now
            self.backoff = 1

    def check_timeout(self, now: float) -> bool:
        """Go back to una if nothing was acked for the timer's wait (rto_s,
        doubled by each timeout since the last progress) while packets are out."""
        if self.una < self.high and now - self.timer_start >= self.rto_s * self.backoff:
            self.timeouts += 1
            self.nxt = self.una
            self.timer_start = now
            self.backoff = min(2 * self.backoff, MAX_BACKOFF)
            return True
        return False


class GbnReceiver:
    """Receiving end of one go-back-N transfer.

    `on_data` returns the control packets to send back, as tuples:
    ("ack", psn) cumulative up to psn, ("nak", expected_psn), ("cnp",).
    In-order data is acked every `ack_every` packets, on ackreq and on the
    last packet; a gap is NAKed once (again only after `nak_retry_s`, in
    case the retransmission was lost too); a duplicate is re-ACKed so that
    a lost ACK gets repaired; a CE mark yields a CNP at most once per
    `cnp_interval_s`.
    """

    def __init__(
        self, npackets, ack_every=8, cnp_interval_s=DEFAULT_CNP_INTERVAL_S, nak_retry_s=DEFAULT_NAK_RETRY_S
    ):
        if not 0 < npackets < 2**24:
            raise ValueError("need 0 < npackets < 2**24 (PSNs are 24 bits)")
        self.npackets, self.ack_every = npackets, max(1, ack_every)
        self.cnp_interval_s, self.nak_retry_s = cnp_interval_s, nak_retry_s
        self.expected = 0
        self.received = 0
        self.out_of_order = 0
        self.duplicates = 0
        self.ce_marks = 0
        self.cnps_sent = 0
        self._unacked = 0
        self._nak_psn = None
        self._nak_time = 0.0
        self._last_cnp = None

    @property
    def done(self) -> bool:
        return self.expected >= self.npackets

    def in_order(self, psn: int) -> bool:
        """Take the next in-order packet if it needs no answer (no ACK due,
        not the last one); False leaves everything to on_data. The receive
        loop's fast path: most packets of a transfer are just that."""
        return self.in_order_run(psn, 1)

    def in_order_run(self, psn: int, count: int) -> bool:
        """Take the `count` in-order packets from `psn` at once if none of them
        needs an answer (no ACK due, none the last): True only if each would
        have been taken alone; False takes none."""
        if (
            psn != self.expected
            or self._unacked + count >= self.ack_every
            or psn + count >= self.npackets
            or self._nak_psn is not None
        ):
            return False
        self.expected += count
        self.received += count
        self._unacked += count
        return True

    def on_data(self, psn: int, ce: bool, ackreq: bool, now: float) -> list[tuple]:
        actions: list[tuple] = []
        if psn == self.expected:
            self.expected += 1
            self.received += 1
            self._unacked += 1
            self._nak_psn = None
            if ackreq or self._unacked >= self.ack_every or self.expected == self.npackets:
                actions.append(("ack", psn))
                self._unacked = 0
        elif self.expected < psn < self.npackets:
            self.out_of_order += 1
            if self._nak_psn != self.expected or now - self._nak_time >= self.nak_retry_s - _EPS:
                actions.append(("nak", self.expected))
                self._nak_psn, self._nak_time = self.expected, now
        elif psn < self.expected:
            self.duplicates += 1
            actions.append(("ack", self.expected - 1))
            self._unacked = 0
        else:
            return actions  # beyond the transfer: not ours to judge
        if ce:
            self.ce_marks += 1
            if self._last_cnp is None or now - self._last_cnp >= self.cnp_interval_s - _EPS:
                actions.append(("cnp",))
                self.cnps_sent += 1
                self._last_cnp = now
        return actions
