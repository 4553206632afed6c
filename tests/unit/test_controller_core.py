"""The controller's pure core (controllers/core.py), driven with plain
values: no os-ken, no datapath, connections are bare objects."""

import os
import stat
import sys

import pytest

from controllers import core, routing
from testbed.drill.announce import announcement
from testbed.fabric.build import build_fabric
from testbed.fabric.paths import compute_routes
from testbed.fabric.records import Job

HOSTS = ["s0h0", "s1h0", "s0h1", "s1h1"]


class Conn:
    """A connection handle: the core only compares them and asks whether
    they are open."""

    def __init__(self, name):
        self.name, self.active = name, True

    def __repr__(self):
        return f"Conn({self.name})"


def is_active(conn):
    return conn.active


def of(kind, actions):
    return [a for a in actions if isinstance(a, kind)]


def emitted(actions, name=None):
    return [a.event for a in of(core.Emit, actions) if name is None or a.event["event"] == name]


def ports_of(fabric, name, down=()):
    return [
        core.PortState(p, (name, p) not in down)
        for p in sorted({l.end(name).port for l in fabric.links_of(name)})
    ]


def connect_all(ctl, fabric, tables=None):
    """Every switch connects, reports empty tables (or `tables`) and its
    ports; returns {switch: conn} and the actions of the last step."""
    conns = {}
    actions = []
    for s in fabric.switches():
        conns[s.name] = Conn(s.name)
        assert of(core.ReadState, ctl.connected(s.dpid, conns[s.name], is_active))
    for s in fabric.switches():
        flows, groups = (tables or {}).get(s.name, ({}, {}))
        actions = ctl.tables_read(s.name, frozenset({"arp", "next"}), flows, groups, ())
        actions += ctl.ports_read(s.name, ports_of(fabric, s.name))
    return conns, actions


def ack(ctl, actions):
    out = []
    for b in of(core.Barrier, actions):
        out += ctl.barrier_answered(b.conn.name, b.xid)
    return out


@pytest.fixture
def fabric():
    return build_fabric({"kind": "hpn"})


def test_no_routes_until_every_switch_told_its_tables_and_ports(fabric):
    ctl = core.Controller(fabric)
    switches = list(fabric.switches())
    for s in switches:
        ctl.connected(s.dpid, Conn(s.name), is_active)
    for s in switches[:-1]:
        assert not of(core.Program, ctl.tables_read(s.name, frozenset(), {}, {}, ()))
        assert not of(core.Program, ctl.ports_read(s.name, ports_of(fabric, s.name)))
    last = switches[-1]
    assert not of(core.Program, ctl.tables_read(last.name, frozenset(), {}, {}, ()))
    actions = ctl.ports_read(last.name, ports_of(fabric, last.name))
    programs = {p.conn.name: p.ops for p in of(core.Program, actions)}
    assert set(programs) == {s.name for s in switches}
    # what each switch is sent is exactly its wanted table, from nothing
    routes = compute_routes(fabric)
    for name, ops in programs.items():
        assert (
            list(ops) == routing.diff_switch(routing.SwitchProgram(), routing.wanted_table(routes, name))[0]
        )
    assert emitted(actions, "overrides")[0]["version"] == 1


def test_routes_stand_only_when_every_barrier_of_the_version_is_answered(fabric):
    ctl = core.Controller(fabric)
    _, actions = connect_all(ctl, fabric)
    barriers = of(core.Barrier, actions)
    assert len({b.xid for b in barriers}) == len(barriers)
    # a stale xid is not an answer
    assert ctl.barrier_answered(barriers[0].conn.name, barriers[0].xid + 1000) == []
    for b in barriers[:-1]:
        assert ctl.barrier_answered(b.conn.name, b.xid) == []
    (event,) = emitted(ctl.barrier_answered(barriers[-1].conn.name, barriers[-1].xid), "routes")
    assert event["version"] == 1 and event["down"] == []
    assert event["changes"] == sum(len(p.ops) for p in of(core.Program, actions)) > 0


