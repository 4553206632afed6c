"""Path enumeration, the job announcement, and where the controller places
announced connections (ecmp versus precise), executed on fake switches."""

import dataclasses
import json
import os
import socket
import stat
import threading
from collections import Counter
from dataclasses import replace

import pytest
from app_harness import events, make_app
from fakeoftable import PARSER, FakeDatapath, installed_table

from controllers import channel, routing
from testbed.drill.announce import agent_pins, announcement, connections, fabric_links
from testbed.emulation import jobchannel
from testbed.fabric.build import build_fabric
from testbed.fabric.paths import compute_routes, enumerate_paths
from testbed.fabric.records import Job
from testbed.results.counters import egress_bytes, max_mean
from testbed.schedule import placement
from traffic import collectives
from traffic.transfers import flow_sport

CROSS = ["s0h0", "s1h0", "s0h1", "s1h1", "s0h2", "s1h2", "s0h3", "s1h3"]


def job(name, hosts=CROSS, paths="ecmp", collective="ring", nbytes=1_000_000, port=None):
    return Job(
        name=name,
        hosts=tuple(hosts),
        collective=collective,
        bytes=nbytes,
        bytes_real=nbytes,
        port=port,
        compute_s=0.1,
        paths=paths,
    )


@pytest.fixture(scope="module")
def hpn():
    fabric = build_fabric({"kind": "hpn"})
    return fabric, compute_routes(fabric)


# --- paths.enumerate_paths ------------------------------------------------------------
def test_paths_per_plane_cover_every_equal_cost_branch(hpn):
    fabric, routes = hpn
    dst = fabric.nics_of("s1h0")[0].ip
    for plane, port in enumerate(fabric.nics_of("s0h0")[0].ports):
        paths = enumerate_paths(fabric, routes, port, dst)
        # ToR, one of the plane's 2 aggs, the destination's ToR of that plane
        assert len(paths) == 2
        assert {hops[1][0] for hops in paths} == {f"a{plane}n0", f"a{plane}n1"}
        for hops in paths:
            assert [fabric.nodes[s].plane for s, _ in hops] == [plane] * 3
            assert hops[-1][0] == f"t1r0k{plane}"
    # inside a segment: one path, through the ToR alone
    assert enumerate_paths(fabric, routes, "s0h0-n0p0", fabric.nics_of("s0h1")[0].ip) == [(("t0r0k0", 2),)]


def test_no_path_from_a_dead_port_or_to_an_unknown_address(hpn):
    fabric, routes = hpn
    dst = fabric.nics_of("s1h0")[0].ip
    assert enumerate_paths(fabric, routes, "s0h0-n0p0", dst, down_ports={("t0r0k0", 1)}) == []
    assert enumerate_paths(fabric, routes, "s0h0-n0p0", "10.9.9.9") == []


# --- the announcement -----------------------------------------------------------------
def test_connections_follow_the_schedule_and_the_agents_source_ports(hpn):
    fabric, _ = hpn
    flows = connections(job("a", collective="halving-doubling"), 3, fabric)
    schedule = collectives.for_job("halving-doubling", 8, 1_000_000)
    for rank in range(8):
        mine = [f for f in flows if f["rank"] == rank]
        sent = Counter()
        for s in schedule.send_steps(rank):
            sent[s.peer] += s.nbytes
        assert {f["peer"]: f["bytes"] for f in mine} == dict(sent)
        for f in mine:
            assert f["sport"] == flow_sport(3, f["peer"], rank)
            assert f["src"] == fabric.nics_of(CROSS[rank])[0].ip
            assert f["dst"] == fabric.nics_of(CROSS[f["peer"]])[0].ip


def test_fabric_links_are_the_switch_to_switch_links_a_job_could_use(hpn):
    fabric, _ = hpn
    inside = ["s0h0", "s0h1"]
    links = fabric_links(fabric, announcement(fabric, [job("x"), job("in", hosts=inside)]))
    # crossing: every ToR uplink and every agg downlink; inside a segment: none
    assert len(links["x"]) == 16 and links["in"] == []
    assert all(name.startswith(("t", "a")) for name in links["x"])


