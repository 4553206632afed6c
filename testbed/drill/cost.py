"""What the emulation itself costs while a drill runs: CPU time of Open
vSwitch and the packets its switches forwarded (every packet that entered a
switch port counts once per switch it crosses: a packet-hop); and the
frames the machine dropped outside any modeled queue, where the kernel
counts them: Open vSwitch's packet sockets that it did not read in time
(userspace datapath), and the per-CPU backlogs a frame crossing a veth
waits in."""

import os

from testbed.emulation.capabilities import ovs_packet_sockets, ovs_socket_values
from testbed.emulation.ledger import stat_fields

OVS_PIDFILE = "/run/openvswitch/ovs-vswitchd.pid"


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
            with open(OVS_PIDFILE) as fh:
                self.pid = int(fh.read().strip())
        except (OSError, ValueError):
            self.pid = None
        self.first = self._read()

    def stop(self):
        """What the emulation cost since start(): {"ovs_cpu_s", "switch_packet_hops",
        "ovs_socket_drops", "backlog_drops"} (None where it could not be read)."""
        cpu, packets, socket_drops, backlog = self._read()
        cpu0, packets0, socket_drops0, backlog0 = self.first
        cpu_s = _delta(cpu, cpu0)
        return {
            "ovs_cpu_s": None if cpu_s is None else round(cpu_s, 3),
            "switch_packet_hops": packets - packets0,
            "ovs_socket_drops": socket_drops - socket_drops0,
            "backlog_drops": _delta(backlog, backlog0),
        }
