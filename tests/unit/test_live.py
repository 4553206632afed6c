"""The live-fabric commands' pure parts: the controller's events read back
from its log, the routes version that counts a pulled cable, the link a
command names, and the commands' answers when no fabric is up."""

from pathlib import Path

import pytest

from testbed.cli import main
from testbed.cli.common import NOT_RUN
from testbed.emulation import live
from testbed.fabric.scenario import load_fabric

ROOT = Path(__file__).resolve().parents[2]

LOG = """controller started
event {"event": "switch", "name": "t0r0k0"}
event {"changes": 288, "down": [], "event": "routes", "host_overrides": {}, "version": 2}
event {"event": "port", "port": 1, "switch": "t0r0k0", "up": false}
event {"changes": 4, "down": [["t0r0k0", 2]], "event": "routes", "version": 3}
event {"changes": 9, "down": [["t0r0k0", 1]], "event": "routes", "version": 4}
event {not json
"""


def test_events_are_read_back_from_the_log():
    evs = live.events(LOG)
    assert [e["event"] for e in evs] == ["switch", "routes", "port", "routes", "routes"]
    assert live.last_routes(evs)["version"] == 4
    assert live.last_routes([]) is None


def test_a_pull_counts_once_a_version_has_the_port_down():
    evs = live.events(LOG)
    assert live.routes_for(evs, ("t0r0k0", 1), up=False)["version"] == 4  # not 3: another port
    # a replug counts at the first version without the port among the down ones
    assert live.routes_for(evs, ("t0r0k0", 1), up=True)["version"] == 2
    assert live.routes_for(evs[3:4], ("t0r0k0", 2), up=True) is None  # only a version with it down
    assert live.routes_for(evs[3:], ("t0r0k0", 2), up=True)["version"] == 4


def test_reading_a_log_takes_whole_lines_only(tmp_path):
    path = tmp_path / "controller.log"
    path.write_text('event {"event": "switch"}\nevent {"ev')
    text, offset = live.read_from(str(path), 0)
    assert live.events(text) == [{"event": "switch"}] and offset == len('event {"event": "switch"}\n')
    with path.open("a") as fh:
        fh.write('ent": "routes", "version": 7}\n')
    text, _ = live.read_from(str(path), offset)
    assert live.events(text) == [{"event": "routes", "version": 7}]
    assert live.read_from(str(tmp_path / "missing"), 5) == ("", 5)


def test_a_link_is_named_by_its_two_nodes():
    fabric = load_fabric(ROOT / "topologies" / "hpn-mini.yaml")[1]
    assert live.find_link(fabric, "s0h0", "t0r0k0").name == "s0h0-n0p0~t0r0k0-e1"
    assert live.find_link(fabric, "t0r0k0", "s0h0").name == "s0h0-n0p0~t0r0k0-e1"
    with pytest.raises(ValueError, match="'s9h9' is not a node of fabric hpn-mini"):
        live.find_link(fabric, "s9h9", "t0r0k0")
    with pytest.raises(ValueError, match="no link between s0h0 and a0n0 in fabric hpn-mini"):
        live.find_link(fabric, "s0h0", "a0n0")
    with pytest.raises(ValueError, match=r"--index 0..0, got 1"):
        live.find_link(fabric, "s0h0", "t0r0k0", 1)


