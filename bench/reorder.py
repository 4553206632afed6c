#!/usr/bin/env python3
"""Reordering benchmark: does a shaped veth keep a connection's frames in order?

A veth hands each frame to the backlog of the CPU that transmitted it. A
shaped qdisc is dequeued by whichever sender holds it, or by its timer's
softirq, so the frames of one connection can be put on two CPUs' backlogs
and leave in either order. A RoCE receiver takes that for loss. Receive
steering (RPS) by flow hash queues every frame of a connection on one CPU.

Per run, two namespaces joined by a veth pair (hpnlab-ro-a-<pid>,
hpnlab-ro-b-<pid>; interfaces hroa/hrob), an HTB of --rate on the sending
end, one UDP sender per CPU (each its own connection, pinned), and a
receiver counting frames that came after a higher sequence number of the
same connection. Each run is done each way --ways names, --runs times,
in turns: `off` (the backlogs), `rps` (steering on the receiving end) and
`napi` (the receiving end's GRO on, which makes the veth queue every frame
on one ring of its own and take them in with NAPI, in order, whichever CPU
sent them; the sending end's segmentation offloads off, without which the
veth takes the backlog path all the same). Fabrics use steering: NAPI
kept the order as well, but saved drills no CPU ("Frames taken in with
NAPI" in docs/numbers.md). Everything it made is removed at the end, also
on failure.

    sudo .venv/bin/python bench/reorder.py [--runs 3] [--seconds 15] [--ways off,rps,napi]
"""

import argparse
import os
import subprocess
import sys
import textwrap

SENDER = textwrap.dedent("""
    import socket, struct, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    end, seq, pad = time.monotonic() + float(sys.argv[1]), 0, bytes(1392)
    while time.monotonic() < end:
        try:
            s.sendto(struct.pack("!Q", seq) + pad, ("10.99.0.2", 9000))
            seq += 1
        except OSError:
            pass          # the qdisc is full: the HTB drops, as it would
        if seq % 20 == 0:
            time.sleep(0.0002)
""")

RECEIVER = textwrap.dedent("""
    import socket, struct
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)   # SO_RCVBUFFORCE: past rmem_max
    s.bind(("10.99.0.2", 9000))
    print("ready", flush=True)
    s.settimeout(3)
    highest, late, n = {}, 0, 0
    try:
        while True:
            data, peer = s.recvfrom(2048)
            seq = struct.unpack("!Q", data[:8])[0]
            n += 1
            if seq < highest.get(peer, -1):
                late += 1
            else:
                highest[peer] = seq
    except socket.timeout:
        pass
    print(n, late, flush=True)
""")


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


WAYS = ("off", "rps", "napi")


def one_run(ns_a, ns_b, rate, seconds, way):
    """(frames received, frames that came late) for one run."""
    sh("ip", "link", "add", "hroa", "netns", ns_a, "type", "veth", "peer", "name", "hrob", "netns", ns_b)
    try:
        sh("ip", "-n", ns_a, "addr", "add", "10.99.0.1/24", "dev", "hroa")
        sh("ip", "-n", ns_b, "addr", "add", "10.99.0.2/24", "dev", "hrob")
        for ns, dev in ((ns_a, "hroa"), (ns_b, "hrob")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        in_a = ("ip", "netns", "exec", ns_a)
        sh(*in_a, *"tc qdisc add dev hroa root handle 1: htb default 1 r2q 1000".split())
        sh(*in_a, *"tc class add dev hroa parent 1: classid 1:1 htb rate".split(), rate)
        if way == "napi":
            sh("ip", "netns", "exec", ns_a, "ethtool", "-K", "hroa", "tso", "off", "gso", "off")
            sh("ip", "netns", "exec", ns_b, "ethtool", "-K", "hrob", "gro", "on")
        if way == "rps":
            mask = format((1 << (os.cpu_count() or 1)) - 1, "x")
            # Only a sysfs mounted from inside the namespace shows its interfaces.
            script = (
                'd=$(mktemp -d); mount -t sysfs hpnlab-sysfs "$d"; '
                f'echo {mask} > "$d"/class/net/hrob/queues/rx-0/rps_cpus; umount "$d"; rmdir "$d"'
            )
            sh("ip", "netns", "exec", ns_b, "unshare", "-m", "sh", "-ec", script)
        rx = subprocess.Popen(
            ["ip", "netns", "exec", ns_b, sys.executable, "-I", "-c", RECEIVER],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            if rx.stdout.readline().strip() != "ready":
                raise RuntimeError("the receiver did not start")
            # Resolve the neighbour first: frames held while ARP resolves are
            # released behind ones sent just after, which is not this effect.
            sh("ip", "netns", "exec", ns_a, "ping", "-c", "1", "-W", "2", "10.99.0.2")
            senders = [
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns_a,
                        "taskset",
                        "-c",
                        str(cpu),
                        sys.executable,
                        "-I",
                        "-c",
                        SENDER,
                        str(seconds),
                    ]
                )
                for cpu in range(os.cpu_count() or 1)
            ]
            for p in senders:
                p.wait()
            received, late = map(int, rx.stdout.readline().split())
        finally:
            rx.kill()
            rx.wait()
        return received, late
    finally:
        sh("ip", "-n", ns_a, "link", "del", "hroa")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rate", default="200mbit", help="the HTB's rate (tc's units)")
    ap.add_argument("--ways", default="off,rps", help=f"comma-separated, of {', '.join(WAYS)}")
    args = ap.parse_args()
    ways = args.ways.split(",")
    if not ways or any(w not in WAYS for w in ways):
        choices = ", ".join(WAYS)
        sys.exit(f"bench/reorder.py: --ways: expected some of {choices}, comma-separated; got {args.ways!r}")
    if os.geteuid() != 0:
        sys.exit("bench/reorder.py: needs root (it makes namespaces)")
    if (os.cpu_count() or 1) < 2:
        sys.exit("bench/reorder.py: needs two CPUs (one CPU cannot reorder)")
    ns_a, ns_b = f"hpnlab-ro-a-{os.getpid()}", f"hpnlab-ro-b-{os.getpid()}"
    made = []
    try:
        for ns in (ns_a, ns_b):
            sh("ip", "netns", "add", ns)
            made.append(ns)
        print(f"{'run':>3}  {'way':>5}  {'received':>9}  {'late':>5}")
        late = {way: [] for way in ways}
        for i in range(1, args.runs + 1):
            for way in ways:
                received, n = one_run(ns_a, ns_b, args.rate, args.seconds, way)
                late[way].append(n)
                print(f"{i:>3}  {way:>5}  {received:>9}  {n:>5}", flush=True)
        for way in ways:
            print(
                f"{way}: {min(late[way])}-{max(late[way])} "
                f"frames late per run ({args.runs} runs of {args.seconds:g} s)"
            )
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


if __name__ == "__main__":
    main()
