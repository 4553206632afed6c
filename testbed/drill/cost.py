"""What the emulation itself costs while a drill runs: CPU time of Open
vSwitch and the packets its switches forwarded (every packet that entered a
switch port counts once per switch it crosses: a packet-hop); the frames
the machine dropped outside any modeled queue, where the kernel counts
them: Open vSwitch's packet sockets that it did not read in time
(userspace datapath), and the per-CPU backlogs a frame crossing a veth
waits in; and the most bytes a switch port's socket held unread at any
sample (frames that waited for Open vSwitch rather than in a modeled
queue: a delay no real switch adds)."""

import os
import re

from testbed.emulation.capabilities import ovs_packet_sockets, ovs_pidfile, ovs_socket_values
from testbed.emulation.ledger import stat_fields


def _process_cpu_s(pid):
    """User + system CPU seconds of a process (fields 14 and 15 of its
    stat), or None when it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backlog_drops():
    """Frames dropped because a CPU's input backlog was full (the second
    column of /proc/net/softnet_stat, one row per CPU), machine-wide."""
    try:
        with open("/proc/net/softnet_stat") as fh:
            return sum(int(row.split()[1], 16) for row in fh if row.strip())
    except (OSError, IndexError, ValueError):
        return None


PACKET_SOCKETS = "/proc/net/packet"


def packet_socket_backlog(text, inodes=None):
    """{ifindex: bytes queued unread} summed over the packet sockets bound
    to each interface, from the text of /proc/net/packet (this network
    namespace's sockets: sk RefCnt Type Proto Iface R Rmem User Inode);
    only the sockets whose inode is in `inodes` when it is given."""
    out = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 9:
            continue
        try:
            iface, rmem, inode = int(fields[4]), int(fields[6]), int(fields[8])
        except ValueError:
            continue
        if inodes is None or inode in inodes:
            out[iface] = out.get(iface, 0) + rmem
    return out


_SOCKET_LINK = re.compile(r"socket:\[(\d+)\]")


def socket_inodes(pid):
    """The inodes of the sockets a process holds open (from its fd links;
    empty when it is gone). A capture's socket on a switch port is not
    Open vSwitch's and must not count as frames it left unread."""
    out = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for name in names:
        try:
            m = _SOCKET_LINK.fullmatch(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue
        if m:
            out.add(int(m.group(1)))
    return out


def _ifindex(dev):
    try:
        with open(f"/sys/class/net/{dev}/ifindex") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return None


def _delta(now, then):
    return None if now is None or then is None else now - then


def _rx_packets(dev):
    try:
        with open(f"/sys/class/net/{dev}/statistics/rx_packets") as fh:
            return int(fh.read())
    except OSError:
        return 0


class CostMeter:
    def __init__(self, switch_ports):
        self.switch_ports = list(switch_ports)
        self.pid = None
        self.first = None
        self.ifindex = {}  # ifindex -> switch port name, known once started
        self.held = {}  # switch port -> most bytes its socket held unread at a sample
        self.ovs_sockets = set()  # inodes of ovs-vswitchd's sockets, read at start
        self.sampled = False  # a sample saw an ovs-vswitchd socket on a switch port

    def sample(self):
        """Note what Open vSwitch's socket of each switch port holds unread
        now (called at the link sampler's rate; cheap: one proc file)."""
        if not self.ifindex or not self.ovs_sockets:
            return
        try:
            with open(PACKET_SOCKETS) as fh:
                backlog = packet_socket_backlog(fh.read(), self.ovs_sockets)
        except OSError:
            return
        for index, nbytes in backlog.items():
            name = self.ifindex.get(index)
            if name is None:
                continue
            self.sampled = True
            if nbytes > self.held.get(name, 0):
                self.held[name] = nbytes

    def _read(self):
        cpu = None
        if self.pid is not None:
            try:
                cpu = _process_cpu_s(self.pid)
            except (OSError, ValueError, IndexError):
                cpu = None
        # one socket per switch port for the run's life: their drops since start
        socket_drops = sum(ovs_socket_values(ovs_packet_sockets(), "d"))
        return cpu, sum(_rx_packets(d) for d in self.switch_ports), socket_drops, backlog_drops()

    def start(self):
        try:
            with open(ovs_pidfile()) as fh:
                self.pid = int(fh.read().strip())
        except (OSError, ValueError):
            self.pid = None
        self.ifindex = {i: d for d in self.switch_ports if (i := _ifindex(d)) is not None}
        # the userspace datapath opened one socket per port when the port was
        # added (before start); the kernel datapath has none on them
        self.ovs_sockets = socket_inodes(self.pid) if self.pid is not None else set()
        self.first = self._read()

    def stop(self):
        """What the emulation cost since start(): {"ovs_cpu_s", "switch_packet_hops",
        "ovs_socket_drops", "backlog_drops", "ovs_held_bytes" {switch port: most
        bytes held unread}, None on the kernel datapath} (None where it could
        not be read)."""
        cpu, packets, socket_drops, backlog = self._read()
        cpu0, packets0, socket_drops0, backlog0 = self.first
        cpu_s = _delta(cpu, cpu0)
        return {
            "ovs_cpu_s": None if cpu_s is None else round(cpu_s, 3),
            "switch_packet_hops": packets - packets0,
            "ovs_socket_drops": socket_drops - socket_drops0,
            "backlog_drops": _delta(backlog, backlog0),
            "ovs_held_bytes": dict(sorted(self.held.items())) if self.sampled else None,
        }