# --- placement ------------------------------------------------------------------------
def test_precise_pins_every_connection_to_its_own_path(hpn):
    fabric, routes = hpn
    answer, pins, _ = placement.place(fabric, routes, announcement(fabric, [job("p", paths="precise")]))
    (placed,) = answer["jobs"]
    used = Counter(link for f in placed["flows"] for link in f["path"])
    # 8 connections, 4 each way, over 4 paths each way: no link twice
    assert len(placed["flows"]) == 8 and max(used.values()) == 1
    for f in placed["flows"]:
        assert f["candidates"] == 4 and f["path"][0] == f["port"]
    # a 5-tuple rule only where the route had a choice: the source ToR
    assert sorted(pins) == ["t0r0k0", "t0r0k1", "t1r0k0", "t1r0k1"]
    for switch, rules in pins.items():
        for (dst, _src, _sport), ports in rules.items():
            assert sorted(ports) == sorted(routes.tables[switch][dst]) and len(ports) == 2


def test_ecmp_pins_nothing_and_the_agents_hash(hpn):
    fabric, routes = hpn
    answer, pins, _ = placement.place(fabric, routes, announcement(fabric, [job("e")]))
    assert pins == {}
    assert all("port" not in f and f["candidates"] == 4 for f in answer["jobs"][0]["flows"])
    assert agent_pins(fabric, answer) == {}


def test_a_job_pinned_to_one_nic_port_stays_in_that_plane(hpn):
    fabric, routes = hpn
    answer, _, _ = placement.place(fabric, routes, announcement(fabric, [job("p", paths="precise", port=1)]))
    assert all(f["port"].endswith("p1") and f["candidates"] == 2 for f in answer["jobs"][0]["flows"])


def test_precise_avoids_a_down_link_and_loads_the_emptiest_paths_first(hpn):
    fabric, _ = hpn
    down = frozenset({("t0r0k0", 5)})  # t0r0k0's uplink to a0n0
    routes = compute_routes(fabric, down)
    two = announcement(
        fabric,
        [job("big", paths="precise", nbytes=4_000_000), job("small", paths="precise", nbytes=1_000_000)],
    )
    answer, _, _ = placement.place(fabric, routes, two, down)
    for j in answer["jobs"]:
        assert all("t0r0k0-e5" not in f["path"] for f in j["flows"])
    # 3 live paths each way for 4 connections of each job. The busier job
    # (the more intense) chose first: 2 of its connections share one path,
    # and the other job's fill the two paths it left lighter first.
    big, small = ([f["path"] for f in j["flows"]] for j in answer["jobs"])
    uplinks = Counter(p[1] for p in big)
    assert sorted(uplinks.values()) == [1, 1, 1, 1, 2, 2]
    small_uplinks = Counter(p[1] for p in small)
    assert all(small_uplinks[u] >= 1 for u, n in uplinks.items() if n == 1)


def test_agent_pins_name_the_nic_port_per_peer(hpn):
    fabric, routes = hpn
    answer, _, _ = placement.place(fabric, routes, announcement(fabric, [job("p", paths="precise")]))
    pins = agent_pins(fabric, answer)["p"]
    assert sorted(pins) == sorted(CROSS)
    for f in answer["jobs"][0]["flows"]:
        assert fabric.nics_of(f["src_host"])[0].ports[pins[f["src_host"]][f["peer"]]] == f["port"]


def test_pins_run_in_the_switch_tables(hpn):
    """Executed on a fake ToR: a pinned connection leaves by its chosen
    uplink, stays on it while that port lives and fails over when it dies;
    any other source port still takes the select group."""
    fabric, routes = hpn
    answer, pins, _ = placement.place(fabric, routes, announcement(fabric, [job("p", paths="precise")]))
    dp = FakeDatapath(1)
    from controllers import openflow

    for m in openflow.base_flows(dp):
        dp.send_msg(m)
    ops, _ = routing.diff_switch(
        routing.SwitchProgram(), routing.wanted_table(routes, "t0r0k0", pins["t0r0k0"])
    )
    for m in openflow.messages_for(dp, ops):
        dp.send_msg(m)
    for (dst, src, sport), ports in pins["t0r0k0"].items():
        assert dp.forward(1, dst, set(), src=src, sport=sport) == [ports[0]]
        assert dp.forward(1, dst, {ports[0]}, src=src, sport=sport) == [ports[1]]
        assert sorted(dp.forward(1, dst, set(), src=src, sport=sport + 1)) == [5, 6]
    assert len([k for k in installed_table(dp) if isinstance(k, routing.Pin)]) == 2


