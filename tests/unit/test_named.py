"""Named fabrics (testbed/emulation/named.py): which names are taken, where
their records live, and the commands that enter their namespaces."""

import pytest

from testbed.cli import main
from testbed.emulation import capabilities, ledger, named


@pytest.mark.parametrize("name", ["a", "alice", "lab-05", "s" + "x" * 23])
def test_a_fabric_name_is_short_lowercase_and_plain(name):
    assert named.name_problem(name) is None


@pytest.mark.parametrize(
    "name", ["", "Alice", "5a", "-a", "a b", "a/b", "..", "a$(id)", "s" + "x" * 24, "a\nb"]
)
def test_anything_else_is_refused(name):
    assert "is not a fabric name" in named.name_problem(name)


def test_a_bad_name_is_one_line_and_status_2(capsys, monkeypatch):
    monkeypatch.delenv("HPNLAB_FABRIC", raising=False)
    assert main(["--fabric", "../x", "status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fabric: '../x' is not a fabric name" in err


def test_each_name_has_its_own_record_and_switch_folder(monkeypatch):
    monkeypatch.delenv("HPNLAB_FABRIC", raising=False)
    assert ledger.state_file() == ledger.STATE_FILE == "/run/hpnlab/fabric.json"
    assert ledger.down_command() == "hpnlab down"
    monkeypatch.setenv("HPNLAB_FABRIC", "alice")
    assert ledger.state_file() == "/run/hpnlab/fabrics/alice/fabric.json"
    assert ledger.state_file("bob") == "/run/hpnlab/fabrics/bob/fabric.json"
    assert ledger.down_command() == "hpnlab --fabric alice down"
    assert named.environment("alice")["OVS_RUNDIR"] == "/run/hpnlab/fabrics/alice/ovs"


def test_a_named_fabric_always_has_the_userspace_datapath(monkeypatch):
    kernel = [capabilities.Feature("openvswitch module", True, "loaded", "")]
    monkeypatch.delenv("HPNLAB_FABRIC", raising=False)
    assert capabilities.datapath(kernel) == "kernel"
    monkeypatch.setenv("HPNLAB_FABRIC", "alice")
    assert capabilities.datapath(kernel) == "user"


def test_the_command_reaches_the_namespaces_as_arguments_never_as_shell_text():
    hostile = ["run", "a; touch PWN.yaml", "--out", "$(id)"]
    argv = named.new_namespaces_argv(hostile)
    assert argv[:6] == ["unshare", "--net", "--mount", "--propagation", "private", "sh"]
    script = argv[argv.index("-c") + 1]
    assert script.endswith('exec "$@"') and "PWN" not in script
    assert argv[-4:] == hostile and "-I" in argv  # hpnlab's own code, isolated from the caller's folder
    entered = named.running_namespaces_argv(4242, hostile)
    assert entered[:4] == ["nsenter", "--target=4242", "--net", "--mount"] and entered[-4:] == hostile


def test_outside_its_namespaces_a_process_is_not_inside(monkeypatch):
    monkeypatch.setenv("HPNLAB_FABRIC_NS", "net:[1]")
    assert not named.inside()
    monkeypatch.delenv("HPNLAB_FABRIC_NS")
    assert not named.inside()
