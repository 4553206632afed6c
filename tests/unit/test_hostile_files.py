"""Files that try to hang or exhaust the machine are refused: one line naming
the file and the field, exit status 1. Each runs `hpnlab check` in its own
process with a hang guard, since the failure being guarded against is a
process that never returns (nine levels of nine nested aliases once grew
`check` to 6.3 GB and kept it running for minutes)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cli import main

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 20  # far above a refusal; only a runaway process reaches it

ALIASES = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
ALIASES = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + ALIASES + "kind: hpn\n"

SCENARIO = """name: big
topology: {kind: hpn}
duration: 10
"""

CASES = [
    # (id, file text, field, words the message must contain)
    ("nested-aliases", ALIASES, "(top)", "aliases (*l0) are not allowed"),
    ("one-alias", "base: &b {kind: hpn}\nother: *b\n", "(top)", "aliases (*b) are not allowed"),
    (
        "deep-nesting",
        "kind: hpn\nx: " + "[" * 5000 + "]" * 5000 + "\n",
        "(top)",
        "nested deeper than 32 levels",
    ),
    (
        "huge-hpn",
        "kind: hpn\nsegments: 255\nhosts_per_segment: 254\nrails: 8\n",
        "(top)",
        "more than 512 switches",
    ),
    ("many-hosts", "kind: hpn\nsegments: 16\nhosts_per_segment: 254\n", "(top)", "more than 512 hosts"),
    (
        "many-aggs",
        "kind: hpn\naggs_per_plane: 1000000000\n",
        "aggs_per_plane",
        "expected an integer from 1 to 64",
    ),
    ("big-fat-tree", "kind: fat-tree\nk: 30\n", "(top)", "more than 512 hosts"),
    (
        "many-dci-links",
        "kind: region\nfabrics: [{kind: hpn}, {kind: hpn}]\ndci: {rate: 1Gbit, links: 100000}\n",
        "dci.links",
        "from 1 to 16",
    ),
    (
        "long-drill",
        SCENARIO.replace("duration: 10", "duration: 1000000s") + "traffic: [{src: s0h0, dst: s1h0}]\n",
        "duration",
        "expected at most 3600s",
    ),
    (
        "many-streams",
        SCENARIO
        + "traffic:\n"
        + "".join(
            f"  - {{src: s0h{i % 4}, dst: [s1h0, s1h1, s1h2, s1h3], parallel: 16}}\n" for i in range(17)
        ),
        "traffic",
        "at most 1024 iperf3 streams",
    ),
    (
        "too-many-flow-entries",
        SCENARIO + "traffic:\n" + "  - {src: s0h0, dst: s1h0}\n" * 300,
        "traffic",
        "a list of at most 256 items",
    ),
    (
        "huge-capture",
        SCENARIO + "traffic: [{src: s0h0, dst: s1h0}]\ncapture: {hosts: [s0h0], packets: 1000000000}\n",
        "capture.packets",
        "from 1 to 100000",
    ),
    (
        "huge-job",
        SCENARIO + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, "
        "bytes: 1000TB, iterations: 10000}]\n",
        "jobs[0].bytes",
        "at most 1000000000 bytes per iteration",
    ),
    (
        "many-iterations",
        SCENARIO + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, "
        "bytes: 1GB, iterations: 100000000}]\n",
        "jobs[0].iterations",
        "from 1 to 10000",
    ),
    (
        "long-compute",
        SCENARIO + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, "
        "bytes: 1GB, compute: 1000000s}]\n",
        "jobs[0].compute",
        "expected at most 3600s",
    ),
    # YAML 1.1 reads 1:59:59 as base 60: a megabyte of it took 19 s to convert
    (
        "base-60-number",
        "kind: hpn\nsegments: 1" + ":59" * 330_000 + "\n",
        "(top)",
        "a number of 990001 characters, expected at most 32",
    ),
]


def check(path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", "check", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


@pytest.mark.parametrize("text,field,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_file_is_refused_on_one_line(tmp_path, text, field, words):
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    r = check(path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: {field}: ") and words in lines[0], lines[0]


def test_a_file_over_a_mebibyte_is_not_read(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("kind: hpn\n" + "# padding\n" * 120_000)
    r = check(path)
    assert (
        r.returncode == 2
        and r.stderr.strip() == f"{path}: (top): is {path.stat().st_size} bytes, expected at most 1048576"
    )


def test_a_fifo_does_not_hang_the_check(tmp_path):
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)  # nobody writes to it: opening it to read would block forever
    r = check(path)
    assert r.returncode == 2
    assert r.stderr.strip() == f"{path}: (top): is not a regular file, expected a YAML file"


def test_the_shipped_files_stay_within_the_limits():
    files = (
        sorted(ROOT.glob("scenarios/*.yaml"))
        + sorted(ROOT.glob("topologies/*.yaml"))
        + sorted(ROOT.glob("bench/*.yaml"))
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "check"] + [str(f) for f in files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert r.returncode == 0, r.stderr


# --- files whose cost is unbounded though each value is in range ----------------
# Each file in hostile/ starts with the one line `check` must refuse it with:
# `# expect: FIELD: message`. They run in this process: each is refused
# before anything costly starts, and a traceback would fail the test.
HOSTILE = Path(__file__).resolve().parent / "hostile"
COSTLY = sorted(HOSTILE.glob("*.yaml"))
EXPECT = "# expect: "


def expected_line(path):
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    assert first.startswith(EXPECT), f"{path.name} does not start with {EXPECT!r}"
    return f"{path}: {first[len(EXPECT) :]}"


def refusal(argv, capsys):
    """(status, stderr lines) of the command; a traceback raises here."""
    status = main(argv)
    out, err = capsys.readouterr()
    assert out == "", out
    return status, err.splitlines()


def test_there_are_costly_files():
    assert len(COSTLY) >= 15


@pytest.mark.parametrize("path", COSTLY, ids=lambda p: p.stem)
def test_costly_file_is_refused_on_one_line(path, capsys):
    status, lines = refusal(["check", str(path)], capsys)
    assert status != 0
    assert lines == [expected_line(path)]


@pytest.mark.parametrize("command", [["check"], ["plan"], ["crux", "plan"]], ids=" ".join)
def test_planner_work_is_refused_before_any_planning(command, capsys):
    # 8 all-to-all jobs of 256 ranks: `plan` and `crux plan` once ran for
    # minutes on this file. Each command returning with the refusal is the
    # point; how fast it does is not asserted.
    path = HOSTILE / "planner-work.yaml"
    status, lines = refusal(command + [str(path)], capsys)
    assert status != 0
    assert lines == [expected_line(path)]
