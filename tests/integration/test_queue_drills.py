"""Priority classes, ECN and queue telemetry on a real fabric: marks follow
the measured backlog, and the queue drills pass from counters."""

import subprocess
import threading
import time

import drillrun
import numpy as np
import pytest

from testbed.emulation import capabilities
from testbed.emulation.queues import CLASSES
from testbed.emulation.realize import FabricNet
from testbed.fabric.scenario import load_scenario

K = 60_000  # bytes: 12 ms at 40 Mbit/s
FRAME = 8_000 + 42  # the UDP datagrams below, with their headers


@pytest.fixture(autouse=True)
def needs_engine():
    if not capabilities.has(capabilities.probe(), capabilities.BPF_QUEUES):
        pytest.skip("the BPF queue engine does not work on this machine (hpnlab doctor)")


def test_marks_begin_when_the_measured_backlog_crosses_k(tmp_path, leak_check):
    path = tmp_path / "k.yaml"
    path.write_text(f"""
name: k
topology: {{kind: hpn, planes: 1, dual_tor: false, segments: 1, hosts_per_segment: 2,
            aggs_per_plane: 1}}
duration: 5
queues:
  classes:
    - {{name: roce, dscp: [26], buffer: 100ms, ecn: {{k: {K * 5000}B}}}}
    - {{name: other}}
traffic:
  - {{src: s0h0, dst: s0h1}}
""")  # sizes are real bytes, divided by the default scale (5000)
    sc = load_scenario(path)
    with FabricNet(sc.fabric, str(tmp_path / "run"), log=lambda *a: None) as fnet:
        eng = fnet.queues
        port = sc.fabric.nics_of("s0h0")[0].ports[0]
        row = eng.slots[port] * CLASSES + 0
        dst = sc.fabric.nics_of("s0h1")[0].ip
        server = fnet.popen_in("s0h1", ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        fnet.wait_listening("s0h1", 5201, server)
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                st = np.frombuffer(eng.counters(), dtype=np.uint64).reshape(-1, 8)[row]
                samples.append((int(st[0]) - int(st[2]), int(st[6]), int(st[7])))
                time.sleep(0.0005)

        t = threading.Thread(target=sample)
        t.start()
        # UDP at 1.5x the port's 40 Mbit/s, DSCP 26 and ECT(0) in the TOS byte
        client = fnet.run_in(
            "s0h0",
            [
                "iperf3",
                "-c",
                dst,
                "-u",
                "-b",
                "60M",
                "-l",
                "8000",
                "-t",
                "2",
                "-S",
                str(26 << 2 | 2),
                "--connect-timeout",
                "3000",
            ],
            check=False,
        )
        stop.set()
        t.join()
        server.wait(10)
    assert client.returncode == 0, client.stderr
    backlog = np.array([s[0] for s in samples])
    marks = np.array([s[1] for s in samples])
    assert marks[-1] > 100 and samples[-1][2] > marks[-1], "marks only some ECT packets"
    first_mark = int(np.argmax(marks > 0))
    # Not before: until the first mark the backlog had not reached K, less
    # what one sample interval can drain (2 ms at 5 KB/ms) and one datagram.
    slack = 10_000 + FRAME
    crossed = np.nonzero(backlog >= K - slack)[0]
    assert crossed.size and crossed[0] <= first_mark
    assert backlog[: max(1, crossed[0])].max() < K
    # And marks grow only while the backlog is at K.
    grew = np.nonzero(np.diff(marks) > 0)[0]
    at_k = np.maximum(backlog[grew], backlog[grew + 1]) >= K - slack
    assert at_k.mean() > 0.99, f"{(~at_k).sum()} of {grew.size} mark increments below K"


def test_priority_isolation_drill(tmp_path, leak_check):
    r, res = drillrun.run_with_results("scenarios/priority-isolation.yaml", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert res["metrics"]["hosts"]["s0h0"]["mean_mbit"] >= 36
    assert res["metrics"]["classes"]["high"]["drops"] == 0
    assert res["metrics"]["queue_telemetry"]["sample_hz"] >= 90


def test_ecn_holds_the_queue_that_fills_without_it(tmp_path, leak_check):
    r, on = drillrun.run_with_results("scenarios/ecn-dcqcn.yaml", tmp_path / "on")
    assert r.returncode == 0, r.stdout + r.stderr
    r, off = drillrun.run_with_results("scenarios/ecn-dcqcn-off.yaml", tmp_path / "off")
    assert r.returncode == 0, r.stdout + r.stderr
    on_q, off_q = on["metrics"]["classes"]["roce"], off["metrics"]["classes"]["roce"]
    assert on_q["marks"] > 0 and on_q["drops"] == 0 and off_q["marks"] == 0
    assert on_q["p99_backlog_bytes"] * 3 < off_q["p99_backlog_bytes"]
    assert all(j["cnps"] > 0 for j in on["metrics"]["jobs"].values())


def test_incast_on_a_lossless_class_pauses_instead_of_dropping(tmp_path, leak_check):
    r, on = drillrun.run_with_results("scenarios/incast-pfc.yaml", tmp_path / "on")
    assert r.returncode == 0, r.stdout + r.stderr
    r, off = drillrun.run_with_results("scenarios/incast-pfc-off.yaml", tmp_path / "off")
    assert r.returncode == 0, r.stdout + r.stderr
    assert on["metrics"]["classes"]["roce"]["drops"] == 0
    assert off["metrics"]["classes"]["roce"]["drops"] > 0
    pfc = on["metrics"]["pfc"]
    assert pfc["pauses"] >= 50 and not pfc["errors"]
    # the ToR paused the seven senders' ports, never the receiver's
    assert {r["link"] for r in on["pauses"]} == {f"s0h{i}-n0p0" for i in range(7)}
    for stats in (pfc["in_force_ms"], pfc["resume_ms"]):
        assert stats["median"] <= 1.0 and stats["p99"] <= 5.0, stats
    # After a pause takes hold, the frame on its way and one burst arrive
    # (2 frames). A frame that left the host before the pause can also wait
    # in a CPU's input backlog and arrive later: in 2 runs of 20 on one
    # machine, 1-3 of about 870 pauses let 3-4 frames by (either allocator
    # of Open vSwitch). So the bound holds for 99% of the pauses, as the
    # reaction times above are judged by their 99th percentile.
    let_by = [r["let_by_bytes"] for r in on["pauses"] if "let_by_bytes" in r]
    assert len(let_by) >= 50 and np.percentile(let_by, 99) <= 2 * 9014, sorted(let_by)[-10:]
    assert (tmp_path / "on" / "pauses.png").exists()


def test_a_flow_sharing_only_upstream_links_with_an_incast_is_held_by_its_pauses(tmp_path, leak_check):
    r, on = drillrun.run_with_results("scenarios/pfc-victim.yaml", tmp_path / "on")
    assert r.returncode == 0, r.stdout + r.stderr
    r, off = drillrun.run_with_results("scenarios/pfc-victim-off.yaml", tmp_path / "off")
    assert r.returncode == 0, r.stdout + r.stderr
    slow_on = on["metrics"]["jobs"]["victim"]["iteration_time_vs_analytical"]
    slow_off = off["metrics"]["jobs"]["victim"]["iteration_time_vs_analytical"]
    assert slow_on > 1.2 * slow_off
    # the link from the aggregation switch into s1h0's ToR carries the victim too
    assert on["metrics"]["pfc"]["links"]["a0n0-e2/roce"]["pauses"] > 0
