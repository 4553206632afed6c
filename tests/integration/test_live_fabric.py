"""Working on a live fabric from another shell, as a user does: `up
--detach`, then `status`, `flows`, `pingall`, `exec` and `link` on it, then
`down`."""

import json
import subprocess
import sys

HPNLAB = [sys.executable, "-m", "testbed.cli"]


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
        status = json.loads(hpnlab("status", "--json").stdout)
        assert [d[:2] for d in status["links_down"]] == [["s0h0", "t0r0k0"]]
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
    finally:
        down = hpnlab("down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no fabric is up" in hpnlab("status").stderr
    assert (tmp_path / "run" / "up.log").exists()  # the detached fabric's own output
