"""Packet captures inside emulated hosts, for Wireshark/tshark.

tcpdump runs in the host's namespace on all its ports; the runner waits for
its "listening" line (an event, not a delay) before traffic starts.
"""

import os
import subprocess

from .procs import end, wait_for_line


class Capture:
    def __init__(self, fnet, host, out_dir, packets=1000, bpf="udp port 4791"):
        self.path = os.path.join(out_dir, f"capture-{host}.pcap")
        argv = ["tcpdump", "-i", "any", "-n", "-U", "-s", "0", "-c", str(packets), "-w", self.path, bpf]
        self.proc = fnet.popen_in(host, argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.host = host

    def wait_listening(self, timeout=10.0):
        line, seen = wait_for_line(self.proc.stderr, lambda l: "listening on" in l, timeout)
        if line is None:
            raise RuntimeError(f"tcpdump in {self.host} did not start: {seen.strip()[-200:]}")

    def stop(self):
        end(self.proc)
        return self.path if os.path.exists(self.path) else None
