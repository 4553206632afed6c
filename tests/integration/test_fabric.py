"""The default HPN-mini fabric comes up, every host reaches every other over
each of its ports, links are shaped, and teardown leaves nothing behind."""

import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from testbed.cli.common import NOT_RUN
from testbed.drill.iperf import IperfFlows
from testbed.emulation import capabilities, ledger, ovs_pacing, plans
from testbed.emulation.realize import FabricNet
from testbed.fabric.build import build_fabric
from traffic.iperf import PairSpec


def test_up_all_pairs_reachable_and_shaped(tmp_path, leak_check):
    fabric = build_fabric({}, name="it-reach")
    with FabricNet(fabric, str(tmp_path)) as fnet:
        reach = fnet.check_reachability()
        pairs = [(h, p) for h, d in reach.items() for p, rtt in d.items()]
        assert len(pairs) == 8 * 2 * 7
        assert [p for p in pairs if reach[p[0]][p[1]] is None] == []
        # Every port is shaped at the scaled rate (200 Gbit / 5000 = 40 Mbit).
        # (this iproute2 prints HTB classes as text only, even with -j)
        q = subprocess.run(
            ["tc", "class", "show", "dev", "t0r0k0-e1"], capture_output=True, text=True, check=True
        )
        assert "htb 1:1 root" in q.stdout and "rate 40Mbit" in q.stdout
        q = fnet.run_in("s0h0", ["tc", "class", "show", "dev", "s0h0-n0p1"])
        assert "rate 40Mbit" in q.stdout
        # Proxy ARP answered with the destination NIC's MAC on both ports.
        neigh = fnet.run_in("s0h0", ["ip", "-j", "neigh", "show", "10.0.1.1"]).stdout
        macs = {n["lladdr"] for n in json.loads(neigh)}
        assert macs == {fabric.nic_by_ip("10.0.1.1").mac}
        # The userspace datapath's pacer is told this fabric's gap while it runs.
        gap_file = capabilities.ovs_pass_gap_file()
        if fnet.datapath == "user":
            with open(gap_file) as fh:
                assert int(fh.read()) == ovs_pacing.pass_gap_us(fabric) == 1638
    assert not os.path.exists(gap_file)


def _congestion_controls(fnet, host, timeout=10.0):
    """The congestion control algorithms of the host's established TCP
    connections that carry data (`ss -ti`), once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        out = fnet.run_in(host, ["ss", "-Htin", "state", "established"]).stdout
        # each connection's details are on a line of their own, indented,
        # the algorithm first; iperf3's control connections carry a few bytes
        infos = [line.split() for line in out.splitlines() if line[:1].isspace()]
        found = {
            fields[0]
            for fields in infos
            if any(f.startswith("bytes_acked:") and int(f.split(":")[1]) > 100000 for f in fields)
        }
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_nic_spreads_flows_over_both_ports(tmp_path, leak_check):
    fabric = build_fabric({}, name="it-spread")
    with FabricNet(fabric, str(tmp_path)) as fnet:
        before = _tx_bytes(fnet, "s0h0")
        pairs = [PairSpec("s0h0", f"s1h{i}", f"10.0.1.{i + 1}", 2, 0.0, 5301 + i) for i in range(4)]
        flows = IperfFlows(fnet, pairs, 3, str(tmp_path))
        try:
            flows.start_servers()
            t0 = time.monotonic()
            for p in pairs:
                flows.start_client(p, t0)
            # The connections run the congestion control hpnlab sets, not the machine's default.
            assert _congestion_controls(fnet, "s0h0") == {"cubic"}
            # Their host's default, which they ran until iperf3 switched them, is
            # CUBIC or Reno where allowed, neither of which paces (`ss` does not
            # show whether a socket is paced, so this reads the setting).
            default = fnet.run_in("s0h0", ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip()
            allowed = fnet.run_in("s0h0", ["sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control"]).stdout
            assert default == plans.host_tcp_default(allowed.split()) != "bbr", (default, allowed)
            assert flows.wait(timeout=20) == []
        finally:
            flows.stop()
        after = _tx_bytes(fnet, "s0h0")
        # Each stream's port as the kernel hashes its 5-tuple, read from the
        # kernel: the two streams of every pair leave by different ports.
        ports_of = {}
        for p in pairs:
            report = json.loads((tmp_path / "iperf3" / f"client-{p.src}-{p.dst}-{p.port}.json").read_text())
            local = [c["local_port"] for c in report["start"]["connected"]]
            assert local == [flows.cports[p], flows.cports[p] + 1], (p, local)
            ports_of[p.dst] = sorted(_kernel_port(fnet, "s0h0", p.dst_ip, sport, p.port) for sport in local)
        assert all(got == ["s0h0-n0p0", "s0h0-n0p1"] for got in ports_of.values()), ports_of
    sent = {p: after[p] - before[p] for p in after}
    total = sum(sent.values())
    assert total > 3 * 40e6 / 8 * 0.8  # more than one port's worth in 3 s
    for port, n in sent.items():
        assert n > 0.4 * total, f"port {port} carried only {n} of {total} bytes"


def _kernel_port(fnet, host, dst_ip, sport, dport):
    """The port `host`'s kernel sends this TCP 5-tuple out of."""
    src_ip = fnet.fabric.nics_of(host)[0].ip
    argv = ["ip", "-j", "route", "get", dst_ip, "from", src_ip, "ipproto", "tcp"]
    argv += ["sport", str(sport), "dport", str(dport)]
    return json.loads(fnet.run_in(host, argv).stdout)[0]["dev"]


