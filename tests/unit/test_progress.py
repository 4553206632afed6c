"""What a run shows while it works: a bar in a terminal, lines elsewhere."""

import io
import os
import select

from testbed.cli.progress import Progress
from testbed.drill.runner import _at, _phase, _slow_steps


def test_outside_a_terminal_only_the_lines_come_out():
    out = io.StringIO()
    progress = Progress(out)
    _phase(progress, "bringing the fabric up")
    progress("fabric hpn-mini: 8 hosts")
    _phase(progress, "traffic", 25.0)
    _at(progress, 10.0)
    progress("[ 10.00s] s0h0 80.0 Mbit/s")
    _phase(progress, None)
    assert out.getvalue() == "fabric hpn-mini: 8 hosts\n[ 10.00s] s0h0 80.0 Mbit/s\n"


def test_in_a_terminal_a_bar_says_the_phase_and_the_emulated_time_left():
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty:
        progress = Progress(tty)
        assert progress.shows_bar
        _phase(progress, "traffic", 25.0)
        _at(progress, 10.0)
        progress("[ 10.00s] s0h0 80.0 Mbit/s")
        _phase(progress, None)
    shown = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    text = shown.decode(errors="replace")
    assert "traffic" in text and "10.0/25 s" in text and "emulated, 15 s to go" in text
    assert "[ 10.00s] s0h0 80.0 Mbit/s" in text


def test_a_plain_function_has_no_phases():
    seen = []
    _phase(seen.append, "traffic", 25.0)
    _at(seen.append, 3.0)
    assert seen == []


def test_a_slow_teardown_names_its_slow_steps_longest_first():
    took = {"controller": 0.2, "Mininet": 9.14, "sweep of what was recorded": 4.2, "queue engine": 1.0}
    assert _slow_steps(took) == " (Mininet 9.1 s, sweep of what was recorded 4.2 s, queue engine 1.0 s)"
    assert _slow_steps({"controller": 0.2, "Mininet": 0.9}) == ""