def test_live_commands_need_root_and_say_so(monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    for argv in (["status"], ["exec", "s0h0", "--", "true"], ["link", "s0h0", "t0r0k0", "down"]):
        assert main(argv) == NOT_RUN
        assert f"'hpnlab {argv[0]}' needs root" in capsys.readouterr().err


def test_no_fabric_up_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("testbed.emulation.ledger.load", lambda *a: None)
    assert main(["status"]) == NOT_RUN
    err = capsys.readouterr().err.strip()
    assert err == "hpnlab: error: no fabric is up: start one with 'hpnlab up FILE' in another shell"


def test_pingall_prints_a_matrix_of_ports_by_hosts():
    from testbed.cli.live import pingall_matrix

    fabric = load_fabric(ROOT / "topologies" / "hpn-mini.yaml")[1]
    reach = {
        "s0h0": {"s0h0-n0p0:10.0.0.2": 0.41, "s0h0-n0p1:10.0.0.2": None},
        "s0h1": {"s0h1-n0p0:10.0.0.1": 1.26},
    }
    lines = pingall_matrix(fabric, reach).splitlines()
    assert lines[0].split()[:5] == ["port", "\\", "to", "s0h0", "s0h1"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:] if line.startswith("s0h")}
    assert rows["s0h0-n0p0"][:2] == [".", "0.4"]
    assert rows["s0h0-n0p1"][:2] == [".", "x"]
    assert rows["s0h1-n0p0"][:2] == ["1.3", "."]
    assert lines[-1] == "(round-trip ms; x: no answer)"


FLOWS = """OFPST_FLOW reply (OF1.3) (xid=0x2):
 cookie=0x48504e00, duration=3.1s, table=0, n_packets=12, n_bytes=504, priority=1000,arp actions=CONTROLLER:65535
 cookie=0x48504e00, duration=3.1s, table=0, n_packets=900, n_bytes=8100000, priority=200,udp,nw_src=10.0.0.1,nw_dst=10.0.1.1,tp_src=49152 actions=set_field:46->ip_dscp,goto_table:1
 cookie=0x48504e00, duration=3.1s, table=0, n_packets=5000, n_bytes=9000000, priority=0 actions=goto_table:1
 cookie=0x48504e00, duration=3.1s, table=1, n_packets=40, n_bytes=3600, priority=100,ip,nw_dst=10.0.0.1 actions=output:1
 cookie=0x48504e00, duration=3.1s, table=1, n_packets=70, n_bytes=6300, priority=100,ip,nw_dst=10.0.1.1 actions=group:1
 cookie=0x48504e00, duration=3.1s, table=1, n_packets=9, n_bytes=810, priority=110,ip,in_port=5,nw_dst=10.0.1.1 actions=output:6
 cookie=0x1, duration=1s, table=1, n_packets=0, n_bytes=0, priority=5,ip actions=drop
"""  # noqa: E501 - ovs-ofctl's lines as it prints them
GROUPS = """OFPST_GROUP_DESC reply (OF1.3) (xid=0x2):
 group_id=1,type=select,bucket=bucket_id:0,actions=output:5,bucket=bucket_id:1,actions=output:6
"""


def test_a_switchs_rules_are_explained_in_the_fabrics_words():
    from testbed.emulation.flowtable import explain_tables

    fabric = load_fabric(ROOT / "topologies" / "hpn-mini.yaml")[1]
    rules = explain_tables(fabric, "t0r0k0", FLOWS, GROUPS)
    assert [(r["table"], r["priority"]) for r in rules] == [
        (0, 1000),
        (0, 200),
        (0, 0),
        (1, 110),
        (1, 100),
        (1, 100),
        (1, 5),
    ]
    what = [r["what"] for r in rules]
    assert what[0].startswith("ARP to the controller")
    assert what[1] == (
        "mark: s0h0 (10.0.0.1) -> s1h0 (10.0.1.1) from UDP port 49152: DSCP set to 46 "
        "(its job's class; counted for Crux)"
    )
    assert what[3] == ("detour: toward s1h0 (10.0.1.1), what came in by port 5 (to a0n0): port 6 (to a0n1)")
    assert what[4] == "route to s0h0 (10.0.0.1): port 1 (to s0h0)"
    assert what[5] == "route to s1h0 (10.0.1.1): group 1: ECMP over port 5 (to a0n0), port 6 (to a0n1)"
    assert what[6] == "not installed by hpnlab's controller"
    assert rules[1]["packets"] == 900


