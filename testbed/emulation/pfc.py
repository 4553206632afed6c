"""The pausing side of lossless classes: a small daemon that follows the
queue engine's XOFF/XON events and pauses or resumes the links that feed a
full queue, one lossless class at a time.

How a pause works (measured choices, see "Lossless classes" in docs/scenarios.md):
- the engine (bpf/queue.c) tells which ingress link fed a lossless queue
  while it was at or above XOFF, one event per link and episode, and tells
  once when the queue is back at XON;
- a link is paused while at least one queue holds it: its upstream port's
  TBF under that class's HTB leaf is changed to a rate of a few bytes per
  second (one netlink message, prebuilt; no process is started). HTB keeps
  serving the port's other classes;
- a resume changes the TBF back to a rate far above the port's (which also
  refills its tokens) and sends one wake-up frame into the port, which a
  dedicated HTB class drops: enqueuing it makes the qdisc run now instead
  of when TBF's timer would have fired;
- a paused host port holds its packets in its qdisc, so the agents' and
  TCP's sockets fill and block: the host stops sending that class.

Reaction is measured on the wire by the engine: the last arrival of the
class at the far end before a resume (stop) and the first arrival after a
resume (start), against the times the crossings happened in the queue.

Run as `python -m testbed.emulation.pfc CONFIG OUT`: CONFIG is the JSON of
QueueEngine.pause_targets plus the pin directory; the daemon prints one
JSON line when ready, and writes every pause to OUT when it ends (SIGTERM).
"""

import errno
import json
import os
import select
import signal
import socket
import struct
import sys
import time

from .netlink import (
    RTM_NEWQDISC,
    TCA_KIND,
    TCA_OPTIONS,
    TCMSG,
    ack_error,
    attr,
    in_namespace,
    message,
    route_socket,
)

EV_ASSERT, EV_RELEASE = 1, 2
EVENT = struct.Struct("=QQQIIII")  # struct pfc_event
PFC_STRIDE, LAST_NS, ARMED_NS, FIRST_NS = 32, 8, 16, 24  # struct pfc_state
STAT_STRIDE, ENQ_BYTES, DEQ_BYTES = 64, 0, 16  # struct class_stat
CLASSES = 8
ETH_P_KICK = 0x88B5
KICK_DST = bytes.fromhex("0180c2000001")  # the MAC-control group: no switch forwards it
KICK_SRC = bytes.fromhex("020000000000")

TCA_TBF_PARMS, TCA_TBF_BURST = 1, 6
TC_LINKLAYER_ETHERNET = 1
_RATESPEC = struct.Struct("=BBHhHI")


# --- messages (pure) -----------------------------------------------------------


def tbf_change(ifindex, minor, rate_bps, burst, limit):
    """RTM_NEWQDISC that changes the TBF `minor:` under HTB leaf 1:`minor`
    (what `tc qdisc change dev X parent 1:M handle M: tbf rate R burst B
    limit L` sends). A change refills the TBF's tokens."""
    rate = _RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate_bps)
    peak = _RATESPEC.pack(0, 0, 0, 0, 0, 0)
    qopt = rate + peak + struct.pack("=III", limit, 1, 0)
    opts = attr(TCA_TBF_PARMS, qopt) + attr(TCA_TBF_BURST, struct.pack("=I", burst))
    body = (
        TCMSG.pack(socket.AF_UNSPEC, 0, 0, ifindex, minor << 16, (1 << 16) | minor, 0)
        + attr(TCA_KIND, b"tbf\0")
        + attr(TCA_OPTIONS, opts)
    )
    return message(RTM_NEWQDISC, 0, body)


def wake_frame():
    return KICK_DST + KICK_SRC + struct.pack("!H", ETH_P_KICK) + bytes(46)


def machine_hold_ns(ts, idle_from, woke, now, cpu_at_wake, cpu_now):
    """How long the machine, not the daemon's own work, had delayed a change
    the daemon begins at `now` for an event of time `ts` (pure).

    Two parts, both the machine's: the wait to be woken for the event when
    it came while the daemon waited (a real-time thread woken late: every
    core was in kernel code that this kernel does not preempt, or the
    hypervisor had the core); and the time the daemon spent off its core
    since it woke (its CPU clock stops then, the wall clock does not: a
    core taken by the hypervisor, or a lock another process held). Both
    are lower bounds: the hold is read as the change begins, so the change's
    own time off the core is not in it; and the ring buffer is read once per
    wake-up, so an event that came while the daemon was busy is handled after
    the next wake-up, and what the machine took from the daemon between the
    event and that wake-up is not counted."""
    waited = max(0, woke - max(ts, idle_from))
    off_core = max(0, (now - woke) - (cpu_now - cpu_at_wake))
    return waited + off_core