def _tx_bytes(fnet, host):
    out = fnet.run_in(host, ["ip", "-j", "-s", "link", "show"]).stdout
    return {l["ifname"]: l["stats64"]["tx"]["bytes"] for l in json.loads(out) if l["ifname"].startswith(host)}


@pytest.mark.parametrize("stage", ["_configure_hosts", "_configure_switch_ports"])
def test_exception_while_building_leaves_nothing(tmp_path, monkeypatch, leak_check, stage):
    def boom(self):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(FabricNet, stage, boom)
    with pytest.raises(RuntimeError, match="injected failure"):
        with FabricNet(build_fabric({}, name="it-boom"), str(tmp_path)):
            pass


def test_cli_up_check_json(leak_check):
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "up", "topologies/hpn-mini.yaml", "--check", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["passed"] and summary["reachable"] == summary["pairs"] == 112
    assert summary["datapath"] in ("user", "kernel")


def test_up_then_down_from_another_shell(tmp_path, leak_check):
    # its logs in the test's folder: a fabric that was up keeps them
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "up",
            "topologies/hpn-mini.yaml",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in up.stdout], daemon=True).start()
        seen = ""
        while "fabric is up" not in seen:  # wait for the event, with a deadline
            try:
                seen += lines.get(timeout=120)
            except queue.Empty:
                raise AssertionError(f"'hpnlab up' never said the fabric is up: {seen[-500:]}") from None
        assert ledger.load() is not None
        down = subprocess.run(
            [sys.executable, "-m", "testbed.cli", "down"], capture_output=True, text=True, timeout=90
        )
        assert down.returncode == 0, down.stderr
        assert up.wait(30) == 0
    finally:
        if up.poll() is None:  # the test failed half-way: tear down the clean way
            up.terminate()
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
                subprocess.run([sys.executable, "-m", "testbed.cli", "down"], timeout=90)


@pytest.mark.parametrize("kind,name", [("bridge", "a0n0"), ("interface", "s0h0-n0p0")])
def test_a_name_someone_else_holds_is_refused_and_kept(kind, name, leak_check, machine_state):
    # Someone else's bridge or interface carries a name the fabric needs:
    # `up` must refuse before creating anything, and must not remove it.
    if kind == "bridge":
        made = [
            "ovs-vsctl",
            "--timeout=5",
            "add-br",
            name,
            "--",
            "set",
            "bridge",
            name,
            "datapath_type=netdev",
        ]
        gone = ["ovs-vsctl", "--timeout=5", "--if-exists", "del-br", name]
    else:
        made = ["ip", "link", "add", name, "type", "veth", "peer", "name", "hpnlabtpeer0"]
        gone = ["ip", "link", "del", name]
    subprocess.run(made, check=True, capture_output=True)
    try:
        before = machine_state()
        r = subprocess.run(
            [sys.executable, "-m", "testbed.cli", "up", "topologies/hpn-mini.yaml", "--check"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == NOT_RUN
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"named '{name}'" in lines[0], r.stderr
        assert "did not create it" in lines[0]
        assert machine_state() == before  # nothing built, nothing of theirs removed
        assert ledger.load() is None
    finally:
        subprocess.run(gone, capture_output=True)
