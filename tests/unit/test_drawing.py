"""The picture of a fabric: where the layout puts each node (pure), what the
drawing marks, the load it is given from port counters, and `topo draw`."""

from pathlib import Path

import pytest

from testbed.cli import main
from testbed.cli.common import INVALID, OK
from testbed.fabric.layout import layout
from testbed.fabric.scenario import load_fabric, load_scenario
from testbed.results.counters import link_bytes
from testbed.results.drawing import draw_fabric, failed_links

ROOT = Path(__file__).resolve().parents[2]


def fabric_of(name):
    return load_fabric(ROOT / "topologies" / name)[1]


def test_tiers_rise_from_hosts_and_a_dual_tor_pair_sits_together():
    fabric = fabric_of("hpn-mini.yaml")
    pos = layout(fabric).positions
    assert {pos[h.name][1] for h in fabric.hosts()} == {0.0}
    tiers = {n.kind: pos[n.name][1] for n in fabric.switches()}
    assert tiers["tor"] < tiers["agg"]
    tors = sorted((n for n in fabric.switches() if n.kind == "tor"), key=lambda n: pos[n.name][0])
    assert [t.name for t in tors] == ["t0r0k0", "t0r0k1", "t1r0k0", "t1r0k1"]
    # each segment's hosts lie under its own ToRs
    for seg in (0, 1):
        xs = [pos[h.name][0] for h in fabric.hosts() if h.segment == seg]
        tor_xs = [pos[t.name][0] for t in tors if t.segment == seg]
        assert min(xs) <= min(tor_xs) and max(tor_xs) <= max(xs)


def test_each_datacenter_has_a_band_of_its_own():
    fabric = fabric_of("region-2dc.yaml")
    geometry = layout(fabric)
    xs = {dc: [geometry.positions[n.name][0] for n in fabric.nodes.values() if n.dc == dc] for dc in (0, 1)}
    assert max(xs[0]) < min(xs[1])  # DC 1 lies wholly right of DC 0
    assert all(0 <= x <= geometry.width for x in xs[0] + xs[1])


def test_a_scenario_fault_is_drawn_as_a_failed_link(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "dual-tor-link-failure.yaml")
    down = failed_links(sc.fabric, sc.faults)
    assert down == {"s0h0-n0p0~t0r0k0-e1"}
    svg = Path(draw_fabric(sc.fabric, str(tmp_path / "f.svg"), down=down)).read_text()
    assert "failed link" in svg and "plane 1" in svg
    plain = Path(draw_fabric(sc.fabric, str(tmp_path / "g.svg"))).read_text()
    assert "failed link" not in plain


def test_link_load_comes_from_both_ends_counters():
    fabric = fabric_of("hpn-mini.yaml")
    up = next(link for link in fabric.links if link.kind == "fabric")
    down = next(link for link in fabric.links if link.kind == "access")
    ends = (up.a.ifname, up.b.ifname, down.b.ifname)
    first = (0.0, {d: (0, 0) for d in ends})
    last = (5.0, {up.a.ifname: (3000, 2), up.b.ifname: (1000, 1), down.b.ifname: (700, 1)})
    assert link_bytes(fabric, [first, last]) == {up.name: 4000, down.name: 700}
    assert link_bytes(fabric, [first]) == {}


def test_topo_draw_writes_the_picture_and_refuses_other_formats(tmp_path, capsys):
    out = tmp_path / "fabric.png"
    assert main(["topo", "draw", str(ROOT / "topologies" / "hpn-8rails.yaml"), "--out", str(out)]) == OK
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        main(["topo", "draw", str(ROOT / "topologies" / "hpn-mini.yaml"), "--out", str(tmp_path / "f.jpg")])
        == INVALID
    )
    assert "expected a file name ending in .svg or .png" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "topologies").glob("*.yaml")))
def test_every_shipped_topology_has_a_layout(name):
    fabric = fabric_of(name)
    pos = layout(fabric).positions
    assert set(pos) == set(fabric.nodes)
    assert len(set(pos.values())) == len(pos)  # no two nodes on one spot
