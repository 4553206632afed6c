"""The host's NIC as the traffic agent drives it: one raw socket per port,
paced at the port's line rate, and the kernel's choice of port for a flow."""
import socket

from . import roce, transport

PORT_BURST = 4              # frames of catch-up credit, like HTB's burst behind it


class PortPicker:
    """Which NIC port a flow leaves by: the kernel's multipath choice for
    its 5-tuple (fib_multipath_hash_policy=1), or a pinned port."""

    def __init__(self, ports):
        from pyroute2 import IPRoute
        self.ipr = IPRoute()
        self.ports = list(ports)
        self.index = {}
        for link in self.ipr.get_links():
            self.index[link["index"]] = link.get_attr("IFLA_IFNAME")

    def pick(self, src_ip, dst_ip, sport, pinned=None):
        if pinned is not None:
            return self.ports[pinned]
        try:
            msgs = self.ipr.route("get", dst=dst_ip, src=src_ip, sport=sport,
                                  dport=roce.ROCE_PORT, ip_proto=17)
            name = self.index.get(msgs[0].get_attr("RTA_OIF"))
        except Exception:
            return None  # no route right now (every port down): try again later
        return name if name in self.ports else None

    def close(self):
        self.ipr.close()


class Port:
    def __init__(self, ifname, rate_bps):
        self.ifname = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.sock.bind((ifname, 0))
        # The port's line-rate shaper may catch up a few frames after the
        # loop woke late (the host's HTB queue behind it absorbs them).
        self.pacer = transport.Pacer(rate_bps, burst_packets=PORT_BURST)
        self.flows = []
        self.rr = 0
        self.errors = 0

    def send(self, frame, now):
        try:
            self.sock.send(frame)
        except OSError:
            self.errors += 1  # port down: the flow will be moved at its next route refresh
            return False
        self.pacer.sent(len(frame), now)
        return True
