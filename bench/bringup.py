#!/usr/bin/env python3
"""Bring-up benchmark: hpnlab's default fabric versus plain Mininet.

  hpnlab : build HPN-mini (8 OVS switches, 8 hosts, 24 HTB-shaped links),
           start the controller, wait until every switch acknowledged its
           routes, configure hosts, and verify that every host reaches every
           other over each of its ports (112 host-port pairs).
  mininet: Mininet builds and starts a graph of the same size (same switch
           class and datapath, same link count, TCLink shaping) and nothing
           else: no controller, no routes, no reachability.

Each is run --runs times, alternating; the medians and their ratio are
printed (target: ratio <= 2). Needs root and Open vSwitch.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from testbed.emulation.realize import FabricNet  # noqa: E402
from testbed.fabric.build import build_fabric  # noqa: E402


def time_hpnlab():
    fabric = build_fabric({}, name="bench")
    with tempfile.TemporaryDirectory() as run_dir:
        t0 = time.monotonic()
        with FabricNet(fabric, run_dir, log=lambda m: None) as fnet:
            reach = fnet.check_reachability()
            elapsed = time.monotonic() - t0
            bad = [p for d in reach.values() for p, rtt in d.items() if rtt is None]
            if bad:
                raise SystemExit(f"bench: {len(bad)} pairs unreachable, e.g. {bad[0]}")
    return elapsed


def time_plain_mininet(datapath):
    """The same graph in plain Mininet. Names carry a 'bm' prefix so they
    never collide with a fabric's, and Mininet's own stop() removes exactly
    the nodes and links it made (never its global cleanup)."""
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch

    setLogLevel("error")
    fabric = build_fabric({}, name="bench")
    names = {n.name: f"bm{i}" for i, n in enumerate(fabric.nodes.values())}
    t0 = time.monotonic()
    net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, waitConnected=False)
    try:
        for sw in fabric.switches():
            net.addSwitch(
                names[sw.name],
                cls=OVSSwitch,
                datapath=datapath,
                dpid=f"{0xBE00 + sw.dpid:016x}",
                failMode="secure",
                protocols="OpenFlow13",
            )
        for h in fabric.hosts():
            net.addHost(names[h.name])
        for link in fabric.links:
            net.addLink(names[link.a.node], names[link.b.node], cls=TCLink, bw=fabric.scaled_mbit(link))
        net.build()
        net.start()
        return time.monotonic() - t0
    finally:
        net.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: needs root")
    from testbed.emulation import capabilities

    datapath = capabilities.datapath(capabilities.probe())
    ours, plain = [], []
    for i in range(args.runs):
        plain.append(time_plain_mininet(datapath))
        ours.append(time_hpnlab())
        print(f"run {i + 1}: plain Mininet {plain[-1]:.2f} s, hpnlab {ours[-1]:.2f} s", flush=True)
    p, o = statistics.median(plain), statistics.median(ours)
    print(f"\n{datapath} datapath, 8 switches, 8 hosts, 24 shaped links, median of {args.runs}:")
    print(f"  plain Mininet build + start:                         {p:.2f} s")
    print(f"  hpnlab up incl. controller, routes, all-pairs check: {o:.2f} s")
    print(f"  ratio hpnlab / plain Mininet: {o / p:.2f} (target <= 2)")
    return 0 if o / p <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
