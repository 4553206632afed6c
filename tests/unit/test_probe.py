"""Probe gaps around named faults (testbed.results.probe), the scenario
checks for probes and fault names, and the probe processes themselves."""

import json
import socket
import struct
import subprocess
import sys
import time

import pytest
from entries import evaluate

from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario
from testbed.results.probe import fault_windows, flow_gap, gap_metrics, probe_results
from traffic import nic, probe

T0 = 1000.0


def fault(name, at, action="link-down", link=("t0r0k0", "a0n0")):
    return {
        "name": name,
        "at": at,
        "issued_at": at,
        "applied_at": at + 0.002,
        "action": action,
        "link": list(link),
        "index": 0,
    }


def steady(rate, start, end, holes=()):
    """Send times every 1/rate s in [start, end) and the arrivals (1 ms
    later) except for sends that fall in a hole (a, b)."""
    sent = [start + k / rate for k in range(int((end - start) * rate))]
    arrived = [[i, T0 + t + 0.001] for i, t in enumerate(sent) if not any(a <= t < b for a, b in holes)]
    return [T0 + t for t in sent], arrived


def record(*flows):
    rec = {"rate": 100, "flows": len(flows), "sent": {}, "arrivals": {}}
    for i, (sent, arrived) in enumerate(flows):
        rec["sent"][str(i)] = sent
        rec["arrivals"][str(i)] = arrived
    return rec


def test_flow_gap_spans_the_fault_and_counts_a_flow_cut_off_to_the_end():
    assert flow_gap([1.0, 1.01, 1.05, 1.06], [], 1.02, 2.0) == pytest.approx(0.04)
    # nothing arrives after 1.01 while the sender keeps going: cut off to the window's end
    assert flow_gap([1.0, 1.01], [1.0, 1.01, 1.02, 1.5], 1.02, 2.0) == pytest.approx(0.99)


def test_windows_group_faults_by_name_and_end_at_the_next_fault():
    fs = [
        fault("a", 2),
        fault("agg", 6),
        fault("agg", 6.004, link=("t1r0k0", "a0n0")),
        fault("a_back", 4, "link-up"),
        {**fault(None, 9), "name": None},
    ]
    got = [(n, s, e, len(f)) for n, s, e, f in fault_windows(fs, 12)]
    assert got == [("a", 2, 4, 1), ("a_back", 4, 6, 1), ("agg", 6, 9, 2)]


def test_the_gap_is_the_worst_flow_and_the_loss_is_counted_by_sequence_number():
    hit = steady(100, 0, 6, holes=[(2.0, 2.03)])  # 3 packets lost
    clean = steady(100, 0, 6)
    out = probe_results([record(hit, clean)], [fault("tor_agg", 2.0)], T0, 6.0)
    f = out["faults"]["tor_agg"]
    assert f["gap_ms"] == pytest.approx(40, abs=0.5)  # 1.99 -> 2.03
    assert f["lost"] == 3 and f["flows_hit"] == 1
    assert out["base_gap_ms"] == pytest.approx(10, abs=0.5) and out["base_lost"] == 0
    assert gap_metrics(out) == {"tor_agg_gap_ms": f["gap_ms"]}


def test_a_link_down_the_probes_did_not_cross_has_no_gap():
    flows = [steady(100, 0, 6)]
    samples = [(t / 10, {"x": (0, 0, 0), "y": (0, 0, 0)}) for t in range(60)]
    out = probe_results([record(*flows)], [fault("tor_agg", 3.0)], T0, 6.0, samples, lambda f: ["x", "y"])
    f = out["faults"]["tor_agg"]
    assert f["gap_ms"] is None and "not on the probes' paths" in f["why_none"]
    (res,) = evaluate([{"metric": "gap_ms", "fault": "tor_agg", "max": 50}], {"probe": out}, True)
    assert res["status"] == "failed" and "not on the probes' paths" in res["reason"]
    # the same link carrying 100 probe packets/s: measured
    samples = [(t / 10, {"x": (int(t * 10 * 106), 0, 0)}) for t in range(60)]
    out = probe_results([record(*flows)], [fault("tor_agg", 3.0)], T0, 6.0, samples, lambda f: ["x"])
    assert out["faults"]["tor_agg"]["crossing_pps"] == pytest.approx(100)
    assert out["faults"]["tor_agg"]["gap_ms"] == pytest.approx(10, abs=0.5)


