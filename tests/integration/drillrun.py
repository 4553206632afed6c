"""Running a drill from a test the way a user does: `hpnlab run FILE --out DIR`.

A run the trust gate calls untrustworthy (exit status 4) judged nothing:
the machine was short of CPU for a moment, and the gate refused to let the
emulator's delays pass for the fabric's. Such a run is started again, up to
ATTEMPTS in all, into the same folder. Any other status, a FAILED
expectation above all, is returned at once: it is never retried. Every
re-run is recorded, and the session's summary lists them with the gate's
reason, so a suite that passed only on a second try says so."""

import json
import subprocess
import sys
from pathlib import Path

from testbed.cli.common import UNTRUSTWORTHY

ATTEMPTS = 3

# (scenario, attempt that was untrustworthy, the gate's reasons)
RERUNS: list[tuple[str, int, list[str]]] = []


def _gate_reasons(stdout):
    """The lines in which the trust gate said why it did not judge."""
    return [line.strip() for line in stdout.splitlines() if line.strip().startswith("UNTRUSTED")]


def run(scenario, out, *extra, timeout=300, verdict_matters=True):
    """The CompletedProcess of `hpnlab run scenario --out out [extra...]`,
    started again while the gate calls it untrustworthy (ATTEMPTS in all);
    once only when the test reads the run's files and not its verdict."""
    attempts = ATTEMPTS if verdict_matters else 1
    for attempt in range(1, attempts + 1):
        cmd = [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--out", str(out), *extra]
        if attempt > 1:
            cmd.append("--force")  # replaces only the untrustworthy report hpnlab wrote
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != UNTRUSTWORTHY or attempt == attempts:
            return r
        RERUNS.append((str(scenario), attempt, _gate_reasons(r.stdout)))
    raise AssertionError("unreachable")  # the last attempt always returns


def run_with_results(scenario, out, *extra, timeout=300, verdict_matters=True):
    """(CompletedProcess, results.json as a dict) of `run`; fails the test
    with the run's output when it wrote no results."""
    r = run(scenario, out, *extra, timeout=timeout, verdict_matters=verdict_matters)
    results = Path(out) / "results.json"
    assert results.exists(), f"no results (status {r.returncode}): {r.stdout[-1500:]} {r.stderr[-1500:]}"
    return r, json.loads(results.read_text())


def summary_lines():
    """What the session's summary says about re-runs (nothing when none)."""
    if not RERUNS:
        return []
    lines = [f"drills started again after an untrustworthy run: {len(RERUNS)}"]
    for scenario, attempt, reasons in RERUNS:
        lines.append(f"  {scenario} (attempt {attempt}): {'; '.join(reasons) or 'no reason printed'}")
    return lines
