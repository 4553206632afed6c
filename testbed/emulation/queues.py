"""Per-class queues on every port, on the machine: the tc lines that give a
port its strict-priority HTB classes and attach the BPF queue engine
(bpf/queue.c), and `QueueEngine`, which fills the engine's maps and reads its
counters.

How a port works (testbed/fabric/queues.py says what the classes are):
- HTB at the port's rate, one leaf class per traffic class (prio = class
  index, a token guaranteed rate, the whole rate as ceiling): strict
  priority by borrowing order;
- the BPF program at the port's egress picks the class from the DSCP,
  tail-drops at the class buffer and marks ECN; the FIFO under each class is
  two frames larger, so it never drops first and every drop is counted;
- the BPF program at the ingress of the far end of the wire counts what
  left the queue, so backlog = enqueued - dequeued is the real backlog.

Counters: one mmap-ed array of 8 x u64 per (port slot, class).
"""

import os
import shutil
import struct
import subprocess

from testbed.fabric import queues as model

from . import compiled
from .bpfmaps import PinnedMap
from .plans import port_rate_line

SOURCE = os.path.join(os.path.dirname(__file__), "bpf", "queue.c")
OBJECT_DIR = "/var/lib/hpnlab/bpf"
BPFFS = "/sys/fs/bpf"
PIN_DIR = os.path.join(BPFFS, "tc", "globals")  # where tc pins maps it loads
MAP_NAMES = (
    "hpnlab_ports",
    "hpnlab_dscp",
    "hpnlab_qcfg",
    "hpnlab_qstat",
    "hpnlab_pdev",
    "hpnlab_flows",
    "hpnlab_pfc",
    "hpnlab_asserts",
    "hpnlab_events",
)
CLASSES = 8  # per slot in the maps (bpf/queue.c CLASSES)
MAX_SLOTS = 4096  # bpf/queue.c MAX_SLOTS
HTB_MINOR_BASE = 0x10  # class i is HTB class 1:(0x10 + i)
KICK_MINOR = 0x1F  # the class that drops wake-up frames (pfc.py, bpf/queue.c)
PAUSED_RATE_BPS = 8  # bytes/s of a paused class: no frame for hours
MAX_TBF_RATE_BPS = 4_000_000_000
UNLIMITED_FIFO = 64 << 20  # a class without a limit of its own (a host's lossless class)
MIN_FRAME = 60  # the smallest frame a port carries (ACKs, CNPs), without FCS
STAT_FIELDS = (
    "enq_bytes",
    "enq_pkts",
    "deq_bytes",
    "deq_pkts",
    "drop_bytes",
    "drop_pkts",
    "marks",
    "ect_pkts",
)
_CFG = struct.Struct("=QQQIIQQQ")  # struct class_cfg
_PDEV = struct.Struct("=II")  # struct port_dev
PFC_FIELDS = ("episode", "last_ns", "armed_ns", "first_ns")  # struct pfc_state
_ECN_MODE = {None: 0, model.ECN_STEP: 1, model.ECN_RED: 2}
EGRESS, INGRESS = 0, 1


class QueueSetupError(RuntimeError):
    pass


# --- the BPF object -------------------------------------------------------------


def compiler_missing():
    """What is missing to build the BPF object, or None."""
    if not shutil.which("clang"):
        return "clang (apt package clang; make setup installs it)"
    if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
        return "libbpf headers (apt package libbpf-dev; make setup installs it)"
    return None


def build_object(out_dir=OBJECT_DIR):
    """The compiled queue engine, built once per version of its source."""
    obj = compiled.versioned_path(SOURCE, out_dir, "queue-", ".o")
    if os.path.exists(obj):
        return obj
    missing = compiler_missing()
    if missing:
        raise QueueSetupError(f"the BPF queue engine cannot be built: {missing} is missing")
    arch = f"/usr/include/{os.uname().machine}-linux-gnu"
    return compiled.compile_to(
        obj,
        SOURCE,
        lambda out: [
            "clang",
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-mcpu=v3",
            f"-I{arch}",
            "-c",
            SOURCE,
            "-o",
            out,
        ],
        QueueSetupError,
    )


# --- tc lines (pure) ---------------------------------------------------------------


