"""How the traffic agents' hosts are dealt out over processes, how one
process's CPU is shared out over its hosts, and entering a namespace."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from testbed.drill import agents as drill_agents
from testbed.plan.processes import PROCESSES_ENV, host_groups, process_count
from testbed.results.counters import cpu_per_packet
from traffic import agent, netns


@pytest.mark.parametrize(
    "hosts, cores, asked, expected",
    [
        (8, 2, None, 2),
        (8, 2, "", 2),
        (8, 4, None, 4),
        (1, 2, None, 1),
        (3, 16, None, 3),
        (8, 2, "8", 8),
        (8, 2, "3", 3),
        (2, 2, "5", 2),
        (64, 1, "1", 1),
    ],
)
def test_one_process_per_core_unless_told_how_many_never_more_than_hosts(hosts, cores, asked, expected):
    assert process_count(hosts, cores, asked) == expected


@pytest.mark.parametrize("asked", ["0", "-1", "two", "1.5"])
def test_a_bad_process_count_names_the_setting_and_what_it_expects(asked):
    with pytest.raises(ValueError, match=f"^{PROCESSES_ENV}: expected"):
        process_count(8, 2, asked)


def test_hosts_are_dealt_round_robin_so_each_process_gets_its_share():
    hosts = [f"h{i}" for i in range(7)]
    groups = host_groups(hosts, 3)
    assert groups == [["h0", "h3", "h6"], ["h1", "h4"], ["h2", "h5"]]
    assert sorted(h for g in groups for h in g) == sorted(hosts)
    assert host_groups(hosts, 7) == [[h] for h in hosts]


def test_a_process_cpu_is_shared_by_frames_and_the_shares_add_up():
    agents = [
        SimpleNamespace(frames={"data_sent": 30, "received": 30}, cfg={"host": "a"}),
        SimpleNamespace(frames={"data_sent": 10, "received": 30}, cfg={"host": "b"}),
    ]
    process = {
        "cpu_s": 2.0,
        "cpu_user_s": 1.5,
        "cpu_system_s": 0.5,
        "wakeups": 7,
        "cpu_split_s": {"receive": 1.0, "send": 1.0},
        "instrumented": "split",
    }
    a, b = agent.shares(agents, process)
    assert (a["cpu_s"], b["cpu_s"]) == pytest.approx((1.2, 0.8))
    assert a["cpu_user_s"] + b["cpu_user_s"] == pytest.approx(1.5)
    assert a["cpu_split_s"]["receive"] + b["cpu_split_s"]["receive"] == pytest.approx(1.0)
    assert a["wakeups"] == b["wakeups"] == 7
    assert a["process"] == b["process"] == {"hosts": ["a", "b"], "cpu_s": 2.0}
    idle = [SimpleNamespace(frames={"received": 0}, cfg={"host": h}) for h in "xy"]
    assert [s["cpu_s"] for s in agent.shares(idle, process)] == [1.0, 1.0]
    # the run's CPU figures say that the agents measured themselves
    results = {"a": {**a, "jobs": [{"packets_sent": 30}]}, "b": {**b, "jobs": [{"packets_sent": 10}]}}
    assert cpu_per_packet(results, {})["agents_instrumented"] == ["split"]
    for r in results.values():
        del r["instrumented"]
    assert cpu_per_packet(results, {})["agents_instrumented"] == []
    # and where their per-frame work ran
    assert cpu_per_packet(results, {})["agents_frames"] == ["python"]
    results["a"]["frames_path"] = "c"
    assert cpu_per_packet(results, {})["agents_frames"] == ["c", "python"]


def _netns_inode():
    return os.stat("/proc/thread-self/ns/net").st_ino


def test_entering_a_namespace_comes_back_and_none_stays():
    home = _netns_inode()
    with netns.entered(None):
        assert _netns_inode() == home
    if os.geteuid() != 0:
        pytest.skip("entering a network namespace needs root")
    with netns.entered("/proc/self/ns/net"):
        assert _netns_inode() == home
    assert _netns_inode() == home
    with pytest.raises(FileNotFoundError), netns.entered("/nonexistent/ns/net"):
        pass
    assert _netns_inode() == home


def test_a_socket_made_inside_another_namespace_stays_there():
    import socket
    import subprocess
    import time

    if os.geteuid() != 0:
        pytest.skip("entering a network namespace needs root")
    home = _netns_inode()
    holder = subprocess.Popen(["unshare", "--net", "sleep", "30"])
    try:
        path = f"/proc/{holder.pid}/ns/net"
        deadline = time.monotonic() + 5
        while os.stat(path).st_ino == home:  # until unshare has made its namespace
            assert time.monotonic() < deadline, "unshare made no network namespace"
            time.sleep(0.01)
        with netns.entered(path):
            assert _netns_inode() == os.stat(path).st_ino
            names = [name for _, name in socket.if_nameindex()]
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
            inside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            inside.bind(("127.0.0.1", 0))
        assert _netns_inode() == home
        assert names == ["lo"]  # a new namespace has its loopback only
        # The same address and port are free here: the socket is over there.
        outside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        outside.bind(inside.getsockname())
        outside.close()
        inside.close()
    finally:
        holder.kill()
        holder.wait()


# A stand-in for an agent process at the boundary the runner sees: it says
# ready, takes the start line, says "done" for its hosts unless told to stay
# busy, then lingers, as an agent does, until SIGTERM or its own deadline.
# What ended it goes to a file.
STAND_IN = r"""
import json, signal, sys, time
out, busy, linger, hosts = sys.argv[1], sys.argv[2] == "busy", float(sys.argv[3]), sys.argv[4:]
ended = []
signal.signal(signal.SIGTERM, lambda *a: ended.append("signal"))
for h in hosts:
    print(json.dumps({"event": "ready", "host": h}), flush=True)
