"""Whether every host reaches every NIC of its rail out of each of its
ports, before any traffic is sent: a fabric that cannot is not measured."""

import json
import os
import sys

from .hostrun import first_failure, run_in_hosts

PROBER = os.path.join(os.path.dirname(__file__), "probe.py")


def check(fabric, ns_argv, timeout: float = 5.0) -> dict:
    """Every host to every other NIC of its rail, out of each of its
    ports, all hosts at once. Returns {host: {"ifname:ip": rtt_ms|None}}."""
    commands = {}
    for h in fabric.hosts():
        pairs = [
            f"{port}:{dst.ip}"
            for nic in fabric.nics_of(h.name)
            for port in nic.ports
            for dst in fabric.nics
            if dst.host != h.name and dst.rail == nic.rail
        ]
        # -I: the prober imports nothing from the caller's folder or environment
        commands[h.name] = ([sys.executable, "-I", PROBER, str(timeout)] + pairs, None)
    # Each prober ends itself `timeout` s after it starts probing; this bounds
    # one that hangs. Starting one interpreter per host takes time of its
    # own: the whole check took 3.4-4.4 s for 8 hosts in a VM under software
    # emulation (10.2 s while the probers resent every 100 ms), 0.5 s natively.
    ran = run_in_hosts(ns_argv, commands, timeout + 60)
    failed = first_failure(ran, "the reachability probe")
    if failed:
        raise RuntimeError(failed)
    return {host: json.loads(r.stdout) for host, r in ran.items()}


def unreachable(reach: dict) -> list[str]:
    """'host ifname:ip' for every pair of check() with no reply."""
    return [f"{h} {pair}" for h, d in reach.items() for pair, rtt in d.items() if rtt is None]
