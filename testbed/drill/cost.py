"""What the emulation itself costs while a drill runs: CPU time of Open
vSwitch and the packets its switches forwarded (every packet that entered a
switch port counts once per switch it crosses: a packet-hop)."""
import os

from testbed.emulation.ledger import stat_fields

OVS_PIDFILE = "/run/openvswitch/ovs-vswitchd.pid"


def _process_cpu_s(pid):
    """User + system CPU seconds of a process (fields 14 and 15 of its
    stat), or None when it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        return cpu, sum(_rx_packets(d) for d in self.switch_ports)

    def start(self):
        try:
            with open(OVS_PIDFILE) as fh:
                self.pid = int(fh.read().strip())
        except (OSError, ValueError):
            self.pid = None
        self.first = self._read()

    def stop(self):
        """{"ovs_cpu_s": float or None, "switch_packet_hops": int} since start()."""
        cpu, packets = self._read()
        cpu0, packets0 = self.first
        return {"ovs_cpu_s": None if cpu is None or cpu0 is None else round(cpu - cpu0, 3),
                "switch_packet_hops": packets - packets0}