# --- counters -------------------------------------------------------------------------
def test_egress_bytes_and_max_mean():
    samples = [
        (0.0, {"a": (0, 0, 0), "b": (10, 0, 0)}),
        (1.0, {"a": (50, 0, 0), "b": (20, 0, 0)}),
        (2.0, {"a": (100, 0, 0), "b": (110, 0, 0)}),
    ]
    assert egress_bytes(samples, ["a", "b", "c"]) == {"a": 100, "b": 100}
    assert egress_bytes(samples, ["a", "b"], 1.0, 2.0) == {"a": 50, "b": 90}
    assert max_mean({"a": 100, "b": 100}) == 1.0
    assert max_mean({"a": 300, "b": 0, "c": 0}) == 3.0
    assert max_mean({"a": 0}) is None and max_mean({}) is None


# --- the channel ----------------------------------------------------------------------
def test_the_channel_is_root_only_and_answers_each_request(tmp_path):
    got = []

    def handle(request, reply):
        got.append(request)
        if request["announce"].get("bad"):
            raise ValueError("no such job")
        # answered later, from another thread, as the controller does
        threading.Timer(0.01, reply, args=({"version": 3, "jobs": []},)).start()

    path = str(tmp_path / "jobs.sock")
    server = channel.serve(path, handle)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert jobchannel.announce(path, {"jobs": []}, timeout=5) == {"version": 3, "jobs": []}
        with pytest.raises(jobchannel.JobChannelError, match="refused the jobs: ValueError: no such job"):
            jobchannel.announce(path, {"bad": 1}, timeout=5)
        assert got == [{"announce": {"jobs": []}}, {"announce": {"bad": 1}}]
    finally:
        server.close()


def test_the_channel_reaches_a_socket_with_a_long_path(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "jobs.sock")
    assert len(path) > jobchannel.MAX_SOCKET_PATH
    server = channel.serve(path, lambda request, reply: reply({"version": 1, "jobs": []}))
    try:
        assert jobchannel.announce(path, {"jobs": []}, timeout=5)["version"] == 1
    finally:
        server.close()


def test_no_controller_is_a_clear_error(tmp_path):
    with pytest.raises(jobchannel.JobChannelError, match="cannot reach the controller's job channel"):
        jobchannel.announce(str(tmp_path / "nobody.sock"), {"jobs": []}, timeout=1)


def test_an_unreadable_request_is_answered_with_an_error(tmp_path):
    path = str(tmp_path / "jobs.sock")
    server = channel.serve(path, lambda request, reply: reply({}))
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            s.sendall(b"[1, 2\n")
            answer = json.loads(s.makefile().readline())
        assert answer["error"].startswith("unreadable request")
    finally:
        server.close()


# --- the controller with jobs ---------------------------------------------------------
def announce_to(app, jobs):
    replies = []
    app.on_announce({"announce": jobs}, replies.append)
    return replies


@pytest.fixture
def channel_app(tmp_path, monkeypatch):
    """make(): a controller on fake switches that listens on a job channel
    in tmp_path; every channel opened is closed after the test."""
    monkeypatch.setenv("HPNLAB_JOBS_SOCKET", str(tmp_path / "jobs.sock"))
    opened = []

    def make(harness=None):
        h = harness() if harness else make_app(tmp_path, monkeypatch, {"kind": "hpn"})
        opened.append(h.app)
        return h

    yield make
    for app in opened:
        app.channel.close()


