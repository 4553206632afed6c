"""The controller going away and coming back, on a real fabric: the
switches keep forwarding on their flows, a restarted controller adopts
them without touching one, and a controller that dies unasked is named."""

import os
import re
import signal
import subprocess

from testbed.emulation.realize import FabricNet
from testbed.fabric.scenario import load_scenario

DURATION = re.compile(r"duration=([0-9.]+)s")


def flow_ages(switch):
    """{flow text without its counters: seconds installed} from the switch."""
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch], check=True, capture_output=True, text=True
    ).stdout
    ages = {}
    for line in out.splitlines():
        m = DURATION.search(line)
        if m:
            rest = re.sub(r"(duration|n_packets|n_bytes|idle_age|hard_age)=[^,]*, ?", "", line).strip()
            ages[rest] = float(m.group(1))
    return ages


def test_a_restart_leaves_every_flow_in_place(tmp_path, leak_check):
    sc = load_scenario("scenarios/controller-restart.yaml")
    with FabricNet(sc.fabric, str(tmp_path / "run"), log=lambda *a: None) as fnet:
        switches = [s.name for s in sc.fabric.switches()]
        before = {s: flow_ages(s) for s in switches}
        assert all(len(a) > 8 for a in before.values())  # routes and the ARP flow
        fnet.stop_controller()
        since = fnet.start_controller()
        fnet.controller.wait_for(
            lambda e: e["event"] == "routes", 20, "routes after the restart", since=since
        )
        after = {s: flow_ages(s) for s in switches}
        for s in switches:
            # The same flows, each older than before: none was deleted and added again.
            assert set(after[s]) == set(before[s]), s
            assert all(after[s][f] >= before[s][f] for f in before[s]), s


def test_a_controller_that_dies_unasked_is_named_and_traffic_goes_on(tmp_path, leak_check, monkeypatch):
    """The scenario's stop is turned into a SIGKILL nobody asked for (so it
    looks like a crash): training goes on without a controller, and the run
    fails naming when the controller died."""
    from testbed.drill.runner import run_scenario

    def crash(fnet):
        os.kill(fnet.controller.proc.pid, signal.SIGKILL)

    monkeypatch.setattr(FabricNet, "stop_controller", crash)
    text = open("scenarios/controller-restart.yaml").read()
    text = re.sub(
        r"controller_timeline:\n(  - .*\n)+", "controller_timeline:\n  - {at: 1s, action: stop}\n", text
    )
    text = (
        text.split("expect:")[0]
        + "expect:\n"
        + "\n".join(
            f"  - {{metric: {m}, job: ring8, {bound}}}"
            for m, bound in (("iterations_completed", "min: 12"), ("gaps_seen", "max: 0"))
        )
        + "\n"
    )
    path = tmp_path / "crash.yaml"
    path.write_text(text.replace("topology: ../", f"topology: {os.getcwd()}/"))
    said = []
    res = run_scenario(load_scenario(path), str(tmp_path / "out"), log=said.append)
    assert not res["passed"]
    (exit_,) = res["metrics"]["controller"]["unplanned"]
    assert exit_["code"] == -signal.SIGKILL and 0.9 < exit_["at"] < 1.5
    assert any("exited at" in p and "without the scenario asking" in p for p in res["problems"])
    assert any("the controller exited" in line for line in said)  # said while running
    # Without a controller the switches forwarded on: every iteration, no loss.
    assert all(e["passed"] for e in res["expectations"]), res["expectations"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Controller" in summary and "not asked: a crash" in summary
