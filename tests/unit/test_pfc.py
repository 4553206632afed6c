"""Lossless classes: the model's XOFF/XON/headroom, the checks, the pause
daemon's pure parts (netlink message, holds), the pause records and the
agents' gaps that a pause explains."""

import struct
import textwrap

import pytest

from testbed.emulation import netlink, pfc
from testbed.emulation import queues as engine
from testbed.fabric import queues
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_scenario
from testbed.results import emulator, pauses
from traffic.transport import LineMeter

LOSSLESS = """
queues:
  classes:
    - name: roce
      dscp: [26]
      buffer: 20ms
      pfc: {}
    - name: other
"""


def _scenario(tmp_path, queues_text=LOSSLESS):
    (tmp_path / "s" / "topologies").mkdir(parents=True, exist_ok=True)
    (tmp_path / "s" / "topologies" / "t.yaml").write_text(open("topologies/single-tor-mini.yaml").read())
    path = tmp_path / "s" / "q.yaml"
    path.write_text(
        "name: q\ntopology: topologies/t.yaml\nduration: 5\n"
        + textwrap.dedent(queues_text)
        + "traffic:\n  - {src: s0h0, dst: s0h1}\n"
    )
    return path


def _classes(fabric, node_kind):
    for link in fabric.links:
        for end in (link.a, link.b):
            if fabric.nodes[end.node].kind == node_kind:
                return link, end, queues.classes_at(fabric, link, end)
    raise AssertionError(node_kind)


def test_switch_ports_get_xoff_at_the_buffer_and_headroom_for_every_feeding_link(tmp_path):
    f = load_scenario(_scenario(tmp_path)).fabric
    link, end, (roce, other) = _classes(f, "tor")
    feeding = queues.feeding_links(f, link, end)
    # single-tor-mini: a ToR has 4 hosts and 2 uplinks, so 5 links feed each port
    assert len(feeding) == 5
    frame = queues.frame_bytes(f.mtu)
    want = sum(int(0.005 * l.rate_bps / f.scale / 8) + 2 * frame for l in feeding)
    assert roce.lossless and roce.headroom == want
    assert roce.xoff == int(0.020 * link.rate_bps / f.scale / 8)
    assert roce.xon == roce.xoff // 2
    assert roce.limit == roce.xoff + roce.headroom
    assert not other.lossless and other.xoff == 0


def test_host_ports_of_a_lossless_class_never_drop_and_never_pause(tmp_path):
    f = load_scenario(_scenario(tmp_path)).fabric
    _link, _end, (roce, _other) = _classes(f, "host")
    assert roce.lossless and roce.limit == 0 and roce.xoff == 0
    lines = engine.class_lines("h-eth0", 40, f.mtu, [roce, _other])
    assert any("tbf" in l and f"limit {engine.UNLIMITED_FIFO}" in l for l in lines)
    assert any(l.endswith("bfifo limit 0") for l in lines)  # the wake-up frames' class


def test_profile_with_pfc_survives_fabric_json(tmp_path):
    f = load_scenario(_scenario(tmp_path, LOSSLESS.replace("pfc: {}", "pfc: {xoff: 10ms, xon: 2ms}"))).fabric
    again = queues.QueueProfile.from_dict(f.queues.to_dict())
    assert again == f.queues and again.classes[0].pfc.xon.seconds == 0.002


@pytest.mark.parametrize(
    "text, field, words",
    [
        (
            LOSSLESS.replace("pfc: {}", "pfc: {xoff: 10ms, xon: 10ms}"),
            "queues.classes[0].pfc.xon",
            "below xoff",
        ),
        (LOSSLESS.replace("pfc: {}", "pfc: {xoff: 100B}"), "queues.classes[0].pfc.xoff", "a frame or more"),
        (LOSSLESS.replace("pfc: {}", "pfc: {xof: 1ms}"), "queues.classes[0].pfc", "xof"),
    ],
)
def test_bad_pfc_settings_are_one_line_naming_the_field(tmp_path, text, field, words):
    with pytest.raises(ConfigError) as err:
        load_scenario(_scenario(tmp_path, text))
    lines = str(err.value).splitlines()
    assert any(field in line and words in line for line in lines), lines