def test_the_controller_answers_once_the_pins_are_acknowledged(tmp_path, channel_app, capsys):
    h = channel_app()
    h.connect()
    events(capsys)
    jobs = announcement(h.fabric, [job("p", paths="precise"), job("e")])
    replies = announce_to(h.app, jobs)
    assert replies == []  # sent, not yet acknowledged
    (ev, early) = events(capsys)
    assert ev == {"event": "jobs", "jobs": 2, "flows": 16, "pinned": 8}
    h.ack_all()
    (answer,) = replies
    assert answer["version"] == early["version"]
    assert [j["paths"] for j in answer["jobs"]] == ["precise", "ecmp"]
    # what the switches hold is what the answer says
    _, pins, _ = placement.place(h.fabric, compute_routes(h.fabric), jobs)
    for name, dp in h.dps.items():
        assert installed_table(dp) == routing.wanted_table(compute_routes(h.fabric), name, pins.get(name))
    # the jobs are kept beside the socket, for the controller's own restart
    kept = json.loads((tmp_path / "jobs.sock.json").read_text())
    assert kept["announce"] == jobs
    assert kept["paths"] == {"p": {f["name"]: f["path"] for f in answer["jobs"][0]["flows"]}, "e": {}}
    assert stat.S_IMODE(os.stat(tmp_path / "jobs.sock.json").st_mode) == 0o600


@pytest.mark.parametrize("during_fault", [False, True])
def test_a_restarted_controller_keeps_the_pins_without_touching_them(channel_app, capsys, during_fault):
    """Also when it restarts while a fault has moved some connections: it
    places them as its predecessor did (from the paths kept beside the
    socket), not afresh."""
    from app_harness import Harness

    from controllers.hpn_app import HpnController

    first = channel_app()
    first.connect()
    announce_to(first.app, announcement(first.fabric, [job("p", paths="precise")]))
    first.ack_all()
    if during_fault:
        first.dead.add(("a0n0", 1))
        first.port_status("a0n0", 1, up=False)
        first.ack_all()
        assert first.app.core.answer != first.app.core.placed[(frozenset(), None)][0]  # something moved
    first.app.channel.close()
    before = {n: dp.ages() for n, dp in first.dps.items()}
    events(capsys)
    again = channel_app(lambda: Harness(first.fabric, HpnController()))
    again.dps = first.dps
    if during_fault:
        again.dead = set(first.dead)
    again.connect()
    assert events(capsys)[-1]["changes"] == 0
    assert {n: dp.ages() for n, dp in again.dps.items()} == before


def test_a_fault_moves_only_the_connections_it_breaks_and_mending_it_puts_them_back(
    channel_app, capsys, monkeypatch
):
    h = channel_app()
    h.connect()
    announce_to(h.app, announcement(h.fabric, [job("p", paths="precise")]))
    h.ack_all()

    def paths():
        return {f["name"]: f["path"] for f in h.app.core.answer["jobs"][0]["flows"]}

    whole = paths()
    (cable,) = [(l.a.ifname, l.b.ifname) for l in h.fabric.links_of("a0n0") if l.end("a0n0").port == 1]
    broken = {n for n, p in whole.items() if set(cable) & set(p)}
    assert broken and len(broken) < len(whole)
    calls = Counter()
    place = placement.place
    monkeypatch.setattr(placement, "place", lambda *a, **k: calls.update(["place"]) or place(*a, **k))
    for _flap in range(3):
        h.port_status("a0n0", 1, up=False)
        h.ack_all()
        during = paths()
        assert {n for n in whole if during[n] != whole[n]} == broken
        assert not any(set(cable) & set(p) for p in during.values())
        h.port_status("a0n0", 1, up=True)
        h.ack_all()
        assert paths() == whole
    # one placement per set of down ports, however often the link flaps
    assert calls["place"] == 1


def test_jobs_that_cannot_be_placed_are_refused(channel_app, capsys):
    h = channel_app()
    h.connect()
    bad = announcement(h.fabric, [job("p", paths="precise")])
    bad["jobs"][0]["flows"][0]["bytes"] = -1
    (reply,) = announce_to(h.app, bad)
    assert "cannot place the jobs" in reply["error"] and "bytes" in reply["error"]
    assert h.app.core.jobs is None
    (reply,) = announce_to(h.app, {"jobs": 1})
    assert reply["error"].startswith("expected")


