"""Integration tier: builds real fabrics (Mininet, Open vSwitch, tc, iperf3).

Skipped, with the reason, when not root or when Open vSwitch or Mininet is
missing. These tests share OVS and interface names: never run two at once.
"""

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.emulation.capabilities import SYSTEM_OVS_RUNDIR


def _skip_reason():
    if os.geteuid() != 0:
        return "needs root (creates namespaces, veths and OVS bridges)"
    if importlib.util.find_spec("mininet") is None:
        return "Mininet is not importable (run: make setup)"
    if (
        not shutil.which("ovs-vsctl")
        or subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True).returncode != 0
    ):
        return "Open vSwitch is not running (run: make setup)"
    if not shutil.which("iperf3"):
        return "iperf3 is missing (run: make setup)"
    return None


HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def pytest_collection_modifyitems(config, items):
    reason = _skip_reason()
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def _file_state(path):
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


@pytest.fixture(scope="session", autouse=True)
def calibration_of_the_suite(tmp_path_factory):
    """A machine without a calibration takes one from its first undilated
    drill like the calibration ring: the suite's drills store theirs in a
    file of the suite's (HPNLAB_CALIBRATION, which every hpnlab process
    they start inherits), and the machine's file is checked to be as it
    was."""
    from testbed.plan import calibration

    machine = _file_state(calibration.DEFAULT_PATH)
    was = os.environ.get(calibration.PATH_ENV)
    os.environ[calibration.PATH_ENV] = str(tmp_path_factory.mktemp("calibration") / "calibration.json")
    yield
    if was is None:
        del os.environ[calibration.PATH_ENV]
    else:
        os.environ[calibration.PATH_ENV] = was
    assert _file_state(calibration.DEFAULT_PATH) == machine, (
        f"the test suite changed the machine's calibration, {calibration.DEFAULT_PATH}"
    )


def snapshot():
    """What fabric-shaped resources exist on the machine right now."""
    br = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    names = {line.split(":")[1].strip().split("@")[0] for line in links.stdout.splitlines()}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    pins = "/sys/fs/bpf/tc/globals"
    return {
        "bridges": set(br.stdout.split()),
        "links": names,
        "netns": set(netns.stdout.split()),
        "processes in other network namespaces": _namespaced_processes(),
        "pinned BPF maps": set(os.listdir(pins)) if os.path.isdir(pins) else set(),
        "bpffs mounts": {"/sys/fs/bpf"} if os.path.ismount("/sys/fs/bpf") else set(),
        "pause daemons": _pause_daemons(),
        "controller socket folders": {d for d in os.listdir(SYSTEM_OVS_RUNDIR) if d.startswith("hpnlab-")}
        if os.path.isdir(SYSTEM_OVS_RUNDIR)
        else set(),
    }


def _pause_daemons():
    """'pid' of every pause daemon (testbed/emulation/pfc.py) running: one
    lives in this namespace, so the check above cannot see it."""
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"testbed.emulation.pfc" in fh.read():
                    out.add(pid)
        except OSError:
            continue
    return out


def _namespaced_processes():
    """'pid command' of every process outside this network namespace: the
    shells, agents, iperf3s and tcpdumps of emulated hosts (Mininet's
    namespaces have no name, so `ip netns list` cannot see them)."""
    mine = os.readlink("/proc/self/ns/net")
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") == mine:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        if cmd:
            out.add(f"{entry} {cmd[:80]}")
    return out


@pytest.fixture(autouse=True)
def repo_root(monkeypatch):
    """Scenario and topology paths in these tests are relative to the repo."""
    monkeypatch.chdir(REPO)


@pytest.fixture(autouse=True)
def results_fit_their_schema(tmp_path):
    """Every results.json a test's drills wrote (under its tmp_path) has the
    public shape testbed/results/schemas/results.json declares. (Asking for
    tmp_path here keeps it until this check has run.)"""
    yield
    from testbed.results.store import load_results, shape_problems

    for path in sorted(tmp_path.rglob("results.json")):
        problems = shape_problems(load_results(str(path)))
        assert not problems, f"{path}: " + "; ".join(problems[:5])


@pytest.fixture
def leak_check():
    """Fails the test if it leaves bridges, interfaces, namespaces, hpnlab
    processes or a fabric record behind."""
    from testbed.emulation import ledger

    before = snapshot()
    yield
    after = snapshot()
    for kind in before:
        extra = after[kind] - before[kind]
        assert not extra, f"left behind {kind}: {sorted(extra)}"
    assert ledger.load() is None, "the fabric record was not released"
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    assert "controllers.run" not in ps, "controller process left running"


@pytest.fixture(scope="session")
def kernel_features():
    """What this kernel can do (hpnlab doctor's probe), once per session."""
    from testbed.emulation import capabilities

    return capabilities.probe()


@pytest.fixture
def needs_kernel(kernel_features):
    """needs_kernel("netem", ...): skip the test, naming what this kernel
    lacks (the full-kernel tests: make test-vm runs them in a VM)."""
    from testbed.emulation import capabilities

    def check(*names):
        missing = capabilities.lacking(kernel_features, *names)
        if missing:
            pytest.skip(
                f"this kernel lacks {', '.join(missing)} (hpnlab doctor); "
                "make test-vm runs this in a VM with the stock Debian kernel"
            )
        return kernel_features

    return check


@pytest.fixture
def machine_state():
    """A function returning the fabric-shaped resources on the machine now."""
    return snapshot


def pytest_terminal_summary(terminalreporter):
    """Say which drills passed only after an untrustworthy first try."""
    import drillrun

    for line in drillrun.summary_lines():
        terminalreporter.write_line(line)