class Holds:
    """Which queues hold which links paused (pure). A link-class is paused
    while at least one queue holds it; an assert of an episode that was
    already released is stale (it raced the release) and is ignored."""

    def __init__(self):
        self.by_queue = {}  # queue -> {link-class}
        self.holders = {}  # link-class -> {queue}
        self.released = {}  # queue -> the last episode released

    def hold(self, queue, episode, link):
        """True when `link` (in_slot, class) goes from running to paused."""
        if episode <= self.released.get(queue, 0):
            return False
        self.by_queue.setdefault(queue, set()).add(link)
        holders = self.holders.setdefault(link, set())
        holders.add(queue)
        return len(holders) == 1

    def release(self, queue, episode):
        """The link-classes `queue` no longer holds and nothing else does."""
        self.released[queue] = max(episode, self.released.get(queue, 0))
        freed = []
        for link in sorted(self.by_queue.pop(queue, ())):
            holders = self.holders.get(link, set())
            holders.discard(queue)
            if not holders:
                self.holders.pop(link, None)
                freed.append(link)
        return freed


# --- on the machine --------------------------------------------------------------


def sockets_in(netns, ifname):
    """A netlink socket and a packet socket bound to `ifname`, both made in
    the network namespace `netns` (a path; None: this one)."""

    def make():
        pk = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        pk.bind((ifname, 0))
        return route_socket(), pk

    return in_namespace(netns, make)


class Port:
    """One port that can be paused: its prebuilt messages and sockets."""

    def __init__(self, slot, spec):
        self.slot, self.ifname = slot, spec["ifname"]
        self.nl, self.pk = sockets_in(spec["netns"], spec["ifname"])
        self.msgs = {}
        for c, k in spec["classes"].items():
            self.msgs[int(c)] = {
                True: tbf_change(spec["ifindex"], k["handle"], k["paused_rate"], k["burst"], k["limit"]),
                False: tbf_change(spec["ifindex"], k["handle"], k["open_rate"], k["burst"], k["limit"]),
            }

    def set_paused(self, cls, paused):
        self.nl.send(self.msgs[cls][paused])
        err = ack_error(self.nl.recv(4096))
        if err:
            raise OSError(err, f"changing class {cls} of {self.ifname}: {os.strerror(err)}")
        if not paused:
            try:
                self.pk.send(wake_frame())
            except OSError as e:  # the class it goes to drops it: that is the point
                if e.errno != errno.ENOBUFS:
                    raise

    def close(self):
        self.nl.close()
        self.pk.close()


class Stop(Exception):
    pass