def test_tbf_change_message_is_what_the_kernel_parses():
    msg = pfc.tbf_change(ifindex=7, minor=0x10, rate_bps=8, burst=9014, limit=50000)
    length, kind, flags, _seq, _pid = struct.unpack_from("=IHHII", msg)
    assert length == len(msg) and kind == pfc.RTM_NEWQDISC
    assert flags == netlink.NLM_F_REQUEST | netlink.NLM_F_ACK  # a change: no create, no replace
    _fam, _p1, _p2, ifindex, handle, parent, _info = struct.unpack_from("=BBHiIII", msg, 16)
    assert (ifindex, handle, parent) == (7, 0x10 << 16, (1 << 16) | 0x10)
    attrs, off = {}, 36
    while off < len(msg):
        size, t = struct.unpack_from("=HH", msg, off)
        attrs[t] = msg[off + 4 : off + size]
        off += (size + 3) & ~3
    assert attrs[pfc.TCA_KIND] == b"tbf\0"
    opts, inner, off = attrs[pfc.TCA_OPTIONS], {}, 0
    while off < len(opts):
        size, t = struct.unpack_from("=HH", opts, off)
        inner[t] = opts[off + 4 : off + size]
        off += (size + 3) & ~3
    _cell, linklayer, _ovh, _align, _mpu, rate = struct.unpack_from("=BBHhHI", inner[pfc.TCA_TBF_PARMS])
    assert (linklayer, rate) == (pfc.TC_LINKLAYER_ETHERNET, 8)
    assert struct.unpack_from("=I", inner[pfc.TCA_TBF_PARMS], 24)[0] == 50000
    assert struct.unpack("=I", inner[pfc.TCA_TBF_BURST])[0] == 9014


def test_a_link_is_paused_while_any_queue_holds_it_and_stale_asserts_are_ignored():
    h = pfc.Holds()
    link = (4, 0)
    assert h.hold(queue=120, episode=1, link=link) is True  # first holder pauses
    assert h.hold(queue=128, episode=3, link=link) is False  # already paused
    assert h.release(queue=120, episode=1) == []  # 128 still holds it
    assert h.release(queue=128, episode=3) == [link]  # now it resumes
    # an assert of an episode already released (it raced the release) pauses nothing
    assert h.hold(queue=120, episode=1, link=link) is False
    assert h.hold(queue=120, episode=3, link=link) is True


def test_wake_frame_goes_to_the_mac_control_group_with_the_kick_ethertype():
    frame = pfc.wake_frame()
    assert frame[:6] == pfc.KICK_DST and frame[0] & 1  # a group address: not accounted
    assert struct.unpack("!H", frame[12:14])[0] == pfc.ETH_P_KICK and len(frame) == 60


RAW = {
    "pauses": [
        {
            "ifname": "s0h1-n0p0",
            "class": 0,
            "assert_ns": 10_000_000_000,
            "applied_ns": 10_000_100_000,
            "held_ns": 30_000,
            "release_ns": 10_040_000_000,
            "resume_held_ns": 400_000,
            "resumed_ns": 10_040_300_000,
            "first_ns": 10_040_500_000,
            "backlog_at_resume": 9000,
            "departed_at_pause": 1000,
            "departed_at_resume": 10014,
        },
        {
            "ifname": "s0h2-n0p0",
            "class": 0,
            "assert_ns": 10_010_000_000,
            "applied_ns": 10_010_200_000,
            "release_ns": 10_020_000_000,
            "resumed_ns": 10_020_100_000,
            "first_ns": 10_030_000_000,
            "backlog_at_resume": 0,
            "departed_at_pause": 0,
            "departed_at_resume": 0,
        },
        {
            "ifname": "s0h1-n0p0",
            "class": 0,
            "assert_ns": 10_050_000_000,
            "applied_ns": 10_050_100_000,
            "release_ns": None,
            "resumed_ns": None,
            "end_ns": 10_060_000_000,
        },
    ],
    "events": 5,
    "errors": [],
}


