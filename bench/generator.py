#!/usr/bin/env python3
"""Generator benchmark: hpnlab's RoCE frame sender versus scapy.

The traffic agents cannot afford scapy in their send loop. A FrameTemplate
(traffic/roce.py) builds a RoCEv2 frame once with scapy; per packet the
agent only patches the BTH opcode, the ackreq bit + PSN and the ICRC in
place and writes the bytearray to a raw AF_PACKET socket that stays open
(traffic/nic.py, Port). This script measures that path against scapy
doing the same job, all in one run:

  hpnlab        FrameTemplate with a 4096-byte payload, DSCP 26, ECT(0);
                per packet the same work as OutFlow.frame + Port.send
                (opcode FIRST/MIDDLE/LAST per 256-packet message, ackreq on
                every 8th and the last packet, sock.send), unpaced.
  scapy L2 sock the same frame as a scapy packet, sent through one reused
                conf.L2socket; per packet the BTH fields change, so scapy
                serializes the whole packet again (ICRC included). The
                packet object is reused rather than rebuilt from scratch,
                which favours scapy: the ratio is a lower bound.
  scapy sendp   sendp() per packet, which opens a socket each time (only
                a few packets: it is very slow; --sendp-packets 0 skips it).

Everything runs inside a network namespace of its own (hpnlab-bench-<pid>)
over a veth pair hbga -> hbgb (MTU 9000, IPv6 off so nothing else is on the
wire), pinned to one CPU (--cpu). The kernel's receive work for each frame
runs on that same CPU, so "one core" is the whole cost. Packets count as
sent only once the receiving end saw them: rx_packets of hbgb is read
before and after every method, and packets/s is delivered / seconds.

The namespace and its veth pair are removed at the end, also on failure.
Targets: hpnlab >= 100,000 packets/s and >= 50x scapy through a reused L2
socket; the exit status is 0 only if both are met. Needs root.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

TX_IF, RX_IF = "hbga", "hbgb"
MTU = 9000
PAYLOAD = 4096
DSCP = 26
SRC_IP, DST_IP = "10.11.1.1", "10.11.2.1"
SPORT, DQPN = 49733, 0x30002
MESSAGE_PACKETS = 256  # a 1 MiB transfer: FIRST, MIDDLE..., LAST
TARGET_PPS = 100_000
TARGET_RATIO = 50.0


# --- inside the namespace ---------------------------------------------------


def link_stat(ifname, name):
    with open(f"/sys/class/net/{ifname}/statistics/{name}") as f:
        return int(f.read())


def link_mac(ifname):
    with open(f"/sys/class/net/{ifname}/address") as f:
        return f.read().strip()


def settled(read, timeout=1.0):
    """A counter's value once it stops moving (frames still in flight through
    the veth land within microseconds): poll until two reads agree."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        time.sleep(0.001)
        now = read()
        if now == last:
            return now
        last = now
    return last


class Flow:
    """The per-packet decisions of traffic.transfers.OutFlow, for one endless
    stream of MESSAGE_PACKETS-packet messages."""

    def __init__(self, tpl):
        from traffic import roce

        self.tpl = tpl
        self.first, self.middle, self.last = roce.SEND_FIRST, roce.SEND_MIDDLE, roce.SEND_LAST

    def opcode(self, psn):
        i = psn % MESSAGE_PACKETS
        if i == 0:
            return self.first
        return self.last if i == MESSAGE_PACKETS - 1 else self.middle

    def frame(self, psn):
        i = psn % MESSAGE_PACKETS
        ackreq = i == MESSAGE_PACKETS - 1 or i % 8 == 7
        return self.tpl.frame(psn, opcode=self.opcode(psn), ackreq=ackreq)