def test_what_a_failed_link_carried_after_the_fault_is_measured_apart():
    flows = [steady(100, 0, 6)]
    # 100 probe packets/s until 3 s, then nothing (the link is down)
    samples = [(t / 10, {"x": (int(min(t, 30) * 10 * 106), 0, 0)}) for t in range(60)]
    f = probe_results([record(*flows)], [fault("tor_agg", 3.0)], T0, 6.0, samples, lambda f: ["x"])["faults"]
    assert f["tor_agg"]["crossing_pps"] == pytest.approx(100) and f["tor_agg"]["crossing_after_pps"] == 0
    # a link that went on carrying them (the fault did not take it out)
    samples = [(t / 10, {"x": (int(t * 10 * 106), 0, 0)}) for t in range(60)]
    f = probe_results([record(*flows)], [fault("tor_agg", 3.0)], T0, 6.0, samples, lambda f: ["x"])["faults"]
    assert f["tor_agg"]["crossing_after_pps"] == pytest.approx(100)


HEAD = "name: p\ntopology: {kind: hpn}\nduration: 10\n"


@pytest.mark.parametrize(
    "body, field, text",
    [
        ("probes: [{src: s0h0, dst: s0h0}]\n", "probes[0].dst", "other than the source"),
        ("probes: [{src: s0h0, dst: nope}]\n", "probes[0].dst", "not in the topology"),
        ("probes: [{src: s0h0, dst: s1h0, rate: 10, flows: 20}]\n", "probes[0].flows", "at most rate"),
        (
            "probes: [{src: s0h0, dst: s1h0}]\nfaults: [{at: 2, action: link-down, link: [s0h0, t0r0k0], "
            "name: x}, {at: 3, action: link-down, link: [s1h0, t1r0k0], name: x}]\n",
            "faults[1].name",
            "must share at and action",
        ),
        (
            "probes: [{src: s0h0, dst: s1h0}]\nexpect: [{metric: gap_ms, max: 50}]\n",
            "expect[0].fault",
            "name the fault",
        ),
        (
            "probes: [{src: s0h0, dst: s1h0}]\nexpect: [{metric: gap_ms, fault: y, max: 50}]\n",
            "expect[0].fault",
            "no fault is named 'y'",
        ),
        (
            "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, bytes: 1GB}]\n"
            "faults: [{at: 2, action: link-down, link: [s0h0, t0r0k0], name: x}]\n"
            "expect: [{metric: gap_ms, fault: x, max: 50}]\n",
            "expect[0].metric",
            "add probes",
        ),
        (
            "probes: [{src: s0h0, dst: s1h0}]\nfaults: [{at: 2, action: link-down, link: [s0h0, t0r0k0], "
            "name: Bad-name}]\n",
            "faults[0].name",
            "lowercase",
        ),
    ],
)
def test_probe_and_fault_name_mistakes_are_named(tmp_path, body, field, text):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + body)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    lines = [str(p) for p in err.value.problems]
    assert any(f": {field}: " in line and text in line for line in lines), lines


def test_the_failover_probe_scenario_loads():
    sc = load_scenario("scenarios/failover-probe.yaml")
    assert [p["flows"] for p in sc.probes] == [8, 8]
    assert sorted({f.name for f in sc.faults}) == [
        "agg",
        "agg_back",
        "host_link",
        "host_link_back",
        "tor_agg",
        "tor_agg_back",
    ]


def test_a_baseline_loss_is_the_emulators_only_while_the_path_still_delivered():
    # one packet lost mid-baseline (later ones of its flow arrived), and
    # the last one sent before the fault, still on its way when the link went
    sent, arrived = steady(100, 0, 6, holes=[(1.5, 1.505), (1.985, 2.005)])  # 1.5; 1.99 and 2.0
    out = probe_results([record((sent, arrived))], [fault("tor_agg", 2.0)], T0, 6.0)
    assert out["base_lost"] == 1  # 1.5 only
    assert out["faults"]["tor_agg"]["lost"] == 1  # the fault's count starts when it was issued


# --- the probe processes themselves (traffic/probe.py), on loopback -------


def test_an_arrival_is_the_kernels_stamp_on_the_monotonic_clock():

    half_a_second_ago = time.clock_gettime(time.CLOCK_REALTIME) - 0.5
    sec = int(half_a_second_ago)
    stamp = struct.pack("@qq", sec, int((half_a_second_ago - sec) * 1e9))
    got = probe.arrival_time([(socket.SOL_SOCKET, probe.SO_TIMESTAMPNS, stamp)])
    assert abs(got - (time.monotonic() - 0.5)) < 0.05
    # no stamp among the ancillary data: the time it was read
    before = time.monotonic()
    assert before <= probe.arrival_time([]) <= time.monotonic()