def test_pause_records_say_link_class_start_duration_and_reaction():
    recs = pauses.records(RAW, t0=9.5, class_names=["roce", "other"])
    first = recs[0]
    assert (first["link"], first["class"]) == ("s0h1-n0p0", "roce")
    assert first["start_s"] == pytest.approx(0.5) and first["duration_s"] == pytest.approx(0.04)
    assert first["in_force_s"] == pytest.approx(1e-4) and first["resume_s"] == pytest.approx(5e-4)
    assert first["let_by_bytes"] == 9014
    assert "resume_s" not in recs[1]  # nothing waited upstream: no resume to measure
    assert recs[2]["ended"] is False and recs[2]["duration_s"] == pytest.approx(0.01)
    s = pauses.summary(recs)
    assert s["pauses"] == 3 and s["links"]["s0h1-n0p0/roce"]["pauses"] == 2
    assert s["in_force_ms"]["n"] == 3 and s["resume_ms"]["n"] == 1 and s["max_let_by_bytes"] == 9014
    # the machine's part, where the daemon measured it
    assert first["in_force_held_s"] == pytest.approx(3e-5) and first["resume_held_s"] == pytest.approx(4e-4)
    assert "in_force_held_s" not in recs[2]
    assert s["machine_held_ms"]["in_force"]["n"] == 1 and s["machine_held_ms"]["resume"]["max"] == 0.4
    assert pauses.class_totals(recs)["roce"]["paused_s"] == pytest.approx(0.06)
    slow = pauses.to_emulated(recs, 4)
    assert slow[0]["duration_s"] == pytest.approx(0.01) and slow[0]["in_force_s"] == first["in_force_s"]


def test_late_gaps_inside_a_pause_are_not_lost_time_but_gaps_outside_are():
    paused = pauses.paused_intervals(RAW)
    assert paused["s0h1-n0p0"][0] == pytest.approx((10.0001, 10.0403))
    gaps = [
        (10.01, 0.04),  # 0.0303 s of it inside the pause
        (11.0, 0.02),
    ]  # nowhere near a pause
    agent = {
        "s0h1": {
            "pacing": {
                "tx_s": 1.0,
                "lost_s": 0.06,
                "late_packets": 2,
                "max_lag_s": 0.04,
                "ports": {"s0h1-n0p0": {"tx_s": 1.0, "lost_s": 0.06, "packets": 100, "gaps": gaps}},
            },
            "jobs": [{"packets_sent": 100}],
        }
    }
    g = emulator.generator_metrics(agent, paused)
    port = g["ports"]["s0h1"]["s0h1-n0p0"]
    assert port["paused_s"] == pytest.approx(0.0303, abs=1e-4)
    assert port["lost_s"] == pytest.approx(0.06 - 0.0303, abs=1e-4)
    assert emulator.generator_metrics(agent)["ports"]["s0h1"]["s0h1-n0p0"]["lost_s"] == 0.06


def test_line_meter_notes_when_its_gaps_began_and_resyncs_on_a_held_queue():
    m = LineMeter(rate_bps=8000, max_gap_s=1.0)
    m.sent(1000, now=0.0, backlogged=True)  # drains at 1.0
    m.sent(1000, now=1.5, backlogged=True)  # 0.5 s late
    assert m.gaps == [(1.0, 0.5)] and m.lost_s == pytest.approx(0.5)
    assert m.idle_since(3.0)
    m.still_queued(3.0)  # the kernel still held frames: no gap
    m.sent(1000, now=3.0, backlogged=True)
    assert m.lost_s == pytest.approx(0.5) and m.resyncs == 1


def test_the_machines_hold_is_the_late_wake_up_and_the_time_off_the_core():
    ms = 1_000_000
    # the event came while the daemon waited; woken 2 ms late, then on its core throughout
    assert (
        pfc.machine_hold_ns(
            ts=10 * ms, idle_from=5 * ms, woke=12 * ms, now=13 * ms, cpu_at_wake=0, cpu_now=ms
        )
        == 2 * ms
    )
    # the event was already there when the daemon went to wait: no wake-up to be late for
    assert (
        pfc.machine_hold_ns(ts=4 * ms, idle_from=5 * ms, woke=5 * ms, now=6 * ms, cpu_at_wake=0, cpu_now=ms)
        == 0
    )
    # 3 ms of wall time since the wake-up, of which 1 ms on its core: 2 ms off it
    assert (
        pfc.machine_hold_ns(
            ts=4 * ms, idle_from=5 * ms, woke=5 * ms, now=8 * ms, cpu_at_wake=7 * ms, cpu_now=8 * ms
        )
        == 2 * ms
    )
    # the CPU clock can run a little ahead of the wall clock's difference: never negative
    assert (
        pfc.machine_hold_ns(ts=9 * ms, idle_from=5 * ms, woke=9 * ms, now=9 * ms, cpu_at_wake=0, cpu_now=10)
        == 0
    )