def scapy_packet(src_mac, dst_mac):
    """The template's frame as a scapy packet (psn/opcode/ackreq set per send)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    from traffic import roce

    return (
        Ether(src=src_mac, dst=dst_mac)
        / IP(src=SRC_IP, dst=DST_IP, tos=DSCP << 2 | roce.ECT0, id=0, flags="DF", ttl=64)
        / UDP(sport=SPORT, dport=roce.ROCE_PORT, chksum=0)
        / BTH(opcode=roce.SEND_FIRST, dqpn=DQPN, psn=0)
        / Raw(bytes(PAYLOAD))
    )


def set_bth(bth, flow, psn):
    i = psn % MESSAGE_PACKETS
    bth.opcode = flow.opcode(psn)
    bth.ackreq = 1 if i == MESSAGE_PACKETS - 1 or i % 8 == 7 else 0
    bth.psn = psn


class Counted:
    """Wall time, CPU time and frames delivered to the receiving veth end."""

    def __enter__(self):
        self.rx0 = link_stat(RX_IF, "rx_packets")
        self.drop0 = link_stat(TX_IF, "tx_dropped")
        self.cpu0 = os.times()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        cpu = os.times()
        self.cpu = (cpu.user - self.cpu0.user) + (cpu.system - self.cpu0.system)
        self.delivered = settled(lambda: link_stat(RX_IF, "rx_packets")) - self.rx0
        self.dropped = link_stat(TX_IF, "tx_dropped") - self.drop0

    def result(self, method, sent, errors=0):
        return {
            "method": method,
            "sent": sent,
            "errors": errors,
            "delivered": self.delivered,
            "dropped": self.dropped,
            "seconds": self.seconds,
            "cpu_s": self.cpu,
        }


def run_hpnlab(flow, count, budget_s):
    import socket

    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((TX_IF, 0))
    try:
        for psn in range(1000):  # warm-up, not counted
            sock.send(flow.frame(psn))
        psn = errors = 0
        with Counted() as c:
            deadline = time.perf_counter() + budget_s
            while psn < count:  # one message per pass
                end = min(psn + MESSAGE_PACKETS, count)
                for p in range(psn, end):
                    try:
                        sock.send(flow.frame(p))  # as Port.send, minus the pacer
                    except OSError:
                        errors += 1
                psn = end
                if time.perf_counter() >= deadline:
                    break
        return c.result("hpnlab (template, raw socket)", psn - errors, errors)
    finally:
        sock.close()


def run_scapy_l2(pkt, flow, count, budget_s):
    from scapy.config import conf
    from scapy.contrib.roce import BTH

    bth = pkt[BTH]
    sock = conf.L2socket(iface=TX_IF)
    try:
        for psn in range(20):  # warm-up, not counted
            set_bth(bth, flow, psn)
            sock.send(pkt)
        sent = 0
        with Counted() as c:
            deadline = time.perf_counter() + budget_s
            while sent < count and time.perf_counter() < deadline:
                set_bth(bth, flow, sent)
                sock.send(pkt)
                sent += 1
        return c.result("scapy, reused L2 socket", sent)
    finally:
        sock.close()


def run_scapy_sendp(pkt, flow, count, budget_s):
    from scapy.contrib.roce import BTH
    from scapy.sendrecv import sendp

    bth = pkt[BTH]
    sent = 0
    with Counted() as c:
        deadline = time.perf_counter() + budget_s
        while sent < count and time.perf_counter() < deadline:
            set_bth(bth, flow, sent)
            sendp(pkt, iface=TX_IF, verbose=False)
            sent += 1
    return c.result("scapy, sendp() per packet", sent)


def inner(args):
    """Runs inside the namespace; prints one JSON object."""
    os.sched_setaffinity(0, {args.cpu})
    from scapy.contrib.roce import BTH

    from traffic import roce

    src_mac, dst_mac = link_mac(TX_IF), link_mac(RX_IF)
    tpl = roce.FrameTemplate(src_mac, dst_mac, SRC_IP, DST_IP, SPORT, DQPN, DSCP, PAYLOAD)
    flow = Flow(tpl)
    pkt = scapy_packet(src_mac, dst_mac)
    # Both senders must put the same bytes on the wire (ICRC included).
    same = True
    for psn in (0, 7, 100, MESSAGE_PACKETS - 1):
        set_bth(pkt[BTH], flow, psn)
        same = same and bytes(pkt) == bytes(flow.frame(psn))
    results = [
        run_hpnlab(flow, args.packets, args.seconds),
        run_scapy_l2(pkt, flow, args.scapy_packets, args.scapy_seconds),
    ]
    if args.sendp_packets > 0:
        results.append(run_scapy_sendp(pkt, flow, args.sendp_packets, args.scapy_seconds))
    print(json.dumps({"cpu": args.cpu, "frame_len": len(tpl.buf), "same_bytes": same, "results": results}))


# --- outside: namespace, veth pair, report ---------------------------------


def ip(*argv, check=True):
    return subprocess.run(["ip", *argv], check=check, capture_output=True, text=True)


def netns_exists(ns):
    return ns in ip("netns", "list", check=False).stdout.split()


def setup(ns):
    ip(
        "netns",
        "exec",
        ns,
        "sysctl",
        "-qw",
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    )
    ip(
        "-n",
        ns,
        "link",
        "add",
        TX_IF,
        "mtu",
        str(MTU),
        "type",
        "veth",
        "peer",
        "name",
        RX_IF,
        "mtu",
        str(MTU),
    )
    ip("-n", ns, "link", "set", TX_IF, "up")
    ip("-n", ns, "link", "set", RX_IF, "up")


def teardown(ns):
    """Remove our veth pair and namespace, and wait until the namespace is gone."""
    ip("-n", ns, "link", "del", TX_IF, check=False)
    ip("netns", "delete", ns, check=False)
    deadline = time.monotonic() + 10
    while netns_exists(ns):
        if time.monotonic() > deadline:
            print(
                f"bench: namespace {ns} still present; remove it with: ip netns delete {ns}", file=sys.stderr
            )
            return
        time.sleep(0.1)


def run_inside(ns, args):
    cmd = [
        "ip",
        "netns",
        "exec",
        ns,
        sys.executable,
        os.path.abspath(__file__),
        "--inner",
        "--cpu",
        str(args.cpu),
        "--packets",
        str(args.packets),
        "--scapy-packets",
        str(args.scapy_packets),
        "--sendp-packets",
        str(args.sendp_packets),
        "--seconds",
        str(args.seconds),
        "--scapy-seconds",
        str(args.scapy_seconds),
    ]
    limit = args.seconds + 2 * args.scapy_seconds + 120
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    if proc.returncode != 0:
        raise SystemExit(f"bench: the sender inside {ns} failed:\n{proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(out):
    frame_len = out["frame_len"]
    rows = out["results"]
    print(
        f"frames: {frame_len} bytes (4096-byte RoCEv2 payload), CPU {out['cpu']}, "
        f"scapy and hpnlab bytes identical: {'yes' if out['same_bytes'] else 'NO'}"
    )
    print()
    print(
        f"{'method':<32} {'sent':>8} {'delivered':>9} {'seconds':>8} {'cpu/wall':>8} "
        f"{'packets/s':>10} {'Gbit/s':>7}"
    )
    for r in rows:
        ok = min(r["sent"], r["delivered"])
        r["pps"] = ok / r["seconds"] if r["seconds"] > 0 else 0.0
        print(
            f"{r['method']:<32} {r['sent']:>8} {r['delivered']:>9} {r['seconds']:>8.3f} "
            f"{r['cpu_s'] / r['seconds']:>8.0%} {r['pps']:>10,.0f} "
            f"{r['pps'] * frame_len * 8 / 1e9:>7.2f}"
        )
    hpn, l2 = rows[0], rows[1]
    print()
    print(
        f"hpnlab delivered/sent: {hpn['delivered']}/{hpn['sent']}"
        f" (send errors {hpn['errors']}, veth tx drops {hpn['dropped']})"
    )
    ratio = hpn["pps"] / l2["pps"] if l2["pps"] > 0 else float("inf")
    print(f"ratio hpnlab / scapy L2 socket: {ratio:,.1f} (target >= {TARGET_RATIO:.0f})")
    print(f"hpnlab on one core: {hpn['pps']:,.0f} pps (target >= {TARGET_PPS:,})")
    return ratio >= TARGET_RATIO and hpn["pps"] >= TARGET_PPS and out["same_bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=200_000, help="hpnlab packets (default 200000)")
    ap.add_argument("--seconds", type=float, default=20.0, help="time budget of the hpnlab run (default 20)")
    ap.add_argument("--scapy-packets", type=int, default=3000, help="scapy L2-socket packets (default 3000)")
    ap.add_argument(
        "--scapy-seconds", type=float, default=3.0, help="time budget of each scapy run (default 3)"
    )
    ap.add_argument(
        "--sendp-packets", type=int, default=100, help="scapy sendp() packets, 0 to skip (default 100)"
    )
    ap.add_argument(
        "--cpu", type=int, default=None, help="CPU to pin the senders to (default: the highest one allowed)"
    )
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit(
            "bench/generator.py: needs root (it creates a network namespace and sends on raw sockets)"
        )
    allowed = os.sched_getaffinity(0)
    if args.cpu is None:
        args.cpu = max(allowed)
    elif args.cpu not in allowed:
        raise SystemExit(f"bench: --cpu {args.cpu} is not one of {sorted(allowed)}")
    if min(args.packets, args.scapy_packets) < 1:
        raise SystemExit("bench: --packets and --scapy-packets must be >= 1")
    if args.inner:
        return inner(args)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally below runs
    sys.exit(0 if report(measure(args)) else 1)


def measure(args):
    """The senders' results, run in a namespace of their own that is
    removed afterwards, also on failure."""
    ns = f"hpnlab-bench-{os.getpid()}"
    if netns_exists(ns):
        raise SystemExit(f"bench: namespace {ns} already exists; not touching it")
    created = False
    try:
        ip("netns", "add", ns)
        created = True
        setup(ns)
        return run_inside(ns, args)
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"bench: {' '.join(e.cmd)}: {e.stderr.strip()}") from None
    finally:
        if created:
            teardown(ns)


def reference_us_per_frame(packets=100_000, seconds=5.0, cpu=None):
    """The reference other CPU figures are reported against (they move
    threefold between machines of one kind; a ratio to this, measured in
    the same run on the same machine, does not): microseconds of one core
    per 4154-byte RoCE frame that hpnlab's raw sender puts on a veth pair
    and the kernel delivers to its other end."""
    args = argparse.Namespace(
        cpu=max(os.sched_getaffinity(0)) if cpu is None else cpu,
        packets=packets,
        seconds=seconds,
        scapy_packets=1,
        scapy_seconds=1.0,
        sendp_packets=0,
    )
    hpn = measure(args)["results"][0]
    delivered = min(hpn["sent"], hpn["delivered"])
    return 1e6 * hpn["seconds"] / delivered if delivered else float("nan")


if __name__ == "__main__":
    main()
