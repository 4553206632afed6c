"""Pure planning modules: host/switch command plans, capability checks, the
resource ledger (with a stand-in ovs-vsctl; nothing real is touched)."""

import glob
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.emulation import plans
from testbed.emulation.capabilities import Feature, datapath, missing_for
from testbed.emulation.ledger import Ledger, already_present, load, lock_is_held, signal_process, start_time
from testbed.emulation.procs import signals_held, wait_for_line
from testbed.fabric.build import build_fabric

REGION_DELAY = {
    "kind": "region",
    "fabrics": [{"kind": "hpn"}, {"kind": "hpn"}],
    "dci": {"oversubscription": 2, "delay": "2ms"},
}


def split_script(script):
    """{'ip': [...], 'tc': [...], 'shell': [...]} from a host script."""
    out = {"shell": []}
    lines = iter(script.splitlines())
    for line in lines:
        m = re.fullmatch(r"(ip|tc) -batch - <<'HPNLAB_EOF'", line)
        if m:
            body = []
            for inner in lines:
                if inner == "HPNLAB_EOF":
                    break
                body.append(inner)
            else:
                raise AssertionError("unterminated here-document")
            assert m.group(1) not in out
            out[m.group(1)] = body
        else:
            out["shell"].append(line)
    return out


# --- plans --------------------------------------------------------------------------
def test_host_script_for_a_dual_port_nic():
    fabric = build_fabric({"kind": "hpn"})
    script = plans.host_script(fabric, "s0h0")
    assert script.endswith("\n")
    parts = split_script(script)
    ip, tc, shell = parts["ip"], parts["tc"], parts["shell"]
    ports = ("s0h0-n0p0", "s0h0-n0p1")
    for p in ports:
        assert f"link set dev {p} address 02:00:0a:00:00:01 mtu 9000" in ip
        assert f"addr add 10.0.0.1/32 dev {p}" in ip
        assert f"link set dev {p} up" in ip
        (ethtool,) = [l for l in shell if l.startswith(f"ethtool -K {p} ")]
        for feature in ("tx", "rx", "tso", "gso", "gro"):
            assert f" {feature} off" in ethtool
    assert sum("addr add" in l for l in ip) == 2
    # one multipath route over both ports, for the one DC prefix of rail 0
    routes = [l for l in ip if l.startswith("route ")]
    assert routes == ["route replace 10.0.0.0/16 nexthop dev s0h0-n0p0 nexthop dev s0h0-n0p1"]
    assert any("fib_multipath_hash_policy=1" in l for l in shell)
    assert any("ignore_routes_with_linkdown=1" in l for l in shell)
    assert any(f"tcp_retries2={plans.TCP_RETRIES}" in l for l in shell)
    # the machine's defaults unless told: no congestion control, eviction kept
    assert not any("tcp_congestion_control" in l or "arp_evict_nocarrier" in l for l in shell)
    told = split_script(plans.host_script(fabric, "s0h0", tcp_default="reno", keep_neighbours=True))["shell"]
    assert any("net.ipv4.tcp_congestion_control=reno" in l for l in told)
    assert any("net.ipv4.conf.all.arp_evict_nocarrier=0" in l for l in told)

    # 200 Gbit/s scaled by 5000: 40 Mbit/s, HTB + a byte FIFO of 0.1 s
    limit = plans.queue_bytes(40.0, 9000)
    assert limit == 500000
    for p in ports:
        mine = [l for l in tc if f" dev {p} " in l]
        assert mine[0] == f"qdisc replace dev {p} root handle 1: htb default 1"
        assert re.search(r"htb rate 40mbit ceil 40mbit ", mine[1]), mine[1]
        assert mine[1].endswith("quantum 9014")
        assert mine[2] == f"qdisc replace dev {p} parent 1:1 handle 10: bfifo limit {limit}"
        assert len(mine) == 3
    assert not any("netem" in l for l in tc)


