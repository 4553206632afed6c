"""Working on a live fabric from another shell, as a user does: `up
--detach`, then `status`, `flows`, `pingall`, `exec` and `link` on it, then
`down`."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HPNLAB = [sys.executable, "-m", "testbed.cli"]
ROOT = Path(__file__).resolve().parents[2]


def hpnlab(*args, timeout=60):
    return subprocess.run([*HPNLAB, *args], capture_output=True, text=True, timeout=timeout)


def test_a_detached_fabric_is_driven_from_another_shell(tmp_path, leak_check):
    up = hpnlab("up", "topologies/hpn-mini.yaml", "--detach", "--run-dir", str(tmp_path / "run"), timeout=180)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "detached" in up.stdout
        status = json.loads(hpnlab("status", "--json").stdout)
        assert status["fabric"] == "hpn-mini" and status["links"] == 24 and status["links_down"] == []
        assert status["controller"]["running"] and status["controller"]["routes_version"] is not None
        rules = json.loads(hpnlab("flows", "t0r0k0", "--json").stdout)
        what = [r["what"] for r in rules]
        assert "route to s0h0 (10.0.0.1): port 1 (to s0h0)" in what
        assert any(w.startswith("route to s1h0 (10.0.1.1): group") and "ECMP over" in w for w in what), what
        every = hpnlab("pingall")
        assert every.returncode == 0 and "112/112 host-port pairs answered" in every.stdout, every.stdout

        # a command in a host's namespace sees that host's addresses; its status is ours
        addr = hpnlab("exec", "s0h0", "--", "ip", "-o", "-4", "addr", "show")
        assert addr.returncode == 0 and "10.0.0.1/" in addr.stdout, addr.stdout + addr.stderr
        assert hpnlab("exec", "s0h0", "--", "sh", "-c", "exit 7").returncode == 7
        assert hpnlab("exec", "nosuch", "--", "true").returncode == 2

        # a cable pulled: the controller's acknowledged routes count it
        pulled = hpnlab("link", "s0h0", "t0r0k0", "down", "--json")
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        answer = json.loads(pulled.stdout)
        assert answer["converged_s"] is not None and answer["converged_s"] < 2.0
        # the dead port keeps the MACs pingall's ARP taught it (a kernel's
        # default evicts them; kernels before 5.16 cannot be told not to)
        if os.path.exists("/proc/sys/net/ipv4/conf/all/arp_evict_nocarrier"):
            kept = hpnlab("exec", "s0h0", "--", "ip", "-4", "-j", "neigh", "show", "dev", "s0h0-n0p0").stdout
            known = {n["dst"] for n in json.loads(kept) if n.get("lladdr")}
            assert known >= {"10.0.0.2", "10.0.1.1"}, kept
        picture = tmp_path / "live.svg"
        status = json.loads(hpnlab("status", "--json", "--draw", str(picture)).stdout)
        assert [d[:2] for d in status["links_down"]] == [["s0h0", "t0r0k0"]]
        assert "failed link" in picture.read_text()
        assert ["t0r0k0", 1] in status["controller"]["ports_down"]
        # pingall finds what plane 0 lost with the cable, and only that: s0h0's
        # port 0 to anyone, and anyone's port 0 to s0h0 (plane 0 no longer
        # reaches it; its other port is in plane 1)
        partial = hpnlab("pingall", "--json")
        assert partial.returncode == 1
        lost = sorted(json.loads(partial.stdout)["unreachable"])
        hosts = [f"s{s}h{h}" for s in (0, 1) for h in range(4)]
        ips = {f"s{s}h{h}": f"10.0.{s}.{h + 1}" for s in (0, 1) for h in range(4)}
        expected = [f"s0h0 s0h0-n0p0:{ips[d]}" for d in hosts if d != "s0h0"]
        expected += [f"{h} {h}-n0p0:10.0.0.1" for h in hosts if h != "s0h0"]
        assert lost == sorted(expected), lost
        # and the host still reaches the other segment, over its other port
        ping = hpnlab("exec", "s0h0", "--", "ping", "-c", "3", "-i", "0.2", "-W", "1", "10.0.1.1")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        replugged = json.loads(hpnlab("link", "s0h0", "t0r0k0", "up", "--json").stdout)
        assert replugged["converged_s"] is not None
        assert json.loads(hpnlab("status", "--json").stdout)["links_down"] == []

        # a whole ToR dies: its 6 links go down, its hosts go on over their other port
        failed = json.loads(hpnlab("switch", "t1r0k1", "down", "--json").stdout)
        assert failed["converged_s"] is not None, failed
        down = json.loads(hpnlab("status", "--json").stdout)["links_down"]
        assert len(down) == 6 and all("t1r0k1" in d[:2] for d in down), down
        ping = hpnlab("exec", "s1h0", "--", "ping", "-c", "3", "-i", "0.2", "-W", "1", "10.0.0.1")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert json.loads(hpnlab("switch", "t1r0k1", "up", "--json").stdout)["converged_s"] is not None
        assert json.loads(hpnlab("status", "--json").stdout)["links_down"] == []
    finally:
        down = hpnlab("down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no fabric is up" in hpnlab("status").stderr
    assert (tmp_path / "run" / "up.log").exists()  # the detached fabric's own output


def test_queues_and_a_scenarios_traffic_on_a_live_fabric(tmp_path, leak_check):
    up = hpnlab(
        "up", "scenarios/crux-classes.yaml", "--detach", "--run-dir", str(tmp_path / "run"), timeout=180
    )
    server = client = traffic = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        server = subprocess.Popen(
            [*HPNLAB, "exec", "s1h0", "--", "iperf3", "-s", "-1", "-B", "10.0.1.1"],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the server listens (its socket, seen from its host)
            if hpnlab("exec", "s1h0", "--", "ss", "-Hltn", "sport = :5201").stdout.strip():
                break
        else:
            raise AssertionError("iperf3 -s did not listen within 10 s")
        client = subprocess.Popen(
            [*HPNLAB, "exec", "s0h0", "--", "iperf3", "-c", "10.0.1.1", "-t", "5", "-J"],
            stdout=subprocess.PIPE,
            text=True,
        )
        seen = hpnlab("queues", "s0h0", "s1h3", "--interval", "2", "--json", timeout=30)
        assert seen.returncode == 0, seen.stdout + seen.stderr
        out, _ = client.communicate(timeout=30)
        tcp_mbit = json.loads(out)["end"]["sum_sent"]["bits_per_second"] / 1e6
        rows = json.loads(seen.stdout)["queues"]
        sender = [r for r in rows if r["node"] == "s0h0"]
        idle = [r for r in rows if r["node"] == "s1h3"]
        assert {r["class"] for r in sender} == {"high", "low"}
        sent = sum(r["sent_mbit_s"] for r in sender)
        # the host's queues carried the stream at the rate TCP measured (the
        # window is inside the 5 s it ran), no faster than the port
        assert 0.6 * tcp_mbit <= sent <= 1.05 * sender[0]["port_mbit"], (sent, tcp_mbit)
        assert sum(r["sent_bytes"] for r in idle) < 0.01 * sum(r["sent_bytes"] for r in sender)

        # the scenario's own traffic on the live fabric, watched and faulted
        # from here: its jobs made long enough (30 iterations, 10-16 s) to
        # outlast the commands run meanwhile
        longer = tmp_path / "longer.yaml"
        text = (ROOT / "scenarios" / "crux-classes.yaml").read_text()
        text = text.replace("iterations: 6", "iterations: 30").replace("duration: 14", "duration: 40")
        topology = os.path.relpath(ROOT / "topologies" / "hpn-mini.yaml", tmp_path)
        longer.write_text(text.replace("../topologies/hpn-mini.yaml", topology))
        out = tmp_path / "report"
        traffic = subprocess.Popen(
            [
                *HPNLAB,
                "traffic",
                "start",
                str(longer),
                "--topology-dir",
                str(ROOT / "topologies"),
                "--out",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        said = []
        for line in traffic.stdout:  # wait until the jobs iterate
            said.append(line)
            if "intense 1/30 iterations" in line:
                break
        assert traffic.poll() is None, "".join(said)
        assert json.loads(hpnlab("status", "--json").stdout)["traffic"]["jobs"] == ["intense", "light"]
        # What needs the jobs still playing comes first: a cable no job
        # uses, pulled and replugged by hand on a fabric with queues (a run
        # counts only what was pulled while it played), and a second
        # scenario refused while the first runs.
        for state in ("down", "up"):
            pulled = json.loads(hpnlab("link", "s1h3", "t1r0k1", state, "--json").stdout)
            assert pulled["converged_s"] is not None, pulled
        again = hpnlab("traffic", "start", "scenarios/crux-classes.yaml", "--out", str(tmp_path / "second"))
        assert traffic.poll() is None, "the jobs ended before the cable was replugged and the second refused"
        assert again.returncode == 5 and "already running" in again.stderr, again.stderr
        assert not (tmp_path / "second").exists()
        # the queues' counters, read live (they keep what the jobs sent)
        busy = json.loads(hpnlab("queues", "t0r0k0", "t0r0k1", "--json", timeout=30).stdout)["queues"]
        assert sum(r["sent_bytes"] for r in busy if r["class"] == "high") > 0, busy
        text = hpnlab("queues", "t0r0k0", "--interval", "0.5")
        assert text.returncode == 0 and "t0r0k0-e1 -> s0h0" in text.stdout, text.stdout + text.stderr
        rest, _ = traffic.communicate(timeout=120)
        said.append(rest)
        assert traffic.returncode == 0, "".join(said)
        assert "PASSED" in rest
        assert json.loads(hpnlab("status", "--json").stdout)["traffic"] is None
        report = json.loads((out / "results.json").read_text())
        assert report["time_dilation_choice"]["from"] == "running fabric"
        # the cable pulled by hand is among the run's faults, timed like a drill's own
        by_hand = [f for f in report["faults"] if f.get("by_hand")]
        assert [f["action"] for f in by_hand] == ["link-down", "link-up"], report["faults"]
        assert all(set(f["link"]) == {"s1h3", "t1r0k1"} and f["converged_s"] is not None for f in by_hand)
        assert "(by hand)" in (out / "summary.md").read_text()
        wrong = hpnlab("traffic", "start", "scenarios/ecn-dcqcn.yaml", "--out", str(tmp_path / "wrong"))
        assert wrong.returncode == 2 and "its fabric is not the one running" in wrong.stderr, wrong.stderr
        assert not (tmp_path / "wrong").exists()
    finally:
        for p in (client, server, traffic):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        down = hpnlab("down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
