"""Whether every host reaches every NIC of its rail out of each of its
ports, before any traffic is sent: a fabric that cannot is not measured."""

import json
import os
import sys

from .hostrun import first_failure, run_in_hosts

PROBER = os.path.join(os.path.dirname(__file__), "probe.py")
# Echo requests the whole fabric has in flight at once, shared out over the
# hosts (each prober keeps its share in flight, at least 4): HPN-mini's
# hosts still send all their pairs at once, a 128-host fabric is not
# offered more than its switches forward (see probe.py).
IN_FLIGHT = 256
MIN_WINDOW = 4


def window(hosts: int) -> int:
    """Pairs one host's prober keeps in flight when `hosts` probe at once."""
    return max(MIN_WINDOW, IN_FLIGHT // max(1, hosts))


def check(fabric, ns_argv, timeout: float = 5.0) -> dict:
    """Every host to every other NIC of its rail, out of each of its
    ports, all hosts at once. Returns {host: {"ifname:ip": rtt_ms|None}}."""
    commands = {}
    hosts = fabric.hosts()
    per_host = window(len(hosts))
    most = 0  # pairs of the host with the most
    for h in hosts:
        pairs = [
            f"{port}:{dst.ip}"
            for nic in fabric.nics_of(h.name)
            for port in nic.ports
            for dst in fabric.nics
            if dst.host != h.name and dst.rail == nic.rail
        ]
        most = max(most, len(pairs))
        # -I: the prober imports nothing from the caller's folder or environment
        commands[h.name] = ([sys.executable, "-I", PROBER, str(timeout), str(per_host)] + pairs, None)
    # A prober ends once each of its pairs has answered or had `timeout` s of
    # tries; in a fabric that answers nothing, `timeout` s after it starts.
    # The bound below only ends one that hangs: it allows each window's worth
    # of pairs ten seconds. Starting one interpreter per host takes time of
    # its own: the whole check took 3.4-4.4 s for 8 hosts in a VM under
    # software emulation, 0.5 s natively.
    ran = run_in_hosts(ns_argv, commands, timeout + 60 + 10 * most / per_host)
    failed = first_failure(ran, "the reachability probe")
    if failed:
        raise RuntimeError(failed)
    return {host: json.loads(r.stdout) for host, r in ran.items()}


def unreachable(reach: dict) -> list[str]:
    """'host ifname:ip' for every pair of check() with no reply."""
    return [f"{h} {pair}" for h, d in reach.items() for pair, rtt in d.items() if rtt is None]
