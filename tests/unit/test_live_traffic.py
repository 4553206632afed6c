"""`hpnlab traffic start`'s owner side, short of playing traffic: which
scenarios it refuses and how the refusal reaches the client."""

from pathlib import Path
from types import SimpleNamespace

from testbed.drill import live_traffic
from testbed.fabric.scenario import load_fabric, load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_a_scenario_runs_only_on_its_own_fabric():
    running = load_fabric(ROOT / "scenarios" / "crux-classes.yaml")[1].to_dict()
    same = load_scenario(ROOT / "scenarios" / "crux-contention.yaml").fabric.to_dict()
    other = load_scenario(ROOT / "scenarios" / "ecn-dcqcn.yaml").fabric.to_dict()
    bare = load_fabric(ROOT / "topologies" / "hpn-mini.yaml")[1].to_dict()
    assert live_traffic.fabric_difference(running, dict(running, name="another")) is None
    assert "queues" in live_traffic.fabric_difference(running, bare)
    assert "links" in live_traffic.fabric_difference(running, other)
    assert live_traffic.fabric_difference(running, same) in (None, "queues")


def serve_once(tmp_path, scenario, fabric_file):
    fnet = SimpleNamespace(run_dir=str(tmp_path), fabric=load_fabric(fabric_file)[1])
    server = live_traffic.TrafficServer(fnet, log=lambda line: None)
    server.start()
    lines = []
    try:
        live_traffic.request(str(tmp_path), str(scenario), str(tmp_path / "out"), [], lines.append)
    finally:
        server.stop()
    return lines


def test_the_owner_refuses_another_fabrics_scenario_and_says_why(tmp_path):
    lines = serve_once(
        tmp_path, ROOT / "scenarios" / "ecn-dcqcn.yaml", ROOT / "scenarios" / "crux-classes.yaml"
    )
    assert len(lines) == 1 and lines[0]["invalid"]
    assert "its fabric is not the one running (links, " in lines[0]["error"]
    assert "start that fabric with 'hpnlab up " in lines[0]["error"]
    assert not (tmp_path / "out").exists()


def test_the_owner_checks_the_file_itself(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntopology: /etc/machine-id\nduration: 5\n")
    lines = serve_once(tmp_path, bad, ROOT / "scenarios" / "crux-classes.yaml")
    assert lines[0]["invalid"] and f"{bad}: topology: " in lines[0]["error"]


def test_one_run_at_a_time(tmp_path):
    fnet = SimpleNamespace(
        run_dir=str(tmp_path), fabric=load_fabric(ROOT / "scenarios" / "crux-classes.yaml")[1]
    )
    server = live_traffic.TrafficServer(fnet, log=lambda line: None)
    server.start()
    lines = []
    try:
        with server.busy:  # a run in progress
            live_traffic.request(str(tmp_path), "x.yaml", str(tmp_path / "out"), [], lines.append)
    finally:
        server.stop()
    assert lines == [{"error": "traffic is already running on this fabric; wait until it ends"}]
    assert not (tmp_path / live_traffic.SOCKET_NAME).exists()


def test_a_run_folder_too_long_for_a_socket_name_still_serves(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep / live_traffic.SOCKET_NAME)) > 100
    lines = serve_once(deep, ROOT / "scenarios" / "ecn-dcqcn.yaml", ROOT / "scenarios" / "crux-classes.yaml")
    assert "its fabric is not the one running" in lines[0]["error"]