# --- classes: Crux priorities, rewritten in table 0 ------------------------------------
def crux_jobs_announced(fabric):
    # the same traffic from the same NIC ports (so they contend for those
    # links); the one that computes longer per byte is more intense and
    # wins the higher class
    intense = replace(job("intense", hosts=CROSS[:4], port=0), priority="crux", compute_s=0.4)
    light = replace(job("light", hosts=CROSS[:4], port=0), priority="crux", compute_s=0.05)
    plain = job("plain", hosts=["s0h0", "s0h1"])
    jobs = announcement(fabric, [intense, light, plain])
    jobs["classes"] = [46, 26, 0]
    return jobs


def test_crux_classes_rank_by_intensity_and_rewrite_at_the_first_switch(hpn):
    fabric, routes = hpn
    jobs = crux_jobs_announced(fabric)
    answer, _, marks = placement.place(fabric, routes, jobs)
    by_name = {j["name"]: j for j in answer["jobs"]}
    assert by_name["intense"]["class"] < by_name["light"]["class"]
    assert by_name["intense"]["intensity"] > by_name["light"]["intensity"]
    assert by_name["intense"]["dscp"] == 46 and "class" not in by_name["plain"]
    # every connection that changes class, at each ToR its NIC's ports
    # (the job's pinned one, if any) hang off
    for j in jobs["jobs"]:
        for f in j["flows"]:
            tors = {
                l.other(f["src_host"]).node
                for l in fabric.links_of(f["src_host"])
                if j["pinned_port"] in (None, l.end(f["src_host"]).port)
            }
            key = (f["dst"], f["src"], f["sport"])
            want = by_name[j["name"]].get("dscp", j["dscp"])
            found = {t for t in marks if key in marks[t]}
            assert found == (tors if want != j["dscp"] else set())
            assert all(marks[t][key] == want for t in found)


def test_a_rewritten_connection_leaves_in_its_class(hpn):
    from controllers import openflow

    fabric, routes = hpn
    jobs = crux_jobs_announced(fabric)
    _, pins, marks = placement.place(fabric, routes, jobs)
    dp = FakeDatapath(1)
    for m in openflow.base_flows(dp):
        dp.send_msg(m)
    wanted = routing.wanted_table(routes, "t0r0k0", pins.get("t0r0k0"), marks.get("t0r0k0"))
    ops, _ = routing.diff_switch(routing.SwitchProgram(), wanted)
    for m in openflow.messages_for(dp, ops):
        dp.send_msg(m)
    assert marks["t0r0k0"]
    for (dst, src, sport), dscp in marks["t0r0k0"].items():
        assert dp.forward(1, dst, set(), src=src, sport=sport, dscp=26)
        assert dp.dscp_out == dscp
        dp.forward(1, dst, set(), src=src, sport=sport + 1, dscp=26)
        assert dp.dscp_out == 26  # another connection keeps its DSCP
    # read back as the same program: a restart adopts the rewrites as they are
    base, held, _, strays = openflow.read_state(dp, dp.flow_stats(), dp.group_desc())
    assert strays == [] and base == {"arp", "next"}
    assert {k: v for k, v in held.items() if isinstance(k, routing.Mark)} == {
        routing.Mark(*key): routing.SetDscp(dscp) for key, dscp in marks["t0r0k0"].items()
    }


def test_the_shim_reads_the_marks_counters_for_crux_as_it_runs(channel_app):
    """Crux as it runs: a tick asks every switch holding marks for its
    table-0 counters; their reply reaches the core under the request's xid."""
    from types import SimpleNamespace

    from app_harness import event

    h = channel_app()
    h.connect()
    jobs = [dataclasses.replace(job("c", paths="precise", port=0), priority="crux")]
    ann = announcement(h.fabric, jobs)
    ann["classes"] = [46, 34]
    ann["crux_running"] = {"window_s": 1.0, "idle_s": 1.0, "poll_s": 0.05}
    announce_to(h.app, ann)
    h.ack_all()
    holders = sorted(n for n, m in h.app.core.marks.items() if m)
    assert holders  # a crux job's connections are counted even in the class they already have
    h.mark()
    h.app._carry_out(h.app.core.tick(0.0))
    asked = {n: [m for m in h.new(n) if isinstance(m, PARSER.OFPFlowStatsRequest)] for n in holders}
    assert all(len(reqs) == 1 and reqs[0].table_id == 0 for reqs in asked.values())
    for name in holders:
        (req,) = asked[name]
        body = [
            SimpleNamespace(table_id=f.table_id, priority=f.priority, match=f.match, byte_count=123)
            for f in h.dps[name].flow_stats()
        ]
        h.app.on_flow_stats(event(datapath=h.dps[name], body=body, flags=0, xid=req.xid))
    assert h.app.core.counting == {} and h.app.counting == {}
    seen = h.app.core.crux.last_bytes
    assert seen and all(v > 0 for v in seen.values())


