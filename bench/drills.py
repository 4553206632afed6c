#!/usr/bin/env python3
"""Run every shipped drill several times and count what each run came to.

For each round, every scenario in scenarios/ (or those named) is run once by
`hpnlab run`, in a shuffled order, and its exit status is counted:
passed (0), FAILED on a trustworthy run (1), untrustworthy (4), could not
run here (3: a kernel feature missing), or anything else. With --busy-core
a busy loop is pinned to one CPU beside every run, to see what the trust
gate makes of a machine that is short of CPU: such runs may come out
untrustworthy, never FAILED. The first line of every verdict that is not a
pass, and where its report is, are printed as they come.

Needs root and Open vSwitch; run nothing else that builds a fabric, and
nothing CPU-hungry, meanwhile.

    sudo .venv/bin/python bench/drills.py [--rounds N] [--busy-core CPU] [--out DIR] [scenario ...]
"""

import argparse
import glob
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HPNLAB = [sys.executable, "-m", "testbed.cli"]
OUTCOME = {0: "passed", 1: "FAILED", 3: "cannot run here", 4: "untrustworthy"}


def busy_loop(cpu):
    """A shell spinning on one CPU (what a user's build or a browser tab does)."""
    return subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", "while :; do :; done"])


def verdict_line(stdout):
    """The report's last line ("fidelity ...; PASSED; report: ...")."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_once(scenario, out, busy_cpu):
    spinner = busy_loop(busy_cpu) if busy_cpu is not None else None
    start = time.monotonic()
    try:
        r = subprocess.run([*HPNLAB, "run", scenario, "--out", out], cwd=REPO, capture_output=True, text=True)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    return r.returncode, time.monotonic() - start, r.stdout, r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--busy-core", type=int, metavar="CPU", help="keep this CPU busy beside every run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="keep every run's report here (default: a temporary folder, removed)")
    ap.add_argument("scenarios", nargs="*", help="default: every scenarios/*.yaml")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/drills.py: needs root (it builds fabrics)")
    scenarios = args.scenarios or sorted(glob.glob(os.path.join(REPO, "scenarios", "*.yaml")))
    rng = random.Random(args.seed)
    base = args.out or tempfile.mkdtemp(prefix="hpnlab-drills-")
    counts = defaultdict(Counter)
    seconds = defaultdict(list)
    for rnd in range(1, args.rounds + 1):
        order = list(scenarios)
        rng.shuffle(order)
        for scenario in order:
            name = os.path.splitext(os.path.basename(scenario))[0]
            out = os.path.join(base, f"{rnd:02d}-{name}")
            status, took, stdout, stderr = run_once(scenario, out, args.busy_core)
            outcome = OUTCOME.get(status, f"exit {status}")
            counts[name][outcome] += 1
            seconds[name].append(took)
            mark = "" if status == 0 else f"  <- {verdict_line(stdout) or stderr.strip()[-200:]}"
            print(f"round {rnd:2d}  {name:32s} {outcome:16s} {took:5.0f} s{mark}", flush=True)
    print()
    print(f"{'scenario':32s} {'runs':>4s}  outcomes")
    for name in sorted(counts):
        n = sum(counts[name].values())
        what = ", ".join(f"{k} {v}" for k, v in counts[name].most_common())
        print(f"{name:32s} {n:4d}  {what}  ({min(seconds[name]):.0f}-{max(seconds[name]):.0f} s)")
    failed = sum(c["FAILED"] for c in counts.values())
    print(f"\n{failed} FAILED run(s)" + ("" if args.out else " (reports removed)"))
    if not args.out:
        subprocess.run(["rm", "-rf", "--", base])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