def open_rate_bps(rate_mbit):
    """A lossless class's TBF rate while not paused (bytes/s): far above the
    port's, so that HTB alone shapes it."""
    return int(min(MAX_TBF_RATE_BPS, rate_mbit * 1e6 / 8 * 100))


def fifo_bytes(pc, frame):
    """The FIFO under a class: two frames above the limit the engine
    enforces, so it never drops first; large for a class without a limit."""
    return pc.limit + 2 * frame if pc.limit else UNLIMITED_FIFO


def class_lines(ifname, rate_mbit, mtu, classes, delay_s=0.0):
    """`tc -batch` lines: HTB root at the port's rate and one strict-priority
    leaf per class, each over a FIFO (netem on a delayed link) two frames
    larger than the class buffer the BPF engine enforces. A lossless class
    gets a TBF between its leaf and its FIFO: pausing it is one change of
    that TBF's rate (pfc.py). With a lossless class, one more leaf drops the
    wake-up frames that make a resumed port send at once."""
    frame = model.frame_bytes(mtu)
    burst = model.shaper_burst_bytes(mtu)
    last = HTB_MINOR_BASE + len(classes) - 1
    # A guaranteed rate of 1/1000 of the port: strict priority in practice,
    # without the zero rate HTB refuses.
    floor = max(0.008, rate_mbit / 1000)
    lines = [
        f"qdisc replace dev {ifname} root handle 1: htb default {last:x}",
        port_rate_line(ifname, rate_mbit, mtu),
    ]
    for pc in classes:
        minor = HTB_MINOR_BASE + pc.index
        lines.append(
            f"class replace dev {ifname} parent 1:1 classid 1:{minor:x} htb rate "
            f"{floor:.6g}mbit ceil {rate_mbit:.6g}mbit prio {pc.index} burst {burst} "
            f"cburst {burst} quantum {frame}"
        )
        fifo = fifo_bytes(pc, frame)
        if pc.lossless:
            lines.append(
                f"qdisc replace dev {ifname} parent 1:{minor:x} handle {minor:x}: tbf "
                f"rate {open_rate_bps(rate_mbit) * 8}bit burst {frame} limit {fifo}"
            )
        elif delay_s > 0:
            # netem counts packets, not bytes: room for the FIFO's bytes in
            # the smallest frames, so that ACKs queued among full frames do
            # not make it drop before the engine's byte limit.
            lines.append(
                f"qdisc replace dev {ifname} parent 1:{minor:x} handle {minor:x}: netem "
                f"delay {delay_s * 1e3:.6g}ms limit {fifo // MIN_FRAME + 1}"
            )
        else:
            lines.append(
                f"qdisc replace dev {ifname} parent 1:{minor:x} handle {minor:x}: bfifo limit {fifo}"
            )
    if any(pc.lossless for pc in classes):
        lines += [
            f"class replace dev {ifname} parent 1:1 classid 1:{KICK_MINOR:x} htb rate "
            f"{floor:.6g}mbit ceil {rate_mbit:.6g}mbit prio 7 burst {burst} cburst {burst} "
            f"quantum {frame}",
            f"qdisc replace dev {ifname} parent 1:{KICK_MINOR:x} handle {KICK_MINOR:x}: bfifo limit 0",
        ]
    return lines


def attach_lines(ifname, obj, host=False):
    """Attach the engine to both directions of `ifname`: its egress queue,
    and the count of what arrives from the far end's queue. Host ports use
    the programs that know a port by its NIC's MAC too (bpf/queue.c)."""
    kind = "host_" if host else ""
    return [f"qdisc replace dev {ifname} clsact"] + [
        f"filter replace dev {ifname} {d} pref 1 handle 1 bpf da obj {obj} sec tc/{kind}{d}"
        for d in ("egress", "ingress")
    ]


def port_slots(fabric):
    """{ifname: slot} for every port's egress, {ifname: the far end's
    ifname} (where that queue's departures are counted), and {ifname:
    (device here, device at the far end)} as numbers from 1."""
    slots, peer, devices = {}, {}, {}
    number = {name: i + 1 for i, name in enumerate(sorted(fabric.nodes))}
    for i, link in enumerate(fabric.links):
        for j, (end, other) in enumerate(((link.a, link.b), (link.b, link.a))):
            slots[end.ifname] = 2 * i + j
            peer[end.ifname] = other.ifname
            devices[end.ifname] = (number[end.node], number[other.node])
    if len(slots) > MAX_SLOTS:
        raise QueueSetupError(f"{len(slots)} ports: the queue engine holds at most {MAX_SLOTS}")
    return slots, peer, devices