# --- paths: via (the policy written by hand) ----------------------------------------
BALANCED = {"s0h0": "a0n0", "s0h1": "a0n1", "s0h2": "a1n0", "s0h3": "a1n1"}


def via_job(name, rules):
    return dataclasses.replace(
        job(name),
        paths="via",
        via=tuple((k, (v,) if isinstance(v, str) else tuple(v)) for k, v in rules.items()),
    )


def test_via_pins_each_ruled_connection_through_its_switches_and_hashes_the_rest(hpn):
    fabric, routes = hpn
    rules = {**BALANCED, "s1h0": "a0n0", "s1h1>s0h2": ["t1r0k1", "a1n1"]}
    answer, pins, _ = placement.place(fabric, routes, announcement(fabric, [via_job("v", rules)]))
    flows = {f["name"]: f for f in answer["jobs"][0]["flows"]}
    assert answer["jobs"][0]["paths"] == "via"
    for src, agg in BALANCED.items():
        (flow,) = [f for name, f in flows.items() if name.startswith(src + ">")]
        plane = int(agg[1])
        # out of the NIC port of the agg's plane, then that plane's ToR, the agg, the far ToR
        assert flow["port"] == f"{src}-n0p{plane}"
        assert [link.split("-")[0] for link in flow["path"][1:]] == [f"t0r0k{plane}", agg, f"t1r0k{plane}"]
    assert flows["s1h1>s0h2"]["port"] == "s1h1-n0p1"  # its rule names plane 1's ToR and agg
    assert "port" not in flows["s1h2>s0h3"] and "port" not in flows["s1h3>s0h0"]  # no rule: hashed
    assert sum(len(r) for r in pins.values()) == 6


def test_a_rule_for_the_connection_wins_over_the_hosts(hpn):
    fabric, routes = hpn
    answer, _, _ = placement.place(
        fabric, routes, announcement(fabric, [via_job("v", {"s0h0": "a0n0", "s0h0>s1h0": "a1n1"})])
    )
    (flow,) = [f for f in answer["jobs"][0]["flows"] if f["name"] == "s0h0>s1h0"]
    assert flow["port"] == "s0h0-n0p1"


def test_a_rule_no_live_path_meets_is_hashed_and_said(hpn):
    fabric, _ = hpn
    down = frozenset({("t0r0k0", 5), ("t0r0k0", 6)})  # both of t0r0k0's uplinks
    routes = compute_routes(fabric, down)
    answer, _, _ = placement.place(
        fabric, routes, announcement(fabric, [via_job("v", {"s0h0": "a0n0"})]), down
    )
    (flow,) = [f for f in answer["jobs"][0]["flows"] if f["name"] == "s0h0>s1h0"]
    assert flow.get("via_unmet") and "port" not in flow


def test_a_precise_job_chooses_around_a_via_jobs_connections(hpn):
    fabric, routes = hpn
    both = [via_job("v", {"s0h0": "a0n0"}), job("p", hosts=["s0h1", "s1h1"], paths="precise")]
    answer, _, _ = placement.place(fabric, routes, announcement(fabric, both))
    ruled = next(f for f in answer["jobs"][0]["flows"] if f["name"] == "s0h0>s1h0")
    chosen = next(f for f in answer["jobs"][1]["flows"] if f["name"] == "s0h1>s1h1")
    assert not set(ruled["path"][1:]) & set(chosen["path"][1:])
