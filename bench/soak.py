#!/usr/bin/env python3
"""Soak: does hpnlab leave anything behind, whatever moment it is stopped at?

Four kinds of cycle, --cycles of each (default 100), in a shuffled order:

  up-check   `hpnlab up topologies/hpn-mini.yaml --check`, left to finish;
  interrupt  `hpnlab run bench/soak-drill.yaml` stopped by SIGINT or SIGTERM
             at a random moment between its start and its natural end
             (bring-up, traffic, sampling, a fault, teardown, report);
  kill       the same drill stopped by SIGKILL at a random moment (nothing
             of hpnlab's own teardown runs), then `hpnlab down`, which must
             remove what the dead run recorded.
  concurrent two `hpnlab run bench/soak-drill.yaml` started together: one
             must get the machine and finish, the other must refuse at once
             with one line naming the first (exit 5) and build nothing, and
             the first one's report must be whole.

After every cycle the machine is compared with how it was before the first:
Open vSwitch bridges, interfaces and their qdiscs in this namespace, named
network namespaces, processes in other network namespaces (the emulated
hosts' shells, agents, iperf3s, tcpdumps) and hpnlab's own (controller,
CLI), tc BPF programs (when bpftool exists), and the state file. A cycle
that leaves something is counted as a leak, what it left is printed, and
`hpnlab down` is run to clean up before the next one.

Needs root and Open vSwitch; run nothing else that builds a fabric meanwhile.

    sudo .venv/bin/python bench/soak.py [--cycles N] [--seed S]
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HPNLAB = [sys.executable, "-m", "testbed.cli"]
DRILL = os.path.join("bench", "soak-drill.yaml")
DRILL_TRAFFIC_S = 3.2  # its duration, and the moment the last agent is done
STATE_DIR = "/run/hpnlab"
LOCK_FILE = "fabric.json.lock"  # stays: a lock is a file that nobody holds, not a leak
OURS = ("testbed.cli", "controllers.run", "traffic.agent", "iperf3", "tcpdump", "mininet:")
KINDS = ("up-check", "interrupt", "kill", "concurrent")
DRILL_DONE = (0, 1, 4)  # a drill that ran: passed, an expectation failed, untrustworthy
REFUSED = 5  # could not run: here, another fabric holds the machine


def state_files():
    """The fabric record and any temporary file of it (not the lock)."""
    try:
        return {os.path.join(STATE_DIR, f) for f in os.listdir(STATE_DIR) if f != LOCK_FILE}
    except FileNotFoundError:
        return set()


def _out(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_state():
    """Everything a fabric run could leave behind, as sets of strings."""
    my_net = os.readlink("/proc/self/ns/net")
    procs = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            other_net = os.readlink(f"/proc/{pid}/ns/net") != my_net
        except OSError:
            continue
        if cmd and (other_net or any(word in cmd for word in OURS)):
            procs.add(f"{pid} {cmd[:100]}")
    links = {
        line.split(":")[1].strip().split("@")[0] for line in _out(["ip", "-o", "link", "show"]).splitlines()
    }
    qdiscs = {" ".join(line.split()[:5]) for line in _out(["tc", "qdisc", "show"]).splitlines()}
    state = {
        "bridges": set(_out(["ovs-vsctl", "--timeout=5", "list-br"]).split()),
        "interfaces": links,
        "qdiscs": qdiscs,
        "namespaces": set(_out(["ip", "netns", "list"]).split()),
        "processes": procs,
        "state files": state_files(),
    }
    if shutil.which("bpftool"):
        state["bpf programs"] = {
            line
            for line in _out(["bpftool", "prog", "show"]).splitlines()
            if "sched_cls" in line or "sched_act" in line
        }
    return state


def leaks(before, after):
    """{kind: sorted new items} of what appeared since `before`."""
    out = {}
    for kind, items in after.items():
        new = items - before.get(kind, set())
        if new:
            out[kind] = sorted(new)
    return out


def wait_quiet(before, timeout=15.0):
    """The state once it equals `before`, or whatever it is at the timeout:
    a process ended by SIGKILL may take a moment to be reaped by init."""
    deadline = time.monotonic() + timeout
    while True:
        state = machine_state()
        found = leaks(before, state)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


class Child:
    """An hpnlab command whose output is collected as it comes."""

    def __init__(self, argv):
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.started, line.rstrip()))

    def phase(self, traffic_s):
        """Where the run is now, from when it said the fabric was up."""
        up = [t for t, line in self.lines if " up in " in line]
        if not up:
            return "bring-up"
        if time.monotonic() - self.started < up[0] + traffic_s:
            return "traffic"
        return "teardown/report"

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.lines.append((0.0, f"(soak: no exit within {timeout:.0f} s, killed)"))
        self.reader.join(5)
        return rc


def drill_argv(out_dir):
    return HPNLAB + ["run", DRILL, "--out", out_dir]


def cycle_up_check():
    """(what happened, where the stop landed, the child, whether it behaved)."""
    child = Child(HPNLAB + ["up", os.path.join("topologies", "hpn-mini.yaml"), "--check"])
    rc = child.wait(120)
    return f"exit {rc}", "none", child, rc == 0


def _stop_at_random(rng, tmp, length, sig):
    child = Child(drill_argv(tempfile.mkdtemp(dir=tmp)))
    at = rng.uniform(0.0, length)
    time.sleep(at)  # the random moment is the point of the test, not a wait for an event
    where = "after it ended"
    if child.proc.poll() is None:
        where = child.phase(DRILL_TRAFFIC_S)
        child.proc.send_signal(sig)
    return child, at, where


def cycle_interrupt(rng, tmp, length):
    sig = rng.choice((signal.SIGINT, signal.SIGTERM))
    child, at, where = _stop_at_random(rng, tmp, length, sig)
    rc = child.wait(120)
    # Interrupted, it says so and exits 128 + the signal, as shells do; a
    # drill that ended first exits as a drill does; a signal that lands
    # while Python is still starting (before hpnlab has created anything
    # or set its handlers) ends it as the signal's default does (exit
    # -SIG), which is right too.
    behaved = rc in DRILL_DONE or rc in (128 + sig, -sig)
    return f"{signal.Signals(sig).name} at {at:.2f} s, exit {rc}", where, child, behaved


def cycle_kill(rng, tmp, length):
    child, at, where = _stop_at_random(rng, tmp, length, signal.SIGKILL)
    child.wait(30)
    down = subprocess.run(HPNLAB + ["down"], cwd=REPO, capture_output=True, text=True, timeout=120)
    result = f"SIGKILL at {at:.2f} s, down exit {down.returncode}"
    if down.returncode != 0:
        result += ": " + (down.stdout + down.stderr).strip().replace("\n", " | ")[-300:]
    return result, where, child, down.returncode == 0


def cycle_concurrent(tmp):
    """Two drills started together: one runs, the other refuses."""
    outs = [tempfile.mkdtemp(dir=tmp) for _ in range(2)]
    children = [Child(drill_argv(out)) for out in outs]
    codes = [c.wait(180) for c in children]
    ran = [i for i, rc in enumerate(codes) if rc in DRILL_DONE]
    refused = [i for i, rc in enumerate(codes) if rc == REFUSED]
    behaved = len(ran) == 1 and len(refused) == 1
    if behaved:
        loser = children[refused[0]]
        said = [line for _, line in loser.lines if "error" in line]
        behaved = (
            len(said) == 1
            and "is already running" in said[0]
            and os.path.exists(os.path.join(outs[ran[0]], "results.json"))
            and os.path.exists(os.path.join(outs[ran[0]], "summary.md"))
            and not os.path.exists(os.path.join(outs[refused[0]], "results.json"))
        )
    if not behaved:
        for i, c in enumerate(children):
            for _, line in c.lines[-8:]:
                print(f"      run {i + 1} | {line}")
    return f"exits {codes[0]} and {codes[1]}", "together", children[ran[0] if ran else 0], behaved


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100, help="cycles of each kind (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: printed)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which kinds (default: all)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("soak: needs root (it builds fabrics)")
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"soak: unknown kind {sorted(unknown)[0]!r} (known: {', '.join(KINDS)})")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    before = machine_state()
    if before["state files"]:
        raise SystemExit("soak: a fabric record exists already (/run/hpnlab): run 'hpnlab down' first")

    with tempfile.TemporaryDirectory(prefix="hpnlab-soak-") as tmp:
        # One uninterrupted drill first: its length bounds the random moments.
        t0 = time.monotonic()
        first = Child(drill_argv(os.path.join(tmp, "full")))
        rc = first.wait(180)
        length = time.monotonic() - t0
        found = wait_quiet(before)
        if rc not in DRILL_DONE or found:
            print("\n".join(line for _, line in first.lines))
            raise SystemExit(f"soak: the uninterrupted drill ended with {rc} and left {found}")
        print(
            f"soak: seed {seed}; the uninterrupted drill takes {length:.1f} s; "
            f"{args.cycles} cycles of {', '.join(kinds)}",
            flush=True,
        )

        plan = [k for k in kinds for _ in range(args.cycles)]
        rng.shuffle(plan)
        counts = {k: {"cycles": 0, "leaks": 0, "failed": 0} for k in kinds}
        phases = {}
        for i, kind in enumerate(plan, 1):
            if kind == "up-check":
                result, where, child, behaved = cycle_up_check()
            elif kind == "interrupt":
                result, where, child, behaved = cycle_interrupt(rng, tmp, length)
            elif kind == "kill":
                result, where, child, behaved = cycle_kill(rng, tmp, length)
            else:
                result, where, child, behaved = cycle_concurrent(tmp)
            found = wait_quiet(before)
            counts[kind]["cycles"] += 1
            phases.setdefault(kind, {}).setdefault(where, 0)
            phases[kind][where] += 1
            bad_exit = not behaved
            if bad_exit:
                counts[kind]["failed"] += 1
            status = "LEAK" if found else ("FAILED" if bad_exit else "ok")
            print(f"[{i:3}/{len(plan)}] {kind:9} {where:15} {result}: {status}", flush=True)
            if found or bad_exit:
                for _, line in child.lines[-8:]:
                    print(f"      | {line}")
            if found:
                counts[kind]["leaks"] += 1
                clean_up_leak(found, before)
    print_summary(kinds, counts, phases)
    return 1 if any(c["leaks"] or c["failed"] for c in counts.values()) else 0


def clean_up_leak(found, before):
    """Say what a cycle left, then remove it with 'hpnlab down' (the soak
    stops if even that leaves something)."""
    for what, items in found.items():
        print(
            f"      left {what}: {', '.join(items[:6])}"
            + (f" (+{len(items) - 6} more)" if len(items) > 6 else "")
        )
    subprocess.run(HPNLAB + ["down"], cwd=REPO, capture_output=True, timeout=120)
    still = wait_quiet(before)
    if still:
        raise SystemExit(f"soak: stopped: 'hpnlab down' could not remove {still}")


def print_summary(kinds, counts, phases):
    print("\nkind       cycles  leaks  failed   where the stop landed")
    for kind in kinds:
        c = counts[kind]
        where = ", ".join(f"{p} {n}" for p, n in sorted(phases.get(kind, {}).items()))
        print(f"{kind:9}  {c['cycles']:6}  {c['leaks']:5}  {c['failed']:6}   {where}")


if __name__ == "__main__":
    sys.exit(main())
