"""The link sampler's netlink reading of root HTB qdiscs, against what
`tc -s -j qdisc show` reads in the same namespace (root: a namespace of
its own, gone when its holder process ends)."""

import json
import os
import socket
import subprocess
import time

import pytest

from testbed.emulation import netlink


def in_ns(path, *argv):
    return subprocess.run(
        ["nsenter", f"--net={path}", *argv], check=True, capture_output=True, text=True
    ).stdout


def tc_reading(path):
    return {
        q["dev"]: (q["bytes"], q["backlog"], q["drops"])
        for q in json.loads(in_ns(path, "tc", "-s", "-j", "qdisc", "show"))
        if q["kind"] == "htb" and q.get("root")
    }


def test_netlink_reads_a_root_htb_as_tc_does_while_it_queues_and_drops():
    if os.geteuid() != 0:
        pytest.skip("making a network namespace needs root")
    holder = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        path = f"/proc/{holder.pid}/ns/net"
        home = os.stat("/proc/self/ns/net").st_ino
        deadline = time.monotonic() + 5
        while os.stat(path).st_ino == home:  # until unshare has made its namespace
            assert time.monotonic() < deadline, "unshare made no network namespace"
            time.sleep(0.01)
        in_ns(path, "ip", "link", "set", "lo", "up")
        # 100 kbit/s out of loopback, a 5-packet queue: a burst queues and drops
        in_ns(path, "tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1")
        in_ns(
            path,
            "tc",
            "class",
            "add",
            "dev",
            "lo",
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            "100kbit",
        )
        in_ns(path, "tc", "qdisc", "add", "dev", "lo", "parent", "1:1", "pfifo", "limit", "5")
        space = netlink.Namespace(path)
        try:
            assert space.root_qdisc_counters() == {"lo": (0, 0, 0)} == tc_reading(path)
            # a receiver, so that no ICMP error joins the queue after the burst
            receiver, sender = netlink.in_namespace(
                path, lambda: [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
            )
            with receiver, sender:
                receiver.bind(("127.0.0.1", 0))
                for _ in range(40):
                    sender.sendto(bytes(1000), receiver.getsockname())
                before = space.root_qdisc_counters()["lo"]
                by_tc = tc_reading(path)["lo"]
                after = space.root_qdisc_counters()["lo"]
        finally:
            space.close()
        # bytes only grow and the queue only drains once the burst is in
        assert 0 < before[0] <= by_tc[0] <= after[0]
        assert before[1] >= by_tc[1] >= after[1] and before[1] > 0
        assert before[2] == by_tc[2] == after[2] > 0
    finally:
        holder.kill()
        holder.wait()
