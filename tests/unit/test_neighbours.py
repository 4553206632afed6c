"""Room in the kernel's ARP table for a fabric (testbed.emulation.neighbours)
and the ledger putting the limits back."""

import pytest

from testbed.emulation import ledger, neighbours
from testbed.fabric.build import build_fabric


@pytest.mark.parametrize("segments, per_segment, need", [(2, 4, 8 * 2 * 7), (16, 8, 128 * 2 * 127)])
def test_entries_are_the_checks_pairs(segments, per_segment, need):
    fabric = build_fabric({"segments": segments, "hosts_per_segment": per_segment})
    assert neighbours.entries(fabric) == need


def test_limits_rise_only_when_needed_and_never_fall():
    assert neighbours.limits(112, 8192, 16384) == {}
    assert neighbours.limits(32512, 8192, 16384) == {neighbours.GC_SOFT: 48768, neighbours.GC_HARD: 65024}
    # a soft limit already high enough stays; the hard one follows what is needed
    assert neighbours.limits(32512, 60000, 16384) == {neighbours.GC_HARD: 65024}
    assert neighbours.limits(32512, 100000, 100000) == {}


def test_the_sweep_puts_the_limits_back_unless_someone_changed_them(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "SYSCTL_ROOT", str(tmp_path))
    for name, value in ((neighbours.GC_SOFT, "8192"), (neighbours.GC_HARD, "16384")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(value + "\n")
    led = ledger.Ledger(str(tmp_path / "run" / "fabric.json"))
    led.set_sysctl(neighbours.GC_SOFT, 48768)
    led.set_sysctl(neighbours.GC_HARD, 65024)
    assert ledger.read_sysctl(neighbours.GC_SOFT) == "48768"
    # another fabric raised the hard limit further while this one ran
    ledger.write_sysctl(neighbours.GC_HARD, 99999)
    led._restore_sysctls()
    assert ledger.read_sysctl(neighbours.GC_SOFT) == "8192"
    assert ledger.read_sysctl(neighbours.GC_HARD) == "99999"
    # the record on disk says what to put back, for a sweep from another process
    again = ledger.load(str(tmp_path / "run" / "fabric.json"))
    assert again.data["sysctls"][neighbours.GC_SOFT] == {"was": "8192", "set": "48768"}