class PauseDaemon:
    def __init__(self, config):
        from .bpfmaps import PinnedMap, RingBuffer

        pins = config["pin_dir"]
        self.maps = [
            PinnedMap(os.path.join(pins, n)) for n in ("hpnlab_events", "hpnlab_pfc", "hpnlab_qstat")
        ]
        self.ring = RingBuffer(self.maps[0])
        self.pfc = self.maps[1].memory(writable=True)
        self.stats = self.maps[2].memory()
        self.ports = {int(s): Port(int(s), spec) for s, spec in config["ports"].items()}
        self.holds = Holds()
        self.open = {}  # (slot, class) -> its record while paused
        self.pending_first = {}  # (slot, class) -> its last record, until it sends again
        self.done = []
        self.errors = []
        self.events = 0
        now = time.monotonic_ns()
        self.woke = (now, now, time.thread_time_ns())  # (idle since, woke, CPU clock then)

    def held(self, ts):
        """machine_hold_ns for a change of the event at `ts` begun now."""
        idle_from, woke, cpu = self.woke
        return machine_hold_ns(ts, idle_from, woke, time.monotonic_ns(), cpu, time.thread_time_ns())

    def _u64(self, mem, offset):
        return int.from_bytes(mem[offset : offset + 8], "little")

    def backlog(self, slot, cls):
        at = (slot * CLASSES + cls) * STAT_STRIDE
        return max(0, self._u64(self.stats, at + ENQ_BYTES) - self._u64(self.stats, at + DEQ_BYTES))

    def departed(self, slot, cls):
        """Bytes of the class that reached the far end so far."""
        return self._u64(self.stats, (slot * CLASSES + cls) * STAT_STRIDE + DEQ_BYTES)

    def handle(self, kind, queue, in_slot, episode, ts):
        if kind == EV_ASSERT:
            link = (in_slot, queue % CLASSES)
            if link[0] in self.ports and self.holds.hold(queue, episode, link):
                self._pause(link, queue, ts)
        elif kind == EV_RELEASE:
            for link in self.holds.release(queue, episode):
                try:
                    self._resume(link, ts)
                except OSError as e:  # the other links must still resume
                    self.errors.append(str(e))

    def _pause(self, link, queue, ts):
        slot, cls = link
        self._finish_previous(link)
        backlog = self.backlog(slot, cls)
        held = self.held(ts)
        self.ports[slot].set_paused(cls, True)
        applied = time.monotonic_ns()
        self.open[link] = {
            "slot": slot,
            "ifname": self.ports[slot].ifname,
            "class": cls,
            "queue": queue,
            "assert_ns": ts,
            "applied_ns": applied,
            "held_ns": held,
            "departed_at_pause": self.departed(slot, cls),
            "backlog_at_pause": backlog,
        }

    def _resume(self, link, ts):
        slot, cls = link
        rec = self.open.pop(link, None)
        at = (slot * CLASSES + cls) * PFC_STRIDE
        # the last arrival while paused: when the upstream really stopped
        stop = self._u64(self.pfc, at + LAST_NS)
        departed = self.departed(slot, cls)
        self.pfc[at + FIRST_NS : at + FIRST_NS + 8] = bytes(8)
        self.pfc[at + ARMED_NS : at + ARMED_NS + 8] = ts.to_bytes(8, "little")
        backlog = self.backlog(slot, cls)
        held = self.held(ts)
        self.ports[slot].set_paused(cls, False)
        if rec is not None:
            rec.update(
                release_ns=ts,
                resume_held_ns=held,
                resumed_ns=time.monotonic_ns(),
                stop_ns=stop,
                backlog_at_resume=backlog,
                departed_at_resume=departed,
            )
            self.done.append(rec)
            self.pending_first[link] = rec

    def _finish_previous(self, link):
        """The first arrival after the previous resume of `link`."""
        rec = self.pending_first.pop(link, None)
        if rec is not None:
            at = (link[0] * CLASSES + link[1]) * PFC_STRIDE
            rec["first_ns"] = self._u64(self.pfc, at + FIRST_NS)

    def sweep(self):
        """Release the links held by queues whose episode ended without a
        release event (a link went down and its queue was flushed:
        QueueEngine.reset makes the episode even)."""
        for queue in list(self.holds.by_queue):
            episode = self._u64(self.pfc, queue * PFC_STRIDE)
            if not episode & 1:
                self.handle(EV_RELEASE, queue, 0, episode, time.monotonic_ns())

    def run(self):
        poller = select.epoll()
        poller.register(self.ring.fd, select.EPOLLIN)
        try:
            while True:
                idle_from = time.monotonic_ns()
                ready = poller.poll(0.5)
                self.woke = (idle_from, time.monotonic_ns(), time.thread_time_ns())
                if not ready:
                    self.sweep()
                for raw in self.ring.records():
                    ts, episode, _backlog, kind, queue, in_slot, _pad = EVENT.unpack(raw)
                    self.events += 1
                    try:
                        self.handle(kind, queue, in_slot, episode, ts)
                    except OSError as e:
                        self.errors.append(str(e))
        except Stop:
            pass
        finally:
            poller.close()

    def result(self):
        for link in list(self.pending_first):
            self._finish_previous(link)
        now = time.monotonic_ns()
        still = [dict(r, release_ns=None, resumed_ns=None, end_ns=now) for r in self.open.values()]
        return {"pauses": self.done + still, "events": self.events, "errors": self.errors[:20]}

    def close(self):
        for p in self.ports.values():
            p.close()
        self.ring.close()
        for m in self.maps:
            m.close()


def _raise_stop(*_):
    raise Stop()


def realtime():
    """Run ahead of the traffic: a pause that waits behind busy agents is a
    late pause. SCHED_FIFO where allowed, else the highest nice level."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "fifo"
    except (OSError, AttributeError):
        try:
            os.nice(-20)
            return "nice"
        except OSError:
            return "normal"


def main(argv):
    config_path, out_path = argv
    with open(config_path) as fh:
        config = json.load(fh)
    signal.signal(signal.SIGTERM, _raise_stop)
    daemon = PauseDaemon(config)
    policy = realtime()
    print(json.dumps({"event": "ready", "ports": len(daemon.ports), "scheduling": policy}), flush=True)
    try:
        daemon.run()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        out = dict(daemon.result(), scheduling=policy)
        tmp = out_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(out, fh)
        os.replace(tmp, out_path)
        daemon.close()


if __name__ == "__main__":
    main(sys.argv[1:])