def test_queue_rows_come_from_two_reads_of_the_counters():
    import numpy as np

    from testbed.cli.tables import queue_table
    from testbed.emulation import livequeues
    from testbed.emulation.queues import CLASSES

    fabric = load_fabric(ROOT / "scenarios" / "crux-classes.yaml")[1]
    ports = livequeues.ports_of(fabric)
    assert len(ports) == 2 * len(fabric.links)
    chosen = livequeues.select(ports, ["s0h0", "t0r0k0-e1"])
    assert {p.ifname for p in chosen} == {"s0h0-n0p0", "s0h0-n0p1", "t0r0k0-e1"}
    with pytest.raises(ValueError, match="nosuch: neither a port"):
        livequeues.select(ports, ["nosuch"])
    port = next(p for p in ports if p.ifname == "t0r0k0-e1")
    size = (max(p.slot for p in ports) + 1) * CLASSES
    st0, pf0 = np.zeros((size, 8), np.uint64), np.zeros((size, 4), np.uint64)
    st1, pf1 = st0.copy(), pf0.copy()
    low = port.slot * CLASSES + 1
    # 1.25 MB left in 0.5 s (20 Mbit/s), 30 KB still queued, 3 drops, 7 marks,
    # the queue above XOFF for the second time
    st0[low] = [1_000_000, 700, 1_000_000, 700, 0, 0, 0, 0]
    st1[low] = [2_280_000, 1_560, 2_250_000, 1_540, 4_500, 3, 7, 900]
    pf1[low, 0] = 3
    rows = livequeues.rows([port], ["high", "low"], (st0, pf0), (st1, pf1), 0.5)
    high, low_row = rows
    assert not livequeues.busy(high)
    assert low_row["to"] == "s0h0" and low_row["class"] == "low"
    assert low_row["backlog_bytes"] == 30_000 and low_row["backlog_pkts"] == 20
    assert low_row["sent_mbit_s"] == pytest.approx(20.0)
    assert (low_row["drops"], low_row["marks"]) == (3, 7)
    assert low_row["pausing_upstream"] and low_row["pauses_total"] == 2
    text = queue_table(rows, show_idle=False)
    assert "high" not in text and "t0r0k0-e1 -> s0h0" in text and "PAUSING (2)" in text
    assert queue_table(rows[:1], show_idle=False) == "every queue idle"


def test_a_switch_counts_as_failed_once_every_port_of_it_is_down():
    evs = live.events(LOG)
    assert live.routes_for(evs, [("t0r0k0", 1), ("t0r0k0", 2)], up=False) is None  # never both at once
    both = evs + [{"event": "routes", "version": 5, "down": [["t0r0k0", 1], ["t0r0k0", 2], ["a0n0", 1]]}]
    assert live.routes_for(both, [("t0r0k0", 1), ("t0r0k0", 2)], up=False)["version"] == 5
    fabric = load_fabric(ROOT / "topologies" / "hpn-mini.yaml")[1]
    links = live.switch_links(fabric, "t0r0k0")
    assert len(links) == 4 + 2 and all("t0r0k0" in (link.a.node, link.b.node) for link in links)
    with pytest.raises(ValueError, match="'s0h0' is not a switch of fabric hpn-mini"):
        live.switch_links(fabric, "s0h0")


def test_cables_pulled_by_hand_are_read_back_as_the_runs_faults(tmp_path):
    _, fabric = load_fabric(ROOT / "topologies" / "hpn-mini.yaml")
    links = fabric.links_between("s0h0", "t0r0k0")
    live.record_by_hand(str(tmp_path), fabric, links, False, 100.0, 100.02)
    live.record_by_hand(str(tmp_path), fabric, links, True, 105.0, 105.01)
    live.record_by_hand(str(tmp_path), fabric, links, False, 200.0, 200.01)  # after the run
    with open(tmp_path / live.BY_HAND, "a") as fh:
        fh.write("not json\n")
    faults = live.read_by_hand(str(tmp_path), t0=98.0, until=20.0)
    assert [(f["action"], f["at"], f["applied_at"]) for f in faults] == [
        ("link-down", 2.0, 2.02),
        ("link-up", 7.0, 7.01),
    ]
    assert all(f["by_hand"] and set(f["link"]) == {"s0h0", "t0r0k0"} and f["index"] == 0 for f in faults)
    assert live.read_by_hand(str(tmp_path / "none"), 0, 10) == []
