"""A record of every resource a running fabric owns, kept on disk.

`up` writes it as it creates things; teardown (normal, Ctrl-C, exception,
or `hpnlab down` from another shell) removes exactly what it lists and
nothing else: no broad process-name kills, no interface-name patterns.

Ownership cannot be wrong: before a fabric is built, none of the bridges
and interfaces it will create may exist (`already_present`), so nothing it
later removes can have been someone else's; and a process is recorded by
its PID and start time, so a PID the kernel gave to another process after
ours ended is never signalled. The record lives at one fixed place per
fabric name (named.py: the machine's fabric has none), so two fabrics can
never run at once under one name and share its names: a claim
takes an exclusive lock (flock) on a file beside it and holds it for the
fabric's life, so two runs started together cannot both claim the machine,
and the lock goes when its holder dies, however it dies. The record is
root's alone (0600): it names the switches' datapath ids.
"""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

STATE_FILE = "/run/hpnlab/fabric.json"  # the machine's fabric (started without a name)
NAMED_DIR = "/run/hpnlab/fabrics"  # NAME/fabric.json: each named fabric's (see named.py)


def state_file(name=None):
    """Where the record of fabric `name` lives; by default the fabric this
    process serves (HPNLAB_FABRIC, see named.py), else the machine's."""
    name = name or os.environ.get("HPNLAB_FABRIC")
    return os.path.join(NAMED_DIR, name, "fabric.json") if name else STATE_FILE


def private_dirs(path):
    """Make folder `path` and any missing parent root's alone (0700)."""
    if not os.path.isdir(path):
        private_dirs(os.path.dirname(path))
        os.mkdir(path, 0o700)


def stat_fields(pid):
    """The fields of /proc/PID/stat from field 3 on (index 0 is field 3),
    or None when there is no such process. Field 2, the command name, may
    hold spaces and ')': the fields are counted from the last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()


def start_time(pid):
    """When process `pid` started, in clock ticks since boot (field 22 of
    /proc/PID/stat), or None when there is no such process. The kernel
    reuses a PID once its process is gone; PID and start time together
    name one process."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def is_same_process(pid, start):
    """True only when `pid` is still the process that started at `start`."""
    return start is not None and start_time(pid) == start


_HELD: dict[str, int] = {}  # lock file -> its open descriptor, for the claims this process holds


def _who(path):
    """'fabric NAME (pid N, started by USER)' from the record at `path`."""
    other = load(path)
    if other is None:
        return "another fabric"
    user = other.data.get("user")
    name = (other.data.get("named") or {}).get("name")
    return (
        f"fabric {other.data.get('fabric')!r}"
        + (f" named {name}" if name else "")
        + f" (pid {other.data.get('owner')}"
        + (f", started by {user}" if user else "")
        + ")"
    )


def _take_lock(path):
    """Hold the machine's fabric lock (this process may already hold it);
    RuntimeError naming the holder when another process does."""
    lock = path + ".lock"
    if lock in _HELD:
        return
    private_dirs(os.path.dirname(lock))
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(holder_message(path)) from None
    _HELD[lock] = fd