def test_hosts_start_tcp_with_cubic_where_allowed_else_reno():
    # never the machine's default as such: BBR would leave its pacing on
    assert plans.host_tcp_default(["reno", "cubic"]) == "cubic"
    assert plans.host_tcp_default(["reno", "bbr"]) == "reno"
    assert plans.host_tcp_default(["reno", "bbr", "cubic"]) == "cubic"
    # an admin's list may leave out even Reno: the hosts keep the machine's default
    assert plans.host_tcp_default(["bbr"]) is None


def test_cpu_mask_names_the_first_n_cpus_in_32_bit_words():
    assert plans.cpu_mask(1) == "00000001"
    assert plans.cpu_mask(2) == "00000003"
    assert plans.cpu_mask(32) == "ffffffff"
    assert plans.cpu_mask(40) == "000000ff,ffffffff"
    with pytest.raises(ValueError):
        plans.cpu_mask(0)


def test_host_script_steers_its_ports_only_when_asked():
    fabric = build_fabric({"kind": "hpn"})
    assert "rps_cpus" not in plans.host_script(fabric, "s0h0")
    script = plans.host_script(fabric, "s0h0", rps_mask="00000003")
    block = script[script.index("unshare -m") : script.index("HPNLAB_RPS\n", script.index("sysfs")) + 10]
    # sysfs mounted inside the host's namespaces, each port's every queue
    assert 'mount -t sysfs hpnlab-sysfs "$d"' in block
    for p in ("s0h0-n0p0", "s0h0-n0p1"):
        assert f"$d/class/net/{p}/queues/rx-*/rps_cpus; do echo 00000003 > $q" in block


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a throw-away network namespace)")
def test_steering_sets_every_receive_queue_inside_a_namespace():
    """The host-side snippet, run for real in a throw-away network namespace:
    a veth's receive queues read back the mask, and the root's sysfs is
    untouched (the mount stays private)."""
    fabric = build_fabric({"kind": "hpn"})
    script = plans.host_script(fabric, "s0h0", rps_mask="00000001")
    start = script.index("unshare -m")
    snippet = script[start : script.index("HPNLAB_RPS", script.index("sysfs")) + len("HPNLAB_RPS")]
    snippet = snippet.replace("s0h0-n0p0", "hpnrpsa").replace("s0h0-n0p1", "hpnrpsb")
    check = (
        'unshare -m sh -ec \'d=$(mktemp -d); mount -t sysfs check "$d"; '
        'cat "$d"/class/net/hpnrps?/queues/rx-*/rps_cpus; umount "$d"; rmdir "$d"\''
    )
    mounts = open("/proc/self/mounts").read()
    before = set(glob.glob("/tmp/tmp.*"))
    r = subprocess.run(
        [
            "unshare",
            "-n",
            "sh",
            "-ec",
            "ip link add hpnrpsa type veth peer name hpnrpsb\n" + snippet + "\n" + check,
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    values = r.stdout.split()
    assert values and all(int(v, 16) == 1 for v in values), values
    assert open("/proc/self/mounts").read() == mounts
    assert set(glob.glob("/tmp/tmp.*")) <= before  # its mount point is gone too


def test_host_script_with_two_rails_routes_each_rail_over_its_own_nic():
    fabric = build_fabric({"kind": "hpn", "rails": 2})
    ip = split_script(plans.host_script(fabric, "s1h2"))["ip"]
    assert [l for l in ip if l.startswith("route ")] == [
        "route replace 10.0.0.0/16 nexthop dev s1h2-n0p0 nexthop dev s1h2-n0p1",
        "route replace 10.1.0.0/16 nexthop dev s1h2-n1p0 nexthop dev s1h2-n1p1",
    ]
    assert "addr add 10.0.1.3/32 dev s1h2-n0p1" in ip
    assert "addr add 10.1.1.3/32 dev s1h2-n1p1" in ip


def test_host_script_in_a_region_routes_every_dc_prefix():
    fabric = build_fabric(REGION_DELAY)
    ip = split_script(plans.host_script(fabric, "d1s0h0"))["ip"]
    hops = "nexthop dev d1s0h0-n0p0 nexthop dev d1s0h0-n0p1"
    assert [l for l in ip if l.startswith("route ")] == [
        f"route replace 10.0.0.0/16 {hops}",
        f"route replace 10.16.0.0/16 {hops}",
    ]
    assert "addr add 10.16.0.1/32 dev d1s0h0-n0p0" in ip


def test_switch_port_plan_uses_netem_on_dci_ends_only():
    fabric = build_fabric(REGION_DELAY)
    ip_lines, tc_lines = plans.switch_port_plan(fabric)
    switch_ends = [e for l in fabric.links for e in (l.a, l.b) if fabric.nodes[e.node].is_switch]
    assert len(ip_lines) == len(switch_ends)
    assert all(l.endswith(" mtu 9000") for l in ip_lines)
    dci_ends = {e.ifname for l in fabric.links if l.kind == "dci" for e in (l.a, l.b)}
    assert len(dci_ends) == 4
    netem = [l for l in tc_lines if " netem " in l]
    assert {l.split()[3] for l in netem} == dci_ends
    for line in netem:
        assert " delay 2ms " in line
    # DCI per plane: 8 hosts x 200 Gbit/s (one port per plane) / oversubscription 2
    # = 800 Gbit/s, / 5000 = 160 Mbit/s; a queue of 0.1 s = 2e6 bytes = 221 jumbo frames
    assert all(line.endswith(" limit 221") for line in netem)
    roots = [l for l in tc_lines if " root " in l]
    assert len(roots) == len(switch_ends)
    leaves = [l for l in tc_lines if "parent 1:1 " in l]
    assert len(leaves) == len(switch_ends)
    assert sum(" bfifo " in l for l in leaves) == len(switch_ends) - 4
    # no host port is in the switch plan
    assert not any("-n0p" in l for l in ip_lines + tc_lines)


def test_switch_port_plan_without_delay_has_no_netem():
    fabric = build_fabric(
        {"kind": "region", "fabrics": [{"kind": "hpn"}, {"kind": "hpn"}], "dci": {"oversubscription": 1}}
    )
    _, tc_lines = plans.switch_port_plan(fabric)
    assert tc_lines and not any("netem" in l for l in tc_lines)


@pytest.mark.parametrize(
    "rate, mtu, expected",
    [
        (1.0, 9000, 4 * 9014),  # floor: 4 jumbo frames
        (0.001, 1500, 4 * 1514),
        (40.0, 9000, 500000),  # 0.1 s at 40 Mbit/s
        (400.0, 9000, 5000000),
    ],
)
def test_queue_bytes(rate, mtu, expected):
    assert plans.queue_bytes(rate, mtu) == expected


def test_override_changes_add_change_remove():
    ip = "10.0.1.1"
    assert plans.override_changes({}, {ip: ("s0h0-n0p1",)}) == [(ip, ("s0h0-n0p1",))]
    assert plans.override_changes({ip: ("s0h0-n0p1",)}, {ip: ("s0h0-n0p1",)}) == []
    assert plans.override_changes({ip: ("s0h0-n0p1",)}, {ip: ["s0h0-n0p1"]}) == []
    assert plans.override_changes({ip: ("s0h0-n0p1",)}, {ip: ("s0h0-n0p0",)}) == [(ip, ("s0h0-n0p0",))]
    assert plans.override_changes({ip: ("s0h0-n0p1",)}, {}) == [(ip, None)]
    both = plans.override_changes({"10.0.1.2": ("a",)}, {"10.0.1.3": ("b", "c")})
    assert both == [("10.0.1.2", None), ("10.0.1.3", ("b", "c"))]


# --- capabilities ------------------------------------------------------------------
BASIC = [Feature("htb", True, "ok", "shaping"), Feature("openvswitch module", False, "no", "")]


def test_missing_for_names_netem_and_its_module():
    fabric = build_fabric(REGION_DELAY)
    for feats in (BASIC, BASIC + [Feature("netem", False, "Unknown qdisc", "delay")]):
        (msg,) = missing_for(fabric, feats)
        assert "netem" in msg and "sch_netem" in msg
        assert "dci.delay" in msg
    assert missing_for(fabric, BASIC + [Feature("netem", True, "ok", "delay")]) == []


def test_missing_for_without_delay_needs_nothing():
    fabric = build_fabric(
        {"kind": "region", "fabrics": [{"kind": "hpn"}, {"kind": "hpn"}], "dci": {"oversubscription": 1}}
    )
    assert missing_for(fabric, []) == []
    assert missing_for(build_fabric({"kind": "hpn"}), []) == []


def test_datapath_choice():
    assert datapath(BASIC) == "user"
    assert datapath([Feature("openvswitch module", True, "loaded", "")]) == "kernel"
    assert datapath([]) == "user"


# --- ledger ---------------------------------------------------------------------------
FAKE_OVS = """#!/bin/sh
echo "$*" >> "$HPNLAB_TEST_OVS_LOG"
case "$*" in *list-br*) cat "$HPNLAB_TEST_OVS_BRIDGES" 2>/dev/null ;; esac
exit 0
"""
NO_BRIDGE = "hpnlabtnobr0"
NO_IFACE = "hpnlabtnoif0"


@pytest.fixture
def fake_ovs(tmp_path, monkeypatch):
    """A stand-in ovs-vsctl first on PATH: logs its arguments, lists the
    bridges written to `bridges`. The real Open vSwitch is never asked."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "ovs-vsctl"
    exe.write_text(FAKE_OVS)
    exe.chmod(0o755)
    log, bridges = tmp_path / "ovs.log", tmp_path / "bridges"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPNLAB_TEST_OVS_LOG", str(log))
    monkeypatch.setenv("HPNLAB_TEST_OVS_BRIDGES", str(bridges))
    calls = lambda: log.read_text().splitlines() if log.exists() else []  # noqa: E731
    return calls, bridges


def no_such_interface(name):
    with pytest.raises(OSError):
        socket.if_nametoindex(name)


@pytest.fixture
def sleeper():
    """A live child process, reaped as soon as it dies."""
    child = subprocess.Popen(["sleep", "30"])
    reaper = threading.Thread(target=child.wait, daemon=True)
    reaper.start()
    yield child
    if child.poll() is None:
        child.kill()
    reaper.join(5)


def test_claim_writes_the_record(tmp_path, fake_ovs, sleeper):
    path = str(tmp_path / "state" / "fabric.json")
    ledger = Ledger(path)
    ledger.claim("demo", "runs/demo")
    with open(path) as fh:
        data = json.load(fh)
    assert data["owner"] == os.getpid()
    assert (data["fabric"], data["run_dir"]) == ("demo", "runs/demo")
    ledger.add("bridges", "b1", "b2", "b1")
    ledger.add_process(sleeper.pid, ["python", "-m", "controllers.run"])
    back = load(path)
    assert back.data["bridges"] == ["b1", "b2"]
    started = start_time(sleeper.pid)
    assert isinstance(started, int) and started > 0
    assert back.data["processes"] == [
        {"pid": sleeper.pid, "start": started, "cmd": "python -m controllers.run"}
    ]
    assert back.data["owner_start"] == start_time(os.getpid())
    # the same process may claim again
    Ledger(path).claim("demo2", "runs/demo2")
    assert load(path).data["fabric"] == "demo2"


def test_claim_refuses_while_the_owner_lives(tmp_path, fake_ovs, sleeper):
    calls, _ = fake_ovs
    path = str(tmp_path / "fabric.json")
    first = Ledger(path)
    first.data.update(
        owner=sleeper.pid, owner_start=start_time(sleeper.pid), fabric="other", bridges=[NO_BRIDGE]
    )
    first.save()
    with pytest.raises(RuntimeError, match="hpnlab down") as err:
        Ledger(path).claim("mine", "runs/mine")
    assert "'other'" in str(err.value) and str(sleeper.pid) in str(err.value)
    assert load(path).data["owner"] == sleeper.pid
    assert calls() == []

    # once the owner is gone its record is swept and replaced
    sleeper.kill()
    deadline = time.monotonic() + 5
    while sleeper.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    Ledger(path).claim("mine", "runs/mine")
    data = load(path).data
    assert (data["owner"], data["fabric"], data["bridges"]) == (os.getpid(), "mine", [])
    assert any("list-br" in c for c in calls())


def test_sweep_of_things_already_gone_is_quick_and_empty(tmp_path, fake_ovs):
    calls, _ = fake_ovs
    no_such_interface(NO_IFACE)
    ledger = Ledger(str(tmp_path / "fabric.json"))
    ledger.data.update(bridges=[NO_BRIDGE], interfaces=[NO_IFACE])
    t0 = time.monotonic()
    assert ledger.sweep(timeout=2.0) == []
    assert time.monotonic() - t0 < 1.0
    assert [c for c in calls() if "list-br" in c] and not [c for c in calls() if "del-br" in c]


def test_sweep_removes_a_listed_bridge_and_process(tmp_path, fake_ovs, sleeper):
    calls, bridges = fake_ovs
    bridges.write_text(f"unrelated0\n{NO_BRIDGE}\n")
    ledger = Ledger(str(tmp_path / "fabric.json"))
    ledger.data.update(bridges=[NO_BRIDGE])
    ledger.data["processes"].append({"pid": sleeper.pid, "start": start_time(sleeper.pid), "cmd": "sleep 30"})
    t0 = time.monotonic()
    leftover = ledger.sweep(timeout=2.0)
    assert time.monotonic() - t0 < 2.0
    assert leftover == [f"process {sleeper.pid}", f"bridge {NO_BRIDGE}"]
    assert sleeper.wait(5) is not None
    dels = [c for c in calls() if "del-br" in c]
    assert len(dels) == 1 and dels[0].endswith(f"del-br {NO_BRIDGE}")
    assert not any("unrelated0" in c for c in calls())


def test_a_reused_pid_is_never_signalled(tmp_path, fake_ovs, sleeper):
    # The record names the sleeper's PID with another start time: what a
    # recorded process looks like once it ended and the kernel gave its PID
    # to someone else. Neither the sweep nor `down` may touch it.
    other = Ledger(str(tmp_path / "fabric.json"))
    started = start_time(sleeper.pid)
    other.data.update(owner=sleeper.pid, owner_start=started + 1, fabric="old")
    other.data["processes"].append({"pid": sleeper.pid, "start": started - 1, "cmd": "sleep 30"})
    other.data["processes"].append({"pid": sleeper.pid, "cmd": "sleep 30"})  # no start: never ours
    assert not other.owner_running()
    assert other.sweep(timeout=1.0) == []
    assert sleeper.poll() is None
    assert not signal_process(sleeper.pid, started + 1, signal.SIGTERM)
    assert not signal_process(sleeper.pid, None, signal.SIGTERM)
    assert sleeper.poll() is None
    # the same process under its true start time is ours
    assert signal_process(sleeper.pid, started, signal.SIGTERM)
    assert sleeper.wait(5) is not None


def test_names_in_use_are_found_before_anything_is_built(fake_ovs):
    _, bridges = fake_ovs
    assert already_present(["hpnlabfree0"], [NO_IFACE]) is None
    assert already_present(["hpnlabfree0"], [NO_IFACE, "lo"]) == "an interface named 'lo' already exists"
    bridges.write_text(f"{NO_BRIDGE}\n")
    assert (
        already_present([NO_BRIDGE], ["lo"])
        == f"Open vSwitch already has a bridge or port named {NO_BRIDGE!r}"
    )


def test_interrupts_wait_until_the_held_block_ends():
    # A shell starts background jobs with SIGINT ignored; the test needs
    # Python's own handler, whatever started it.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_inside_a_held_block()
    finally:
        signal.signal(signal.SIGINT, before)


def _interrupt_inside_a_held_block():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)  # handled at once, before the next line
            reached.append("end of block")
    assert reached == ["end of block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sweep_without_ovs_vsctl_does_not_crash(tmp_path, monkeypatch):
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    ledger = Ledger(str(tmp_path / "fabric.json"))
    ledger.data.update(bridges=[NO_BRIDGE], interfaces=[NO_IFACE])
    assert ledger.sweep(timeout=1.0) == []


def test_release_and_load(tmp_path, fake_ovs):
    path = str(tmp_path / "fabric.json")
    assert load(path) is None
    ledger = Ledger(path)
    ledger.claim("demo", "runs/demo")
    assert os.path.exists(path)
    ledger.release()
    assert not os.path.exists(path)
    ledger.release()  # a second release is harmless
    with open(path, "w") as fh:
        fh.write("{not json")
    assert load(path) is None


def test_two_claims_at_once_one_wins_and_the_other_names_it(tmp_path, fake_ovs):
    """The claim holds a lock for the fabric's life: a second run refuses
    with one line naming the first, and the lock goes with its holder."""
    path = str(tmp_path / "state" / "fabric.json")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from testbed.emulation.ledger import Ledger\n"
            "Ledger(sys.argv[1]).claim('first', 'runs/first')\n"
            "print('claimed', flush=True)\ntime.sleep(60)\n",
            path,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert child.stdout.readline().strip() == "claimed"
        assert lock_is_held(path)
        with pytest.raises(RuntimeError, match=rf"fabric 'first' \(pid {child.pid}.*hpnlab down"):
            Ledger(path).claim("second", "runs/second")
        assert load(path).data["fabric"] == "first"
    finally:
        child.kill()
        child.wait()
    assert not lock_is_held(path)
    mine = Ledger(path)
    mine.claim("second", "runs/second")  # the dead holder's record is swept and replaced
    assert load(path).data["fabric"] == "second" and lock_is_held(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # it names the datapath ids
    mine.release()
    assert not lock_is_held(path) and load(path) is None


def test_a_ready_line_that_comes_second_in_one_write_is_seen():
    """tcpdump writes two lines at once when the machine is busy; the
    wanted one is the second, and nothing more comes for a while."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "sys.stderr.write('tcpdump: data link type LINUX_SLL2\\n"
            "tcpdump: listening on any\\n')\nsys.stderr.flush()\ntime.sleep(30)\n",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0 = time.monotonic()
        line, seen = wait_for_line(child.stderr, lambda l: "listening on" in l, 10)
        assert line == "tcpdump: listening on any" and "LINUX_SLL2" in seen
        assert time.monotonic() - t0 < 5
        # and a line that never comes is None once the time is up
        line, _ = wait_for_line(child.stderr, lambda l: "never" in l, 0.2)
        assert line is None
    finally:
        child.kill()
        child.wait()


def test_the_sweep_of_a_named_fabric_leaves_what_its_names_mean_here(tmp_path, fake_ovs, sleeper):
    # A named fabric's bridges, interfaces and pins lived in namespaces of
    # its own, gone with its processes; here the same names may be another
    # fabric's (the machine's, built from the same topology). Its sweep ends
    # its processes and removes its folders, and touches nothing else.
    calls, bridges = fake_ovs
    bridges.write_text(f"{NO_BRIDGE}\n")
    pin, folder = tmp_path / "a-pin-of-the-machines-fabric", tmp_path / "ovs"
    pin.write_text("")
    folder.mkdir()
    (folder / "db.sock").write_text("")
    ledger = Ledger(str(tmp_path / "fabric.json"))
    ledger.data.update(
        named={"name": "alice", "ovs_dir": str(folder)},
        bridges=[NO_BRIDGE],
        interfaces=["lo"],
        files=[str(pin)],
        dirs=[str(folder)],
        ovs_options={"n-handler-threads": None},
    )
    ledger.data["processes"].append(
        {"pid": sleeper.pid, "start": start_time(sleeper.pid), "cmd": "ovs-vswitchd"}
    )
    leftover = ledger.sweep(timeout=2.0)
    assert leftover == [f"process {sleeper.pid}", f"file {folder / 'db.sock'}"]
    assert sleeper.wait(5) is not None
    assert pin.exists() and not folder.exists()
    assert calls() == []  # the system's Open vSwitch was never asked
