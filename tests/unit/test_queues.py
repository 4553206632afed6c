"""Priority classes: the pure model (testbed/fabric/queues.py), its checks,
and the tc lines and map keys the queue engine is given."""

import dataclasses
import textwrap

import pytest

from testbed.emulation import queues as engine
from testbed.fabric import queues
from testbed.fabric.dilation import dilate
from testbed.fabric.model import Fabric
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario

TOPO = "topologies/hpn-mini.yaml"  # within the scenario's folder, where topology: may point
QUEUES = """
queues:
  classes:
    - name: control
      dscp: [48]
    - name: roce
      dscp: [26, 24]
      buffer: 50ms
      ecn: {k: 10ms}
    - name: bulk
      buffer: 1000MB
  ports:
    tor:
      roce: {ecn: {min: 5ms, max: 20ms, probability: 0.2}}
"""


def _scenario(tmp_path, queues_text=QUEUES, extra=""):
    (tmp_path / "s" / "topologies").mkdir(parents=True, exist_ok=True)
    (tmp_path / "s" / "topologies" / "hpn-mini.yaml").write_text(open("topologies/hpn-mini.yaml").read())
    path = tmp_path / "s" / "q.yaml"
    traffic = extra or "traffic:\n  - {src: s0h0, dst: s0h1}\n"
    path.write_text(f"name: q\ntopology: {TOPO}\nduration: 5\n" + textwrap.dedent(queues_text) + traffic)
    return path


def _port(fabric, node_kind):
    for link in fabric.links:
        for end in (link.a, link.b):
            if fabric.nodes[end.node].kind == node_kind:
                return link, end
    raise AssertionError(node_kind)


def test_dscp_selects_a_class_and_unlisted_dscps_go_to_the_last(tmp_path):
    q = load_scenario(_scenario(tmp_path)).fabric.queues
    classes = q.dscp_classes()
    assert (classes[48], classes[26], classes[24], classes[0], classes[63]) == (0, 1, 1, 2, 2)
    assert q.class_of_dscp(26) == "roce"


def test_amounts_become_bytes_per_port_and_overrides_apply_by_port_kind(tmp_path):
    f = load_scenario(_scenario(tmp_path)).fabric
    host = queues.classes_at(f, *_port(f, "host"))
    tor = queues.classes_at(f, *_port(f, "tor"))
    # 200 Gbit/s real, scale 5000: 40 Mbit/s = 5000 bytes per ms
    assert [c.limit for c in host] == [500_000, 250_000, 200_000]
    assert (host[1].ecn_mode, host[1].k_low) == ("step", 50_000)
    assert (tor[1].ecn_mode, tor[1].k_low, tor[1].k_high, tor[1].probability) == ("red", 25_000, 100_000, 0.2)
    assert host[0].ecn_mode is None and [c.index for c in tor] == [0, 1, 2]


def test_time_dilation_leaves_queue_bytes_alone(tmp_path):
    sc = load_scenario(_scenario(tmp_path))
    slow = dilate(sc, 4).fabric
    link, end = _port(sc.fabric, "tor")
    assert queues.classes_at(slow, link, end) == queues.classes_at(sc.fabric, link, end)


def test_profile_survives_fabric_json(tmp_path):
    f = load_scenario(_scenario(tmp_path)).fabric
    again = Fabric.from_dict(f.to_dict())
    assert again.queues == f.queues
    assert Fabric.from_dict(dataclasses.replace(f, queues=None).to_dict()).queues is None


@pytest.mark.parametrize(
    "text, field, words",
    [
        (
            """
     queues:
       classes: [{name: a, dscp: [26]}, {name: b, dscp: [26]}]
     """,
            "queues.classes[1].dscp",
            "got 26 here and in class 'a'",
        ),
        (
            """
     queues:
       classes: [{name: a}, {name: a}]
     """,
            "queues.classes[1].name",
            "got 'a' again",
        ),
        (
            """
     queues:
       classes: [{name: a}]
       ports: {tor: {b: {buffer: 5ms}}}
     """,
            "queues.ports.tor.b",
            "expected one of the classes (a)",
        ),
        (
            """
     queues:
       classes: [{name: a, buffer: 3ms}]
     """,
            "queues.classes[0].buffer",
            "expected at least 2 frames (18028 bytes) on every port",
        ),
        (
            """
     queues:
       classes: [{name: a, buffer: 10ms, ecn: {k: 20ms}}]
     """,
            "queues.classes[0].ecn.k",
            "below the class buffer",
        ),
        (
            """
     queues:
       classes: [{name: a, ecn: {k: 2ms, min: 1ms}}]
     """,
            "queues.classes[0].ecn",
            "either k (a step) or min and max",
        ),
        (
            """
     queues:
       classes: [{name: a, ecn: {min: 1ms}}]
     """,
            "queues.classes[0].ecn",
            "both min and max",
        ),
        (
            """
     queues:
       classes: [{name: a, buffer: 5 parsecs}]
     """,
            "queues.classes[0].buffer",
            "a size such as '300KB'",
        ),
    ],
)
def test_bad_queues_are_one_line_each_naming_the_field(tmp_path, text, field, words):
    with pytest.raises(ConfigError) as err:
        load_scenario(_scenario(tmp_path, text))
    lines = str(err.value).splitlines()
    assert any(f": {field}: " in line and words in line for line in lines), lines


def test_traffic_carries_its_dscp(tmp_path):
    sc = load_scenario(_scenario(tmp_path, extra="traffic:\n  - {src: s0h0, dst: s0h1, dscp: 10}\n"))
    assert sc.traffic[0].dscp == 10


