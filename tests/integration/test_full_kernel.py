"""What only a full kernel can do (the VM tier, `make test-vm`): the OVS
kernel datapath, netem delay on the interconnect, RED and DCTCP.

Every test names the kernel feature it needs and skips, with that reason,
where the kernel lacks it (so natively they skip); scripts/vm/run.sh runs
them in a Debian 12 VM with the stock kernel, where all exist.
"""

import json
import re
import subprocess

import drillrun
import pytest

from testbed.emulation.reachability import unreachable
from testbed.emulation.realize import FabricNet
from testbed.fabric.build import build_fabric
from testbed.fabric.scenario import load_scenario, load_topology

pytestmark = pytest.mark.full_kernel

# Bring-up deadline: under software emulation (the VM tier without KVM) the
# switches may take longer than the default 60 s to acknowledge their routes;
# bring-up time is not what these tests judge.
ROUTE_TIMEOUT_S = 120


def _datapath_lookups():
    """Packets the kernel datapath looked up so far (hit + missed), from
    `ovs-dpctl show` (there is one kernel datapath for all bridges)."""
    out = subprocess.run(["ovs-dpctl", "show"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"lookups: hit:(\d+) missed:(\d+)", out)
    assert m, f"no kernel datapath in ovs-dpctl show: {out[:300]}"
    return int(m.group(1)) + int(m.group(2)), out


def _ping(fnet, host, ip, count=20):
    """(min, avg) RTT in ms of `count` pings from `host` to `ip`."""
    out = fnet.run_in(host, ["ping", "-n", "-q", "-c", str(count), "-i", "0.05", "-W", "2", ip]).stdout
    m = re.search(r"= ([\d.]+)/([\d.]+)/", out)
    assert m and f"{count} received" in out, out
    return float(m.group(1)), float(m.group(2))


# --- (a) the kernel datapath ------------------------------------------------------


def test_kernel_datapath_is_chosen_and_forwards(tmp_path, leak_check, needs_kernel):
    feats = needs_kernel("openvswitch module")
    fabric = build_fabric({}, name="fk-dp")
    with FabricNet(fabric, str(tmp_path), feats=feats) as fnet:
        assert fnet.datapath == "kernel"
        for sw in fabric.switches():
            kind = subprocess.run(
                ["ovs-vsctl", "get", "bridge", sw.name, "datapath_type"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            assert kind in ('""', "system"), f"{sw.name} runs datapath {kind}"
        before, shown = _datapath_lookups()
        assert "t0r0k0-e1" in shown  # the bridges' ports are in the kernel datapath
        src, dst = "s0h0", fabric.nics_of("s1h0")[0].ip
        sent0 = _tx_packets(fnet, src)
        r = fnet.run_in("s1h0", ["iperf3", "-s", "-1", "-D"])
        fnet.wait_listening("s1h0", 5201)  # the daemon listens after its parent returns
        client = fnet.run_in(src, ["iperf3", "-c", dst, "-t", "2", "-J", "--connect-timeout", "3000"])
        sent = _tx_packets(fnet, src) - sent0
        after, _ = _datapath_lookups()
    got = json.loads(client.stdout)["end"]["sum_received"]["bytes"]
    assert r.returncode == 0
    assert got > 2 * 40e6 / 8 * 0.8, f"only {got} bytes in 2 s through a 40 Mbit/s fabric"
    # Every packet the host sent was looked up by the kernel datapath (at
    # each switch on its way, so at least once).
    assert after - before >= sent, f"{after - before} lookups for {sent} packets sent"


def _tx_packets(fnet, host):
    out = fnet.run_in(host, ["ip", "-j", "-s", "link", "show"]).stdout
    return sum(l["stats64"]["tx"]["packets"] for l in json.loads(out) if l["ifname"].startswith(host))


# --- (b) every fabric kind --------------------------------------------------------

# The smallest fat-tree (k = 2: 2 hosts, 5 switches): the kind's wiring and
# routes on the kernel datapath. k = 4 (20 switches) runs natively in
# test_fabric; under software emulation it once took over 30 s to have its
# routes acknowledged and once left a host unanswered by a few probes.
FAT_TREE_K2 = "kind: fat-tree\nk: 2\nrates: {host: 200Gbit}\nscale: 5000\nmtu: 9000\n"
DELAYED_REGION = (
    "kind: region\nfabrics: [{kind: hpn, segments: 1, hosts_per_segment: 2},"
    " {kind: hpn, segments: 1, hosts_per_segment: 2}]\n"
    "dci: {oversubscription: 2, delay: 2ms}\n"
)


@pytest.mark.parametrize(
    "topology",
    [
        "topologies/hpn-mini.yaml",
        "topologies/single-tor-mini.yaml",
        "topologies/clos-mini.yaml",
        "fat-tree-k2",
        "topologies/region-crossdc.yaml",
        "delayed-region",
    ],
)
def test_every_fabric_kind_up_and_all_pairs_reachable(topology, tmp_path, leak_check, needs_kernel):
    feats = needs_kernel("openvswitch module", *(["netem"] if topology == "delayed-region" else []))
    inline = {"delayed-region": DELAYED_REGION, "fat-tree-k2": FAT_TREE_K2}
    if topology in inline:
        (tmp_path / f"{topology}.yaml").write_text(inline[topology])
        topology = tmp_path / f"{topology}.yaml"
    _, fabric = load_topology(topology)
    with FabricNet(
        fabric, str(tmp_path / "run"), log=lambda *a: None, feats=feats, route_timeout=ROUTE_TIMEOUT_S
    ) as fnet:
        assert fnet.datapath == "kernel"
        reach = fnet.check_reachability()
    pairs = [(h, p) for h, d in reach.items() for p in d]
    assert pairs and unreachable(reach) == [], unreachable(reach)


# --- (c) interconnect delay on the wire ---------------------------------------------

DELAY_SCENARIO = "scenarios/crossdc-hierarchical-delay.yaml"


def test_interconnect_delay_measured_on_the_wire(tmp_path, leak_check, needs_kernel, record_property):
    feats = needs_kernel("openvswitch module", "netem")
    fabric = load_scenario(DELAY_SCENARIO).fabric
    dci = [l for l in fabric.links if l.kind == "dci"]
    one_way_ms = fabric.shaped_delay_s(dci[0]) * 1e3
    assert one_way_ms > 0 and all(
        fabric.shaped_delay_s(l) == dci[0].delay_s * fabric.time_dilation for l in dci
    )
    with FabricNet(fabric, str(tmp_path), feats=feats) as fnet:
        nic = fabric.nics_of("d0s0h0")[0]
        near = next(n for n in fabric.nics if n.host == "d0s0h1" and n.rail == nic.rail)
        far = next(n for n in fabric.nics if n.host == "d1s0h0" and n.rail == nic.rail)
        intra, _ = _ping(fnet, "d0s0h0", near.ip)
        cross, _ = _ping(fnet, "d0s0h0", far.ip)
    record_property("min_rtt_ms", {"through_dci": cross, "intra_dc": intra, "one_way_delay": one_way_ms})
    # A round trip crosses the interconnect once each way: twice its delay,
    # plus what the switches and hosts take (an intra-DC round trip, with
    # the few more switches of the cross-DC path as margin).
    assert cross >= 2 * one_way_ms, f"RTT {cross} ms through the DCI < 2 x {one_way_ms} ms"
    assert cross - 2 * one_way_ms <= 3 * intra + 1.0, (
        f"RTT {cross} ms through the DCI: {cross - 2 * one_way_ms:.2f} ms beyond the delay "
        f"(intra-DC {intra} ms)"
    )


# Trust checks that fail when the agents cannot get the CPU they need.
CPU_STARVED_CHECKS = {"generator_fidelity", "agent_reading"}


def test_crossdc_drill_with_delay_passes(tmp_path, leak_check, needs_kernel, record_property):
    needs_kernel("openvswitch module", "netem")
    # Dilation 8. Under software emulation (the VM tier without KVM),
    # undilated, one agent kept its pacing only 0.78 of the time; on a fast
    # host 4 sufficed, and at 8 the interconnect (0.625 Mbit/s, 9000-byte
    # frames) once delivered only 0.885 of what it owed. On a host about
    # three times slower, 4 never sufficed (sending fidelity 0.67-0.83 in 5
    # runs) nor did 6 (0.842-0.844); 8 passed in the 2 runs there that
    # passed and was untrustworthy in 3 (the median agent reading in time
    # 0.789-0.832: its vCPUs stalled up to 126-245 ms, whatever the
    # dilation); 16 was worse (2 of 2: the interconnect, at 0.31 Mbit/s,
    # delivered 0.783 of what it owed, and frames were lost outside the
    # model). A run the gate cannot judge is started again (drillrun), at 8.
    # The expectations are judged in emulated time at any N. When the last
    # run too was untrustworthy only because the agents lacked CPU (their
    # pacing, their reading), the machine could not emulate the drill: the test is
    # then inconclusive, and says so, rather than failed. Any other check
    # (frames lost, links short of their rate, faults late), a trustworthy
    # run that misses an expectation, or no report at all still fails it.
    r = drillrun.run(DELAY_SCENARIO, tmp_path, "--dilation", "8", timeout=900)
    if r.returncode == drillrun.UNTRUSTWORTHY:
        failed = set(json.loads((tmp_path / "results.json").read_text())["trust"]["failed"])
        if failed and failed <= CPU_STARVED_CHECKS:
            pytest.skip(
                f"inconclusive: {drillrun.ATTEMPTS} runs at dilation 8 untrustworthy, the last for want of "
                f"CPU alone ({', '.join(sorted(failed))}; the earlier ones in the re-run summary): "
                "this machine cannot emulate the drill"
            )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    res = json.loads((tmp_path / "results.json").read_text())
    record_property("fidelity", res["metrics"]["fidelity"])
    assert res["metrics"]["fidelity"]["min"] >= 0.9
