"""The live commands as a user types them, in a real terminal: `hpnlab up`
in one tmux pane (in the foreground, as a user starts it), `status`, an
interactive `exec` shell and `link` in a second pane, then Ctrl-C in the
first pane tears the fabric down.

Each step waits for what the terminal shows (a line the command prints, a
marker echoed after it with its exit status), with a deadline."""

import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HPNLAB = f"{shlex.quote(sys.executable)} -m testbed.cli"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux (make setup installs it)")


class Terminal:
    """A tmux server of this test's own (its own socket), so that nothing
    of the user's tmux is touched, and it is ended by that socket."""

    def __init__(self, folder: Path):
        self.sock = str(folder / "tmux.sock")

    def tmux(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=15)
        assert r.returncode == 0, f"tmux {args}: {r.stderr}"
        return r.stdout

    def type(self, pane: str, line: str) -> None:
        self.tmux("send-keys", "-t", pane, "-l", line)
        self.tmux("send-keys", "-t", pane, "Enter")

    def screen(self, pane: str) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-500", "-t", pane)

    def wait_for(self, pane: str, text: str, timeout: float) -> str:
        """The pane's text once `text` (a regular expression) is on it;
        fails with the screen after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen(pane)
            if re.search(text, shown):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not shown in pane {pane} within {timeout:.0f} s:\n{shown}")
            time.sleep(0.2)  # a terminal has no event to wait on: its screen is read again

    def run(self, pane: str, command: str, timeout: float = 60) -> tuple[str, int]:
        """Type `command` and wait until it ends: (what the pane shows after
        it was typed, its exit status)."""
        mark = uuid.uuid4().hex[:8]
        self.type(pane, f"{command}; echo END-{mark}=$?")
        shown = self.wait_for(pane, rf"END-{mark}=\d+", timeout)  # the echo's output, not the line typed
        tail = shown[shown.rindex(f"; echo END-{mark}") :]
        return tail, int(re.findall(rf"END-{mark}=(\d+)", tail)[-1])


def test_up_in_one_pane_commands_in_another_then_ctrl_c(tmp_path, leak_check):
    term = Terminal(tmp_path)
    run_dir = tmp_path / "run"
    term.tmux("new-session", "-d", "-s", "hpn", "-x", "200", "-y", "50", "-c", str(ROOT), "bash --norc")
    try:
        term.tmux("split-window", "-t", "hpn", "-c", str(ROOT), "bash --norc")
        up, other = "hpn.0", "hpn.1"
        term.type(
            up, f"{HPNLAB} up topologies/hpn-mini.yaml --run-dir {shlex.quote(str(run_dir))}; echo UP-END=$?"
        )
        term.wait_for(up, "fabric is up", timeout=180)

        shown, status = term.run(other, f"{HPNLAB} status")
        assert status == 0 and "hpn-mini" in shown, shown

        # an interactive shell in the host, on this terminal: what is typed
        # runs in s0h0's namespace, and its exit status comes back
        mark = uuid.uuid4().hex[:8]
        term.type(other, f"{HPNLAB} exec s0h0; echo EXEC-{mark}=$?")
        term.type(other, "ip -o -4 addr show | grep -o '10\\.0\\.0\\.1/[0-9]*'; exit 3")
        shown = term.wait_for(other, rf"EXEC-{mark}=\d", timeout=30)
        assert f"EXEC-{mark}=3" in shown and "10.0.0.1/" in shown, shown

        shown, status = term.run(other, f"{HPNLAB} link s0h0 t0r0k0 down")
        assert status == 0 and "acknowledged by every switch" in shown, shown
        shown, status = term.run(other, f"{HPNLAB} status")
        assert status == 0 and "23/24 links up" in shown and "down: " in shown, shown
        shown, status = term.run(other, f"{HPNLAB} link s0h0 t0r0k0 up")
        assert status == 0 and "acknowledged by every switch" in shown, shown

        # Ctrl-C where the fabric was started: it is torn down, exit status 0
        term.tmux("send-keys", "-t", up, "C-c")
        shown = term.wait_for(up, r"UP-END=\d", timeout=120)
        assert "torn down" in shown and "UP-END=0" in shown, shown
        shown, status = term.run(other, f"{HPNLAB} status")
        assert status != 0 and "no fabric is up" in shown, shown
    finally:
        _end_fabric_if_up(term)
        subprocess.run(["tmux", "-S", term.sock, "kill-server"], capture_output=True, timeout=15)


def _end_fabric_if_up(term):
    """After a failure half-way: Ctrl-C the `up` pane, then `hpnlab down`
    (it stops only the fabric this machine's ledger records)."""
    subprocess.run(
        ["tmux", "-S", term.sock, "send-keys", "-t", "hpn.0", "C-c"], capture_output=True, timeout=15
    )
    subprocess.run([sys.executable, "-m", "testbed.cli", "down"], capture_output=True, timeout=120, cwd=ROOT)


def test_a_drill_in_a_terminal_shows_its_emulated_time_and_what_remains(tmp_path, leak_check):
    term = Terminal(tmp_path)
    out = tmp_path / "report"
    term.tmux("new-session", "-d", "-s", "hpn", "-x", "160", "-y", "40", "-c", str(ROOT), "bash --norc")
    try:
        mark = uuid.uuid4().hex[:8]
        run = f"{HPNLAB} run scenarios/dual-tor-link-failure.yaml --out {shlex.quote(str(out))}"
        term.type("hpn.0", f"{run}; echo END-{mark}=$?")
        # while the traffic runs, the bottom line is a bar of emulated seconds
        seen = term.wait_for("hpn.0", r"traffic .*\d+\.\d/25 s, emulated, \d+ s to go", timeout=120)
        done, left = re.findall(r"(\d+\.\d)/25 s, emulated, (\d+) s to go", seen)[-1]
        assert abs(float(done) + int(left) - 25) <= 1, (done, left)
        # with the report's lines above it, whole
        shown = term.wait_for("hpn.0", rf"END-{mark}=\d+", timeout=180)
        assert f"END-{mark}=0" in shown and "PASSED" in shown, shown
        assert re.search(r"\[ *\d+\.\d\ds\] s0h0 +\d", shown), shown
    finally:
        subprocess.run(["tmux", "-S", term.sock, "kill-server"], capture_output=True, timeout=15)