sys.stdin.readline()
if not busy:
    for h in hosts:
        print(json.dumps({"event": "done", "host": h}), flush=True)
deadline = time.monotonic() + linger
while not ended and time.monotonic() < deadline:
    time.sleep(0.01)
open(out, "w").write(ended[0] if ended else "deadline")
"""


class StandInNet:
    """What JobAgents asks of a fabric: start a process in a host."""

    def __init__(self, tmp_path, busy):
        self.tmp_path, self.busy = tmp_path, busy
        self.ended = {}  # a process's hosts -> the file that says what ended it

    def netns_of(self, host):
        return None

    def popen_in(self, host, argv, **kw):
        hosts = [os.path.basename(p)[len("agent-") : -len(".cfg.json")] for p in argv[5:]]
        out = self.tmp_path / f"ended-{host}"
        self.ended[tuple(hosts)] = out
        state = "busy" if self.busy & set(hosts) else "done"
        # A fabric with a busy host ends at the deadlines, 1 s; one without
        # would linger 30 s unless ended.
        linger = "1" if self.busy else "30"
        return subprocess.Popen([sys.executable, "-c", STAND_IN, str(out), state, linger, *hosts], **kw)


@pytest.mark.parametrize("busy", [set(), {"h1"}])
def test_agents_are_ended_together_once_every_host_is_done_and_not_before(tmp_path, monkeypatch, busy):
    """With every host's jobs done no peer waits for an ACK, so the runner
    ends the agents instead of letting them linger; while one host is
    still busy, none is ended (each stops at its own deadline)."""
    monkeypatch.setattr(drill_agents, "frames_library", lambda log: None)
    monkeypatch.setenv(PROCESSES_ENV, "2")
    net = StandInNet(tmp_path, busy)
    configs = {h: {"out": str(tmp_path / f"{h}.json")} for h in ("h0", "h1", "h2")}
    runners = drill_agents.JobAgents(net, configs, str(tmp_path), log=lambda *a: None)
    runners.start()
    runners.wait_ready(timeout=20)
    runners.go(0.0)
    assert runners.wait(timeout=20) == []
    ended = {hosts: out.read_text() for hosts, out in net.ended.items()}
    if busy:
        assert ended == {("h0", "h2"): "deadline", ("h1",): "deadline"}
        assert runners.done == {"h0", "h2"}
    else:
        assert ended == {("h0", "h2"): "signal", ("h1",): "signal"}
        assert runners.done == set(configs)