def test_class_lines_give_strict_priority_and_a_fifo_that_never_drops_first():
    classes = [queues.PortClass(0, "hi", 50_000), queues.PortClass(1, "lo", 100_000)]
    lines = engine.class_lines("x", 40.0, 9000, classes)
    assert lines[0] == "qdisc replace dev x root handle 1: htb default 11"
    leaves = [l for l in lines if "parent 1:1 " in l]
    assert ["prio 0" in leaves[0], "prio 1" in leaves[1]] == [True, True]
    assert all("ceil 40mbit" in l for l in leaves)
    fifos = [l for l in lines if "bfifo" in l]
    assert fifos == [
        "qdisc replace dev x parent 1:10 handle 10: bfifo limit 68028",
        "qdisc replace dev x parent 1:11 handle 11: bfifo limit 118028",
    ]
    delayed = engine.class_lines("x", 40.0, 9000, classes, delay_s=0.005)
    # netem counts packets: the FIFO's 68028 bytes in 60-byte frames
    assert any(l.endswith("netem delay 5ms limit 1134") for l in delayed)


def test_host_ports_use_the_programs_that_know_a_port_by_its_mac():
    assert engine.attach_lines("p", "/o.o", host=True)[1].endswith("sec tc/host_egress")
    assert engine.attach_lines("p", "/o.o")[2].endswith("sec tc/ingress")


def test_every_port_has_a_slot_and_its_far_end(tmp_path):
    f = load_scenario(_scenario(tmp_path)).fabric
    slots, peer, _devices = engine.port_slots(f)
    assert len(set(slots.values())) == len(slots) == 2 * len(f.links)
    link = f.links[0]
    assert peer[link.a.ifname] == link.b.ifname and peer[link.b.ifname] == link.a.ifname


def test_ifindexes_are_read_from_ip_link_output():
    text = (
        "1: lo: <LOOPBACK,UP> mtu 65536 qdisc noqueue\n"
        "2: s0h0-n0p0@if24314: <BROADCAST,UP> mtu 9000 qdisc htb\n"
        "    link/ether 02:00:0a:00:00:01 brd ff:ff:ff:ff:ff:ff\n"
    )
    assert engine.parse_ifindexes(text) == {"lo": 1, "s0h0-n0p0": 2}


def _record():
    def entry(drops, marks, mx, p99):
        return {
            "sent_bytes": 1000,
            "sent_pkts": 10,
            "drops": drops,
            "drop_bytes": drops * 9014,
            "marks": marks,
            "ect_pkts": 10,
            "max_backlog_bytes": mx,
            "mean_backlog_bytes": mx / 2,
            "p99_backlog_bytes": p99,
            "max_backlog_pkts": 1,
        }

    return {
        "classes": ["roce", "bulk"],
        "sample_hz": 100.0,
        "samples": 3,
        "cpu_share": 0.01,
        "ports": {
            "a": {"roce": entry(0, 5, 30_000, 20_000), "bulk": entry(2, 0, 9_000, 9_000)},
            "b": {"roce": entry(1, 7, 80_000, 60_000)},
        },
        "series": {"t": [0.0, 0.02, 0.04], "backlog_bytes": {"b/roce": [0, 80_000, 0]}},
    }


def test_class_totals_sum_counters_and_keep_the_worst_port():
    from testbed.results import queues as rq

    totals = rq.class_totals(_record())
    assert totals["roce"] == {
        "drops": 1,
        "marks": 12,
        "sent_bytes": 2000,
        "max_backlog_bytes": 80_000,
        "p99_backlog_bytes": 60_000,
    }
    assert rq.class_drops(_record()) == {"a egress, class bulk": 2, "b egress, class roce": 1}
    slow = rq.to_emulated(_record(), 4)
    assert slow["series"]["t"] == [0.0, 0.005, 0.01] and slow["sample_hz"] == 400.0


def test_class_expectations_are_judged_on_the_class_totals():
    from entries import evaluate

    from testbed.results import queues as rq

    m = {"classes": rq.class_totals(_record())}
    ok, bad, unnamed = evaluate(
        [
            {"metric": "class_drops", "class": "roce", "max": 1},
            {"metric": "class_p99_backlog_bytes", "class": "roce", "max": 50_000},
            {"metric": "class_marks", "min": 1},
        ],
        m,
        True,
    )
    assert ok["passed"] and ok["measured"] == 1
    assert not bad["passed"] and "above 50000" in bad["reason"]
    assert unnamed["measured"] is None and "name the class" in unnamed["reason"]
    [none] = evaluate([{"metric": "class_marks", "class": "x", "min": 1}], {}, True)
    assert "no queues" in none["reason"]


def test_a_class_expectation_must_name_a_declared_class(tmp_path):
    extra = (
        "traffic:\n  - {src: s0h0, dst: s0h1}\nexpect:\n"
        "  - {metric: class_drops, class: nope, max: 0}\n"
        "  - {metric: class_drops, max: 0}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_scenario(_scenario(tmp_path, extra=extra))
    text = str(err.value)
    assert "expect[0].class: expected one of the classes (control, roce, bulk), got 'nope'" in text
    assert "expect[1].class: metric class_drops is measured per queue class: name the class" in text


def test_report_shows_the_queues(tmp_path):
    from testbed.results import queues as rq
    from testbed.results.markdown import render_summary

    rec = _record()
    text = render_summary(
        {
            "scenario": "q",
            "metrics": {
                "classes": rq.class_totals(rec),
                "queue_telemetry": {"sample_hz": 100.0, "cpu_share": 0.01},
            },
            "queues": rec,
            "files": {"queues": "queues.png"},
        }
    )
    assert "## Queues" in text and "| b / roce | 80000 |" in text and "![queue backlog](queues.png)" in text