def test_a_port_going_down_reprograms_and_the_next_version_supersedes(fabric):
    ctl = core.Controller(fabric)
    conns, actions = connect_all(ctl, fabric)
    first = of(core.Barrier, actions)
    down = ctl.port_changed("t0r0k0", 1, up=False)
    assert emitted(down, "port") == [{"event": "port", "switch": "t0r0k0", "port": 1, "up": False}]
    assert ctl.down == {("t0r0k0", 1)}
    # the barriers of version 1 no longer count
    assert ack(ctl, first) == []
    (event,) = emitted(ack(ctl, down), "routes")
    assert event["version"] == 2 and event["down"] == [("t0r0k0", 1)]
    want = routing.wanted_table(compute_routes(fabric, {("t0r0k0", 1)}), "t0r0k0")
    assert ctl.programs["t0r0k0"].flows.keys() == want.keys()
    # the same state again, and a reserved port: nothing to do
    assert not of(core.Program, ctl.port_changed("t0r0k0", 1, up=False))
    assert not of(core.Program, ctl.port_changed("t0r0k0", 0xFFFFFFFE, up=False))


def test_a_second_connection_with_a_known_datapath_id_is_refused_and_never_heard(fabric):
    ctl = core.Controller(fabric)
    conns, _ = connect_all(ctl, fabric)
    s = fabric.nodes["a0n0"]
    impostor = Conn("impostor")
    actions = ctl.connected(s.dpid, impostor, is_active)
    assert of(core.Close, actions) == [core.Close(impostor)]
    assert emitted(actions, "refused")[0]["switch"] == "a0n0"
    assert not of(core.ReadState, actions)
    assert ctl.switch_of(s.dpid, impostor) is None
    assert ctl.switch_of(s.dpid, conns["a0n0"]) == "a0n0"
    # once the real switch's connection is closed, its reconnection is taken
    conns["a0n0"].active = False
    back = Conn("a0n0")
    assert of(core.ReadState, ctl.connected(s.dpid, back, is_active)) == [core.ReadState(back)]
    assert ctl.switch_of(s.dpid, back) == "a0n0"


def test_an_unknown_datapath_id_is_left_alone(fabric):
    ctl = core.Controller(fabric)
    assert ctl.connected(0xDEAD, Conn("x"), is_active) == []


def test_a_restarted_controller_adopts_what_the_switches_hold_and_changes_nothing(fabric):
    before = core.Controller(fabric)
    connect_all(before, fabric)
    held = {name: (p.flows, p.groups) for name, p in before.programs.items()}
    after = core.Controller(fabric)
    _, actions = connect_all(after, fabric, tables=held)
    assert all(p.ops == () for p in of(core.Program, actions))
    (event,) = emitted(ack(after, actions), "routes")
    assert event["changes"] == 0


def test_adoption_repairs_missing_base_flows_and_removes_strays(fabric):
    ctl = core.Controller(fabric)
    s = next(iter(fabric.switches()))
    conn = Conn(s.name)
    ctl.connected(s.dpid, conn, is_active)
    actions = ctl.tables_read(s.name, {"arp"}, {}, {}, [("stray",)])
    assert of(core.Repair, actions) == [core.Repair(conn, frozenset({"arp"}), (("stray",),))]
    assert emitted(actions, "adopted")[0]["removed"] == 1


def _announce(fabric):
    jobs = [
        Job(
            name="j",
            hosts=tuple(HOSTS),
            collective="ring",
            bytes=1_000_000,
            bytes_real=1e6,
            compute_s=0.1,
            paths="precise",
        )
    ]
    return {"announce": announcement(fabric, jobs)}


