"""A record of every resource a running fabric owns, kept on disk.

`up` writes it as it creates things; teardown (normal, Ctrl-C, exception,
or `hpnlab down` from another shell) removes exactly what it lists and
nothing else: no broad process-name kills, no interface-name patterns.
"""
import json
import os
import signal
import subprocess
import time

STATE_DIR = os.environ.get("HPNLAB_STATE_DIR", "/run/hpnlab")
STATE_FILE = os.path.join(STATE_DIR, "fabric.json")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Ledger:
    def __init__(self, path=STATE_FILE):
        self.path = path
        self.data = {"owner": os.getpid(), "bridges": [], "interfaces": [], "processes": [],
                     "run_dir": None, "fabric": None}

    # --- recording ---------------------------------------------------------
    def claim(self, fabric_name, run_dir):
        """Take the machine for one fabric; refuse when another is running."""
        other = load(self.path)
        if other and other.owner_running() and other.data["owner"] != os.getpid():
            raise RuntimeError(f"fabric {other.data['fabric']!r} is already running (pid "
                               f"{other.data['owner']}); stop it first with: hpnlab down")
        if other:  # a dead owner left a record: sweep it before we start
            other.sweep()
        self.data.update(fabric=fabric_name, run_dir=run_dir, owner_cmd=_cmdline(os.getpid()))
        self.save()

    def owner_running(self):
        """The process that made this record is still the one with its PID
        (a recycled PID belongs to someone else and is never signalled)."""
        pid = self.data["owner"]
        want = self.data.get("owner_cmd")
        return alive(pid) and (want is None or _cmdline(pid) == want)

    def add(self, kind, *items):
        self.data[kind].extend(i for i in items if i not in self.data[kind])
        self.save()

    def add_process(self, pid, argv):
        """Remember a process by PID and its command line, so a recycled PID
        belonging to something else is never signalled."""
        self.data["processes"].append({"pid": pid, "cmd": " ".join(map(str, argv))[:200]})
        self.save()

    def save(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.data, fh, indent=1)
        os.replace(tmp, self.path)

    # --- removal -----------------------------------------------------------
    def sweep(self, timeout=10.0):
        """Remove whatever of the recorded resources still exists. Returns the
        list of things that were still there (empty after a clean stop)."""
        leftover = []
        ours = lambda p: alive(p["pid"]) and _cmdline(p["pid"]).startswith(p["cmd"].split(" ")[0])
        for proc in self.data["processes"]:
            if ours(proc):
                leftover.append(f"process {proc['pid']}")
                _signal(proc["pid"], signal.SIGTERM)
        wait_until(lambda: not any(ours(p) for p in self.data["processes"]), 3.0)
        for proc in self.data["processes"]:
            if ours(proc):
                _signal(proc["pid"], signal.SIGKILL)
        existing = set(_ovs_bridges())
        for br in self.data["bridges"]:
            if br in existing:
                leftover.append(f"bridge {br}")
                subprocess.run(["ovs-vsctl", "--timeout=5", "--if-exists", "del-br", br],
                               capture_output=True)
        for ifname in self.data["interfaces"]:
            if os.path.exists(f"/sys/class/net/{ifname}"):
                leftover.append(f"interface {ifname}")
                subprocess.run(["ip", "link", "del", ifname], capture_output=True)
        gone = wait_until(lambda: not any(os.path.exists(f"/sys/class/net/{i}")
                                     for i in self.data["interfaces"]), timeout)
        if not gone:
            still = [i for i in self.data["interfaces"] if os.path.exists(f"/sys/class/net/{i}")]
            raise RuntimeError(f"interfaces still present after teardown: {', '.join(still)}")
        return leftover

    def release(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def load(path=STATE_FILE):
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    ledger = Ledger(path)
    ledger.data.update(data)
    return ledger


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _ovs_bridges():
    try:
        r = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    except FileNotFoundError:  # no Open vSwitch: then there are no bridges to remove
        return []
    return r.stdout.split() if r.returncode == 0 else []


def wait_until(predicate, timeout, step=0.02):
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