def _drop_lock(path):
    fd = _HELD.pop(path + ".lock", None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the lock


def lock_is_held(path=None):
    """True while some process holds the fabric lock (a fabric is up)."""
    path = path or state_file()
    try:
        fd = os.open(path + ".lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def holder_message(path=None):
    """The one line that says which fabric holds the machine."""
    path = path or state_file()
    other = load(path)
    name = ((other.data.get("named") or {}).get("name") if other else None) or os.environ.get("HPNLAB_FABRIC")
    return f"{_who(path)} is already running; stop it first with: {down_command(name)}"


def down_command(name=None):
    """The command that stops fabric `name` (default: the one this process serves)."""
    name = name or os.environ.get("HPNLAB_FABRIC")
    return f"hpnlab --fabric {name} down" if name else "hpnlab down"


def sweep_unheld(path=None):
    """When no process holds the fabric lock: take it, remove what the
    record lists (a dead owner's leftovers) and release both. The list of
    what was still there, or None when a fabric holds the lock."""
    path = path or state_file()
    try:
        _take_lock(path)
    except RuntimeError:
        return None
    try:
        other = load(path)
        if other is None:
            return []
        left = other.sweep()
        other.release()
        return left
    finally:
        _drop_lock(path)


def invoking_user():
    """Who asked for this run: the user behind sudo, else this process's."""
    return os.environ.get("SUDO_USER") or str(os.geteuid())


class Ledger:
    def __init__(self, path=None):
        self.path = path or state_file()
        self.data = {
            "owner": os.getpid(),
            "bridges": [],
            "interfaces": [],
            "processes": [],
            "files": [],
            "dirs": [],
            "mounts": [],
            "run_dir": None,
            "fabric": None,
        }

    # --- recording ---------------------------------------------------------
    def claim(self, fabric_name, run_dir):
        """Take the machine for one fabric; refuse when another is running."""
        _take_lock(self.path)
        try:
            other = load(self.path)
            if other and other.owner_running() and other.data["owner"] != os.getpid():
                # a record whose owner lives without the lock (an older hpnlab)
                raise RuntimeError(holder_message(self.path))
            if other:  # a dead owner left a record: sweep it before we start
                other.sweep()
            self.data.update(
                fabric=fabric_name, run_dir=run_dir, user=invoking_user(), owner_start=start_time(os.getpid())
            )
            self.save()
        except BaseException:
            _drop_lock(self.path)
            raise

    def owner_running(self):
        """The process that made this record is still the one with its PID
        (a recycled PID belongs to someone else and is never signalled)."""
        return is_same_process(self.data["owner"], self.data.get("owner_start"))

    def add(self, kind, *items):
        self.data.setdefault(kind, [])
        self.data[kind].extend(i for i in items if i not in self.data[kind])
        self.save()

    def set_ovs_option(self, key, value):
        """Set Open vSwitch's other_config:`key` for this run, remembering
        what it was (the first time only) so that the sweep puts it back."""
        kept = self.data.setdefault("ovs_options", {})
        if key not in kept:
            r = subprocess.run(
                [
                    "ovs-vsctl",
                    "--timeout=5",
                    "--if-exists",
                    "get",
                    "Open_vSwitch",
                    ".",
                    f"other_config:{key}",
                ],
                capture_output=True,
                text=True,
            )
            was = r.stdout.strip().strip('"') if r.returncode == 0 else ""
            kept[key] = was or None
            self.save()
        subprocess.run(
            ["ovs-vsctl", "--timeout=5", "set", "Open_vSwitch", ".", f"other_config:{key}={value}"],
            check=True,
            capture_output=True,
        )

    def set_sysctl(self, name, value):
        """Set the machine's sysctl `name` (a path under /proc/sys) to
        `value` for this fabric's life, remembering what it was (the first
        time only) so that the sweep puts it back."""
        kept = self.data.setdefault("sysctls", {})
        if name not in kept:
            kept[name] = {"was": read_sysctl(name), "set": str(value)}
        kept[name]["set"] = str(value)
        self.save()
        write_sysctl(name, value)

    def _restore_sysctls(self):
        """Put back the sysctls this fabric set; one changed since by
        someone else (another fabric that needed more) is left as it is."""
        for name, rec in self.data.get("sysctls", {}).items():
            try:
                if read_sysctl(name) == rec["set"]:
                    write_sysctl(name, rec["was"])
            except OSError:
                pass

    def add_process(self, pid, argv, host=None):
        """Remember a process by PID and start time (and, for people reading
        the record, its command line); called right after the process is
        created, while it is certainly still ours. `host`: the emulated host
        whose network namespace this process holds (what `hpnlab exec`
        enters)."""
        record = {"pid": pid, "start": start_time(pid), "cmd": " ".join(map(str, argv))[:200]}
        if host is not None:
            record["host"] = host
        self.data["processes"].append(record)
        self.save()

    def save(self):
        directory = os.path.dirname(self.path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".fabric-", dir=directory)  # 0600, a name of its own
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(self.data, fh, indent=1)
            os.replace(tmp, self.path)
        except BaseException:  # an interrupt half-way must not leave the temporary file
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    # --- removal -----------------------------------------------------------
    def sweep(self, timeout=10.0):
        """Remove whatever of the recorded resources still exists. Returns the
        list of things that were still there (empty after a clean stop)."""
        leftover = []

        def ours(p):
            return is_same_process(p["pid"], p.get("start"))

        for proc in self.data["processes"]:
            if signal_process(proc["pid"], proc.get("start"), signal.SIGTERM):
                leftover.append(f"process {proc['pid']}")
        wait_until(lambda: not any(ours(p) for p in self.data["processes"]), 3.0)
        for proc in self.data["processes"]:
            signal_process(proc["pid"], proc.get("start"), signal.SIGKILL)
        self._restore_sysctls()
        if self.data.get("named"):
            # Its bridges, interfaces, pins and Open vSwitch settings were in
            # namespaces of its own, gone with the processes just ended; the
            # same names here may be another fabric's. Only its folders remain.
            return leftover + self._remove_dirs()
        existing = set(_ovs_bridges())
        for br in self.data["bridges"]:
            if br in existing:
                leftover.append(f"bridge {br}")
                subprocess.run(["ovs-vsctl", "--timeout=5", "--if-exists", "del-br", br], capture_output=True)
        for ifname in self.data["interfaces"]:
            if os.path.exists(f"/sys/class/net/{ifname}"):
                leftover.append(f"interface {ifname}")
                subprocess.run(["ip", "link", "del", ifname], capture_output=True)
        for path in self.data.get("files", []):  # pinned BPF maps
            if os.path.exists(path):
                leftover.append(f"file {path}")
                os.unlink(path)
        leftover += self._remove_dirs()
        for key, was in self.data.get("ovs_options", {}).items():  # Open vSwitch as it was
            back = ["set", "Open_vSwitch", ".", f"other_config:{key}={was}"] if was else None
            back = back or ["remove", "Open_vSwitch", ".", "other_config", key]
            subprocess.run(["ovs-vsctl", "--timeout=5", *back], capture_output=True)
        for mnt in self.data.get("mounts", []):  # bpffs, if hpnlab mounted it
            if os.path.ismount(mnt):
                leftover.append(f"mount {mnt}")
                subprocess.run(["umount", mnt], capture_output=True)
        gone = wait_until(
            lambda: not any(os.path.exists(f"/sys/class/net/{i}") for i in self.data["interfaces"]), timeout
        )
        if not gone:
            still = [i for i in self.data["interfaces"] if os.path.exists(f"/sys/class/net/{i}")]
            raise RuntimeError(f"interfaces still present after teardown: {', '.join(still)}")
        return leftover

    def _remove_dirs(self):
        """Remove the recorded folders (the controller's socket folder, a
        named fabric's Open vSwitch folder); what was still in them."""
        leftover = []
        for path in self.data.get("dirs", []):
            if os.path.isdir(path) and not os.path.islink(path):
                leftover += [f"file {os.path.join(path, f)}" for f in os.listdir(path)]
                shutil.rmtree(path)
        return leftover

    def release(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        _drop_lock(self.path)


SYSCTL_ROOT = "/proc/sys"


def read_sysctl(name):
    with open(os.path.join(SYSCTL_ROOT, name)) as fh:
        return fh.read().strip()


def write_sysctl(name, value):
    with open(os.path.join(SYSCTL_ROOT, name), "w") as fh:
        fh.write(f"{value}\n")


def load(path=None):
    path = path or state_file()
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    ledger = Ledger(path)
    ledger.data.update(data)
    return ledger


def signal_process(pid, start, sig):
    """Send `sig` to `pid` only if it is still the process that started at
    `start`; True when it was sent. Through a pidfd where the kernel has
    them: once the descriptor is open and the start time checked, the
    signal cannot reach a process that took the PID over in between."""
    if start is None:
        return False
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfds here: check, then signal by PID
        fd = None
    try:
        if start_time(pid) != start:
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def _ovs_names(*args):
    try:
        r = subprocess.run(["ovs-vsctl", "--timeout=5"] + list(args), capture_output=True, text=True)
    except FileNotFoundError:  # no Open vSwitch: then there are no bridges to remove
        return []
    return r.stdout.split() if r.returncode == 0 else []


def _ovs_bridges():
    return _ovs_names("list-br")


def already_present(bridges, interfaces):
    """The first of these names that exists on this machine now, as an Open
    vSwitch bridge or port, or a network interface of this namespace; None
    when all are free. Mininet would delete an existing bridge or interface
    of the same name before creating its own, so a fabric must not start
    while one exists."""
    ovs = set(_ovs_bridges()) | set(_ovs_names("--bare", "--columns=name", "list", "Interface"))
    for name in list(bridges) + list(interfaces):
        if name in ovs:
            return f"Open vSwitch already has a bridge or port named {name!r}"
        if os.path.exists(f"/sys/class/net/{name}"):
            return f"an interface named {name!r} already exists"
    return None


def wait_until(predicate, timeout, step=0.02):
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