def test_an_announcement_is_answered_once_its_pins_stand_and_outlives_a_restart(fabric, tmp_path):
    path = str(tmp_path / "jobs.json")
    ctl = core.Controller(fabric, core.JobsFile(path))
    _, actions = connect_all(ctl, fabric)
    ack(ctl, actions)
    answers = []
    actions = ctl.announced(_announce(fabric), answers.append)
    assert emitted(actions, "jobs")[0]["pinned"] > 0
    assert not of(core.Answer, actions)  # not before the switches acknowledge
    pins = [op.match for p in of(core.Program, actions) for op in p.ops if isinstance(op, routing.FlowSet)]
    assert any(isinstance(m, routing.Pin) for m in pins)
    done = ack(ctl, actions)
    (answer,) = of(core.Answer, done)
    assert answer.body["version"] == ctl.version and answer.body["jobs"][0]["name"] == "j"
    if sys.platform.startswith("linux"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # a new controller on the same file places the same jobs the same way
    again = core.Controller(fabric, core.JobsFile(path))
    _, actions = connect_all(again, fabric)
    ack(again, actions)
    assert again.answer == ctl.answer


@pytest.mark.parametrize("request_", [{}, {"announce": []}, {"announce": {"jobs": "x"}}, "text"])
def test_a_malformed_announcement_is_answered_with_an_error_at_once(fabric, request_):
    ctl = core.Controller(fabric)
    (answer,) = ctl.announced(request_, print)
    assert isinstance(answer, core.Answer) and "error" in answer.body
    assert ctl.jobs is None


# --- Crux as it runs ---------------------------------------------------------


def _crux_announcement(fabric, declared):
    jobs = [
        Job(
            name=name,
            hosts=tuple(hosts),
            collective="ring",
            bytes=200_000,
            bytes_real=2e9,
            compute_s=compute,
            paths="precise",
            priority="crux",
            port=0,
        )
        for name, hosts, compute in declared
    ]
    ann = announcement(fabric, jobs)
    ann["classes"] = [46, 34, 0]
    ann["crux_running"] = {"window_s": 2.5, "idle_s": 1.0, "poll_s": 0.05}
    return {"announce": ann}


def test_crux_as_it_runs_reads_the_marks_and_reprograms_the_classes_it_measured(fabric):
    # declared the wrong way round: "small" claims the most computation
    declared = [("big", HOSTS, 0.05), ("small", ["s0h2", "s1h2", "s0h3", "s1h3"], 0.5)]
    truth = {"big": 0.5, "small": 0.05}  # seconds of computation per iteration
    ctl = core.Controller(fabric)
    _, actions = connect_all(ctl, fabric)
    ack(ctl, actions)
    actions = ctl.announced(_crux_announcement(fabric, declared), lambda body: None)
    ack(ctl, actions)
    assert ctl.crux.levels == {"small": 0, "big": 1}  # as declared
    owner = {}  # connection key -> the one switch whose mark sees its bytes
    for name, marks in sorted(ctl.marks.items()):
        for key in marks:
            owner.setdefault(key, name)
    flows = {(f["dst"], f["src"], f["sport"]): j["name"] for j in ctl.jobs["jobs"] for f in j["flows"]}
    assert set(owner) == set(flows)  # every crux connection is counted, whatever its class

    def sent(job, t):  # computes, then sends 200 kB per connection in 40 ms
        k, into = divmod(t, truth[job] + 0.04)
        return 200_000 * (k + min(max(into - truth[job], 0.0), 0.04) / 0.04)

    said, marks_written, t = [], 0, 0.0
    while t < 10.0:
        for ask in of(core.ReadCounters, ctl.tick(t)):
            name = ask.conn.name
            counts = {routing.Mark(*k): sent(flows[k], t) for k, n in owner.items() if n == name}
            out = ctl.counters_read(name, ask.xid, t, counts)
            said += emitted(out, "crux")
            marks_written += sum(
                1
                for p in of(core.Program, out)
                for op in p.ops
                if isinstance(op, routing.FlowSet) and isinstance(op.match, routing.Mark)
            )
            ack(ctl, out)
        t = round(t + 0.01, 4)
    whys = [e["why"] for e in said]
    assert whys[:3] == [
        "planned from the declared jobs",
        "profiling small alone at the top level",  # the first to send
        "profiling big alone at the top level",
    ]
    assert whys[-1] == "planned from measurements (big, small)"
    assert said[-1]["levels"] == {"big": 0, "small": 1} == ctl.crux.levels
    assert marks_written > 0  # the switches were told each change
    report = ctl.crux_report()
    assert report["jobs"]["big"]["measured"]["compute_s"] == pytest.approx(0.5, abs=0.06)
    # 50 ms of computation sampled every 50-60 ms: shorter than a sample,
    # so measured as none (lighter than it is, never heavier)
    assert report["jobs"]["small"]["measured"]["compute_s"] < 0.05


def test_counters_of_another_reading_or_without_crux_are_ignored(fabric):
    ctl = core.Controller(fabric)
    assert ctl.tick(0.0) == [] and ctl.counters_read("t0r0k0", 1, 0.0, {}) == []