def test_a_sender_probes_every_flow_in_rounds_and_every_packet_arrives_stamped(tmp_path):

    flows, rate = 4, 200  # a round every 20 ms
    prober = [sys.executable, "-m", "traffic.probe"]
    port = free_udp_port(1 + flows)  # the receiver's, then the flows' source ports
    sport = port + 1
    recv = subprocess.Popen(
        [*prober, "recv", "--bind", "127.0.0.1", "--port", str(port), "--out", str(tmp_path / "recv.json")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert recv.stdout.readline().strip() == "ready"
        start = time.monotonic() + 0.2
        until = start + 0.4
        recv.stdin.write(f"{until + 0.3}\n")
        recv.stdin.flush()
        sender = [*prober, "send", "--src", "127.0.0.1", "--dst", "127.0.0.1", "--port", str(port)]
        sender += ["--sport", str(sport), "--rate", str(rate), "--flows", str(flows)]
        sender += ["--start", str(start), "--until", str(until), "--out", str(tmp_path / "send.json")]
        subprocess.run(sender, check=True, timeout=30)
        assert recv.wait(timeout=30) == 0
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    done = time.monotonic()
    sent = json.loads((tmp_path / "send.json").read_text())["sent"]
    arrivals = json.loads((tmp_path / "recv.json").read_text())["arrivals"]
    assert sorted(sent) == sorted(arrivals) == [str(f) for f in range(flows)]
    rounds = {len(times) for times in sent.values()}
    assert len(rounds) == 1 and rounds.pop() >= 10  # every flow in every round
    # each round's packets leave together, not one flow per 1/rate
    spread = sorted(sent[str(flows - 1)][i] - sent["0"][i] for i in range(len(sent["0"])))
    assert spread[len(spread) // 2] < 0.25 / rate
    for flow, got in arrivals.items():
        assert [seq for seq, _ in got] == list(range(len(sent[flow])))  # loopback loses nothing
        for seq, t in got:
            # stamped by the kernel after it was sent, on the same clock
            assert sent[flow][seq] - 0.001 <= t <= done


def free_udp_port(count=1):
    """The first of `count` consecutive UDP ports free on loopback now."""

    for first in range(42000, 43000, count):
        socks = []
        try:
            for p in range(first, first + count):
                socks.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
                socks[-1].bind(("127.0.0.1", p))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free UDP ports on loopback")


def test_a_sender_spreads_its_flows_over_every_port_the_kernel_uses():

    # candidates 100.. as the kernel routes them: port 7 takes 6 of the first 8
    oif_of = {100: 7, 101: 7, 102: 7, 103: 9, 104: 7, 105: 7, 106: 9, 107: 7, 108: 9, 109: 9}
    assert probe.spread_sports(oif_of, 4) == [100, 103, 101, 106]
    assert probe.spread_sports(oif_of, 8) == [100, 103, 101, 106, 102, 108, 104, 109]
    # one port runs out of candidates: the others fill the rest, in order
    assert probe.spread_sports({1: 7, 2: 9, 3: 9, 4: 9}, 4) == [1, 2, 3, 4]
    # ports the kernel gave no answer for come last, and only when needed
    assert probe.spread_sports({1: None, 2: 7, 3: 7}, 2) == [2, 3]
    assert probe.spread_sports({1: None, 2: 7}, 2) == [2, 1]
    assert probe.spread_sports({1: None, 2: None}, 2) == [1, 2]


def test_a_sender_that_cannot_ask_its_kernel_takes_consecutive_ports(monkeypatch):

    def no_netlink(*args):
        raise PermissionError("no netlink here")

    monkeypatch.setattr(nic, "kernel_oifs", no_netlink)
    assert probe.pick_sports("10.0.0.1", "10.0.1.1", 7100, 20000, 3) == [20000, 20001, 20002]


def test_the_kernels_choice_of_port_is_asked_per_source_port(monkeypatch):

    lo = socket.if_nametoindex("lo")
    assert nic.kernel_oifs("127.0.0.1", "127.0.0.1", 7100, socket.IPPROTO_UDP, [20000, 20001]) == {
        20000: lo,
        20001: lo,
    }
    # each query names its own source port and sequence number, and each
    # answer is read as that port's
    asked = []

    def answer(query, request, seq):
        sport = int.from_bytes(request[-12:-10], "big")  # RTA_SPORT's payload, then RTA_DPORT
        asked.append((seq, sport))
        return None if sport == 20001 else "reply"

    monkeypatch.setattr(nic, "ask_route", answer)
    monkeypatch.setattr(nic, "route_oif", lambda reply: 5)
    assert nic.kernel_oifs("10.0.0.1", "10.0.1.1", 7100, socket.IPPROTO_UDP, [20000, 20001, 20002]) == {
        20000: 5,
        20001: None,
        20002: 5,
    }
    assert asked == [(1, 20000), (2, 20001), (3, 20002)]
