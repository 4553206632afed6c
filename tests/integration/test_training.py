"""Training jobs end to end: RoCE-style agents in the hosts, measured
against the algorithms' volumes and the analytical iteration time, under
faults, across DCs, and on the wire as Wireshark sees it."""

import shutil
import subprocess

import drillrun
import pytest

from traffic import roce


def test_allreduce_ring_matches_the_formulas(tmp_path, leak_check):
    r, res = drillrun.run_with_results("scenarios/allreduce-ring.yaml", tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    job = res["metrics"]["jobs"]["ring8"]
    assert job["iterations_completed"] == 8
    # measured at the receivers: 2(N-1)/N x S payload bytes per rank per iteration
    assert job["bytes_per_rank_expected"] == 2 * 7 * 1_000_000 // 8
    assert abs(job["bytes_per_rank_ratio"] - 1.0) < 1e-3
    # Within 15% of the analytical time on an idle fabric. The host port's
    # HTB lets its burst (about 3 frames) leave at once when a transfer
    # starts, which the analytical time does not count: a few percent faster.
    assert 0.9 <= job["iteration_time_vs_analytical"] <= 1.15
    # an idle fabric needs (almost) no repair; any loss is named and located
    assert job["retransmission_ratio"] < 0.01
    assert job["packets_sent"] >= 8 * 8 * 1_750_000 // 4096
    if job["retransmissions"]:
        assert job["timeouts"] > 0 or (job["gaps_seen"] > 0 and job["gap_events"])
    assert res["metrics"]["fidelity"]["min"] >= 0.9
    assert (tmp_path / "iterations.png").stat().st_size > 5000


def test_dual_tor_job_rides_through_single_tor_job_stalls(tmp_path, leak_check):
    r, dual = drillrun.run_with_results("scenarios/dual-tor-training.yaml", tmp_path / "dual")
    assert r.returncode == 0, r.stdout[-2000:]
    r, single = drillrun.run_with_results("scenarios/single-tor-training.yaml", tmp_path / "single")
    assert r.returncode == 0, r.stdout[-2000:]
    d, s = dual["metrics"]["jobs"]["ring8"], single["metrics"]["jobs"]["ring8"]
    assert d["stalled_iterations"] == 0 and d["fault_iteration_slowdown"] <= 1.5
    assert s["stalled_iterations"] >= 1
    assert max(s["iteration_times_s"]) >= 8.0  # waited out most of the 10 s outage
    assert s["retransmissions"] > 0  # go-back-N kept trying
    stall = s["iteration_times_s"].index(max(s["iteration_times_s"]))
    assert s["iterations_completed"] > stall + 1  # and training resumed afterwards


def test_hierarchical_beats_flat_ring_across_dcs(tmp_path, leak_check):
    r, res = drillrun.run_with_results("scenarios/crossdc-hierarchical.yaml", tmp_path)
    assert r.returncode == 0, r.stdout[-2000:]
    flat, hier = res["metrics"]["jobs"]["flat-ring"], res["metrics"]["jobs"]["hierarchical"]
    assert hier["iteration_time_s"] < 0.8 * flat["iteration_time_s"]
    assert 0 < hier["dci_bytes"] < flat["dci_bytes"]
    assert hier["crossing_bytes_per_iteration"] < flat["crossing_bytes_per_iteration"]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (make setup)")
def test_capture_dissects_as_roce(tmp_path, leak_check):
    scenario = tmp_path / "cap.yaml"
    scenario.write_text(
        "name: capture-check\n"
        "topology: {kind: hpn}\n"
        "duration: 4\n"
        "jobs:\n"
        "  - {name: pair, hosts: [s0h0, s1h0], collective: ring, bytes: 1GB, compute: 50ms,"
        " iterations: 3, dscp: 34}\n"
        "capture: {hosts: [s1h0], packets: 200}\n"
    )
    # a 4 s run too short to judge the emulator: only its capture is read
    r, res = drillrun.run_with_results(scenario, tmp_path / "out", verdict_matters=False)
    pcap = tmp_path / "out" / "capture-s1h0.pcap"
    assert res["files"]["captures"] == ["capture-s1h0.pcap"]
    fields = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-T",
            "fields",
            "-e",
            "frame.protocols",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "ip.dsfield.dscp",
            "-e",
            "ip.dsfield.ecn",
            "-e",
            "_ws.malformed",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    rows = [line.split("\t") for line in fields]
    assert len(rows) == 200
    assert all("infiniband" in row[0] for row in rows)
    opcodes = {int(row[1]) for row in rows}
    assert {roce.SEND_FIRST, roce.SEND_MIDDLE, roce.ACK} <= opcodes
    assert {row[2] for row in rows} == {"34"} and {row[3] for row in rows} == {"2"}
    assert not any(len(row) > 4 and row[4] for row in rows)
    # the ICRC of every captured frame is right
    from scapy.all import IP, Ether, rdpcap

    for pkt in rdpcap(str(pcap)):
        assert roce.verify_icrc(bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / pkt[IP]))


def test_jobs_sharing_hosts_slow_each_other(tmp_path, leak_check):
    r, res = drillrun.run_with_results("scenarios/two-jobs-contention.yaml", tmp_path)
    assert r.returncode == 0, r.stdout[-2000:]
    jobs = res["metrics"]["jobs"]
    alone, shared = jobs["large-alone"], jobs["large-shared"]
    assert shared["iteration_time_s"] > 1.1 * alone["iteration_time_s"]
    assert shared["gpu_utilization"] < alone["gpu_utilization"]
    # the aggregate weighs each job by its GPUs (8 + 8 + 4 ranks)
    weighted = sum(j["gpu_utilization"] * j["ranks"] for j in jobs.values()) / 20
    assert abs(res["metrics"]["gpu_utilization"] - weighted) < 1e-9