def parse_ifindexes(text):
    """{ifname: ifindex} from `ip -o link show` output."""
    out = {}
    for line in text.splitlines():
        head = line.split(":", 2)
        if len(head) == 3 and head[0].strip().isdigit():
            out[head[1].strip().split("@")[0]] = int(head[0])
    return out


# --- the running engine ------------------------------------------------------------


class QueueEngine:
    """The maps of one fabric's queue engine: configure, read, reset, remove."""

    def __init__(self, fabric, ledger=None):
        self.fabric = fabric
        self.ledger = ledger
        self.slots, self.peer, self.devices = port_slots(fabric)
        self.ports = {}  # ifname -> [PortClass]
        for link in fabric.links:
            for end in (link.a, link.b):
                self.ports[end.ifname] = model.classes_at(fabric, link, end)
        self.obj = None
        self.maps = {}
        self.mounted = False
        self.made_dirs = False

    # --- before the fabric's tc lines run ---------------------------------------
    def prepare(self):
        """Build the object, make sure bpffs is there, and remove pins a
        crashed run of hpnlab left (ours by name), so no old map is reused."""
        self.obj = build_object()
        # tc makes tc/globals and the links ip and xdp to it on first use
        self.made_dirs = not os.path.exists(os.path.dirname(PIN_DIR))
        if not os.path.ismount(BPFFS):
            r = subprocess.run(["mount", "-t", "bpf", "bpf", BPFFS], capture_output=True, text=True)
            if r.returncode != 0:
                raise QueueSetupError(f"cannot mount bpffs at {BPFFS}: {r.stderr.strip()}")
            self.mounted = True
            if self.ledger:
                self.ledger.add("mounts", BPFFS)
        pins = [os.path.join(PIN_DIR, n) for n in MAP_NAMES]
        if self.ledger:
            self.ledger.add("files", *pins)
        for p in pins:
            if os.path.exists(p):
                os.unlink(p)
        return self.obj

    def port_lines(self, ifname, rate_mbit, mtu, delay_s):
        """The port's classes. The BPF programs are attached apart
        (attach_lines): a Mininet host has its own mount namespace, where
        the bpffs that holds the engine's maps is not mounted, so they are
        loaded from the root mount namespace into the host's network one."""
        return class_lines(ifname, rate_mbit, mtu, self.ports[ifname], delay_s)

    def attach_lines(self, ifnames, host=False):
        return [line for i in ifnames for line in attach_lines(i, self.obj, host)]

    # --- once every port is attached ---------------------------------------------
    def configure(self, ifindex):
        """Fill the maps. `ifindex`: {ifname: its index in its namespace}."""
        macs = {p: int(nic.mac.replace(":", ""), 16) for nic in self.fabric.nics for p in nic.ports}
        try:
            self.maps = {n: PinnedMap(os.path.join(PIN_DIR, n)) for n in MAP_NAMES}
        except OSError as e:
            raise QueueSetupError(str(e)) from None
        for dscp, cls in enumerate(self.fabric.queues.dscp_classes()):
            self.maps["hpnlab_dscp"].update(struct.pack("=I", dscp), struct.pack("=I", cls))
        for ifname, slot in self.slots.items():
            for pc in self.ports[ifname]:
                pmax = int(min(1.0, pc.probability) * 0xFFFFFFFF)
                value = _CFG.pack(
                    pc.limit,
                    pc.k_low,
                    pc.k_high,
                    _ECN_MODE[pc.ecn_mode],
                    pmax,
                    pc.xoff,
                    pc.xon,
                    int(pc.lossless),
                )
                self.maps["hpnlab_qcfg"].update(struct.pack("=I", slot * CLASSES + pc.index), value)
        for ifname, slot in self.slots.items():
            self.maps["hpnlab_pdev"].update(struct.pack("=I", slot), _PDEV.pack(*self.devices[ifname]))
            for name, direction in ((ifname, EGRESS), (self.peer[ifname], INGRESS)):
                key = struct.pack("=QII", macs.get(name, 0), ifindex[name], direction)
                self.maps["hpnlab_ports"].update(key, struct.pack("=I", slot))
        self.zero()

    def attach_pinned(self):
        """Open the maps a running fabric's owner pinned (from another
        process: `hpnlab link`), without configuring them; `detach` closes
        them and leaves the pins to their owner."""
        try:
            self.maps = {n: PinnedMap(os.path.join(PIN_DIR, n)) for n in ("hpnlab_qstat", "hpnlab_pfc")}
        except OSError as e:
            self.detach()
            raise QueueSetupError(str(e)) from None
        return self

    def detach(self):
        for m in self.maps.values():
            m.close()
        self.maps = {}

    def zero(self):
        """Start every counter from nothing (packets that crossed before the
        maps were filled were never counted on one side)."""
        empty, idle = bytes(8 * len(STAT_FIELDS)), bytes(8 * len(PFC_FIELDS))
        for slot in self.slots.values():
            for c in range(len(self.fabric.queues.classes)):
                key = struct.pack("=I", slot * CLASSES + c)
                self.maps["hpnlab_qstat"].update(key, empty)
                self.maps["hpnlab_pfc"].update(key, idle)

    def reset(self, ifnames):
        """A link went down: its queues were flushed without the far end
        seeing the packets. Count them as gone (enqueued := dequeued)."""
        for ifname in ifnames:
            slot = self.slots[ifname]
            for c in range(len(self.fabric.queues.classes)):
                key = struct.pack("=I", slot * CLASSES + c)
                st = list(struct.unpack("=8Q", self.maps["hpnlab_qstat"].lookup(key)))
                st[0], st[1] = st[2], st[3]
                self.maps["hpnlab_qstat"].update(key, struct.pack("=8Q", *st))
                # an episode above XOFF ends with the queue: the pause
                # daemon sees it even and releases what it held
                ps = list(struct.unpack("=4Q", self.maps["hpnlab_pfc"].lookup(key)))
                if ps[0] & 1:
                    ps[0] += 1
                    self.maps["hpnlab_pfc"].update(key, struct.pack("=4Q", *ps))

    def counters(self):
        """The counters array (memory of the map: read, do not keep)."""
        return self.maps["hpnlab_qstat"].memory()

    def pause_targets(self, ifindex, netns):
        """What the pause daemon (pfc.py) needs to pause each port that feeds
        a switch: {slot: {ifname, ifindex, netns (a path, or None for this
        namespace), classes: {class index: its TBF's handle, rates, burst,
        limit}}}. `netns`: {ifname: the namespace file of a host's port}."""
        frame = model.frame_bytes(self.fabric.mtu)
        out = {}
        for link in self.fabric.links:
            for end, other in ((link.a, link.b), (link.b, link.a)):
                if not self.fabric.nodes[other.node].is_switch:
                    continue
                classes = {
                    pc.index: {
                        "handle": HTB_MINOR_BASE + pc.index,
                        "open_rate": open_rate_bps(self.fabric.scaled_mbit(link)),
                        "paused_rate": PAUSED_RATE_BPS,
                        "burst": frame,
                        "limit": fifo_bytes(pc, frame),
                    }
                    for pc in self.ports[end.ifname]
                    if pc.lossless
                }
                if classes:
                    out[self.slots[end.ifname]] = {
                        "ifname": end.ifname,
                        "ifindex": ifindex[end.ifname],
                        "netns": netns.get(end.ifname),
                        "classes": classes,
                    }
        return out

    # --- teardown -------------------------------------------------------------------
    def close(self):
        self.detach()
        for n in MAP_NAMES:
            path = os.path.join(PIN_DIR, n)
            if os.path.exists(path):
                os.unlink(path)
        if self.mounted:  # ours alone: nothing else pinned there meanwhile
            subprocess.run(["umount", BPFFS], capture_output=True)
            self.mounted = False
        elif self.made_dirs and os.path.isdir(PIN_DIR) and not os.listdir(PIN_DIR):
            for link in ("ip", "xdp"):
                path = os.path.join(BPFFS, link)
                if os.path.islink(path):
                    os.unlink(path)
            os.rmdir(PIN_DIR)
            os.rmdir(os.path.dirname(PIN_DIR))
