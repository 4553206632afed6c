"""Several fabrics on one machine, as a lab server runs them: the machine's
fabric and a named one, both built from the same topology (so every bridge,
interface and pin name is the same in both), up at once; each sees only its
own traffic and its own faults, and `down` with a name stops only that one."""

import json
import os
import subprocess
import sys

from testbed.emulation.capabilities import OVS_MALLOC_NAME, maps_name_library

HPNLAB = [sys.executable, "-m", "testbed.cli"]
NAME = "itest-beside"


def hpnlab(*args, timeout=60):
    return subprocess.run([*HPNLAB, *args], capture_output=True, text=True, timeout=timeout)


def named(*args, timeout=60):
    return hpnlab("--fabric", NAME, *args, timeout=timeout)


def sent_by(run, host):
    """Packets `host` has sent over its NIC ports, from the kernel's counters
    read inside the host (`ip -s`: netlink, whatever sysfs shows)."""
    r = run("exec", host, "--", "ip", "-j", "-s", "link", "show")
    assert r.returncode == 0, r.stdout + r.stderr
    return sum(
        i["stats64"]["tx"]["packets"] for i in json.loads(r.stdout) if i["ifname"].startswith(host + "-")
    )


def ping(run, host, address, count):
    r = run("exec", host, "--", "ping", "-q", "-c", str(count), "-i", "0.01", address, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_two_fabrics_of_one_topology_run_side_by_side(tmp_path, leak_check):
    up = hpnlab(
        "up", "topologies/hpn-mini.yaml", "--detach", "--run-dir", str(tmp_path / "machine"), timeout=180
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        beside = named(
            "up", "topologies/hpn-mini.yaml", "--detach", "--run-dir", str(tmp_path / "named"), timeout=180
        )
        assert beside.returncode == 0, beside.stdout + beside.stderr
        assert f"hpnlab --fabric {NAME} down" in beside.stdout

        # the same name again is refused, naming the fabric that has it
        again = named("up", "topologies/hpn-mini.yaml", "--run-dir", str(tmp_path / "again"))
        assert again.returncode == 5 and f"named {NAME}" in again.stderr, again.stderr

        mine, theirs = (
            json.loads(named("status", "--json").stdout),
            json.loads(hpnlab("status", "--json").stdout),
        )
        assert mine["name"] == NAME and theirs["name"] is None
        assert mine["owner_pid"] != theirs["owner_pid"]
        # its own switch daemon runs with the allocator make setup installs
        with open(f"/run/hpnlab/fabrics/{NAME}/ovs/ovs-vswitchd.pid") as fh:
            with open(f"/proc/{int(fh.read())}/maps") as maps:
                assert maps_name_library(maps.read(), OVS_MALLOC_NAME)
        assert mine["other_fabrics"] == ["the machine's (no --fabric)"]
        assert theirs["other_fabrics"] == [f"--fabric {NAME}"]
        for run in (named, hpnlab):
            every = run("pingall")
            assert every.returncode == 0 and "112/112 host-port pairs answered" in every.stdout, every.stdout

        # traffic in one fabric is counted there only
        before = {run: sent_by(run, "s0h1") for run in (named, hpnlab)}
        ping(named, "s0h1", "10.0.1.1", 300)
        after = {run: sent_by(run, "s0h1") for run in (named, hpnlab)}
        assert after[named] - before[named] >= 300
        assert after[hpnlab] - before[hpnlab] < 30, (before, after)
        ping(hpnlab, "s0h1", "10.0.1.1", 300)
        last = {run: sent_by(run, "s0h1") for run in (named, hpnlab)}
        assert last[hpnlab] - after[hpnlab] >= 300
        assert last[named] - after[named] < 30, (after, last)

        # a cable pulled in one is down there only
        pulled = named("link", "s0h0", "t0r0k0", "down", "--json")
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        assert [d[:2] for d in json.loads(named("status", "--json").stdout)["links_down"]] == [
            ["s0h0", "t0r0k0"]
        ]
        assert json.loads(hpnlab("status", "--json").stdout)["links_down"] == []
        assert "112/112 host-port pairs answered" in hpnlab("pingall").stdout

        # down with the name stops that fabric only, and leaves nothing of it
        down = named("down", timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        gone = named("status")
        assert gone.returncode != 0 and f"no fabric named {NAME} is up" in gone.stderr, gone.stderr
        assert json.loads(hpnlab("status", "--json").stdout)["controller"]["running"]
        assert "112/112 host-port pairs answered" in hpnlab("pingall").stdout
        left = sorted(os.listdir(f"/run/hpnlab/fabrics/{NAME}"))
        assert left == ["fabric.json.lock"], left  # the record and its Open vSwitch folder are gone
        ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
        assert f"/run/hpnlab/fabrics/{NAME}/" not in ps, "the named fabric's Open vSwitch is still running"
    finally:
        named("down", timeout=120)
        hpnlab("down", timeout=120)


def test_a_named_fabrics_drill_measures_its_own_open_vswitch(tmp_path, leak_check):
    """A drill in a named fabric charges the CPU of that fabric's own
    ovs-vswitchd, and watches its sockets for frames held unread: the
    system's daemon, idle beside it, would measure nothing."""
    out = tmp_path / "ring"
    r = named("run", "scenarios/allreduce-ring.yaml", "--out", str(out), timeout=300)
    assert (out / "results.json").exists(), r.stdout + r.stderr
    results = json.loads((out / "results.json").read_text())
    cost = results["metrics"]["cpu_per_packet"]
    assert cost["packet_hops"] > 1000, cost
    # tens of microseconds per packet-hop on the userspace datapath
    assert cost["ovs_us"] is not None and cost["ovs_us"] > 1.0, cost
    hold = {c["name"]: c for c in results["trust"]["checks"]}["emulator_hold"]
    assert hold["value"] is not None, hold  # its sockets were sampled
