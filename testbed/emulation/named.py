"""Named fabrics: several fabrics on one machine, each in namespaces of its own.

A fabric started without a name is the machine's: it uses the system's
Open vSwitch and the host's network namespace, as it always has. A fabric
started with `--fabric NAME` (or HPNLAB_FABRIC=NAME) runs beside it and
beside every other name, without renaming anything:

- its process re-executes itself in a new network namespace and a new
  mount namespace (`unshare`), where sysfs shows that namespace's
  interfaces and a BPF filesystem of its own holds the queue engine's
  pins; bridges, interfaces and pins keep the names the model gives them,
  and cannot meet another fabric's;
- it starts an Open vSwitch of its own (ovsdb-server and ovs-vswitchd,
  userspace datapath, tcmalloc and the pacer preloaded as for the system's:
  see capabilities.OVS_MALLOC_FEATURE and OVS_PACER_FEATURE) in that namespace, with its database, sockets and
  logs in a folder only root can enter, /run/hpnlab/fabrics/NAME/ovs;
  OVS_RUNDIR names that folder to every ovs-* tool its processes run;
- its record and lock are /run/hpnlab/fabrics/NAME/fabric.json(.lock), so
  `down` with a name stops only that fabric;
- the live commands (`status`, `exec`, `link`, ...) given the name enter
  the owner's namespaces (`nsenter`) and run there unchanged.

When its processes end (teardown, or the sweep of a dead owner's record)
the namespaces go with them, and every interface and pin they held.
"""

import os
import re
import shutil
import signal
import subprocess

from . import capabilities, ledger, ovs_pacing
from .procs import own_module

NAME_ENV = "HPNLAB_FABRIC"  # the name of the fabric this process serves
NS_ENV = "HPNLAB_FABRIC_NS"  # the network namespace that name's fabric runs in
NAME_PATTERN = re.compile(r"[a-z][a-z0-9-]{0,23}\Z")

# Run by `unshare` in the new namespaces before hpnlab starts again there:
# sysfs and a BPF filesystem of the new namespace, loopback up, and the
# namespace noted so the process knows it is in. The command comes as "$@":
# no part of it is read by the shell.
_ENTER_NEW = (
    "mount -t sysfs sysfs /sys && mount -t bpf bpf /sys/fs/bpf && ip link set lo up && "
    f'{NS_ENV}="$(readlink /proc/self/ns/net)" && export {NS_ENV} && exec "$@"'
)


def name_problem(name):
    """Why `name` cannot name a fabric, or None."""
    if NAME_PATTERN.match(name or ""):
        return None
    return (
        f"--fabric: {name!r} is not a fabric name: expected 1-24 characters, "
        "lowercase letters, digits and '-', starting with a letter"
    )


def current():
    """The name of the fabric this process serves, or None (the machine's)."""
    return os.environ.get(NAME_ENV) or None


def inside():
    """True in the namespaces of the named fabric this process serves."""
    noted = os.environ.get(NS_ENV)
    try:
        return noted is not None and noted == os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def ovs_dir(name):
    """Where a named fabric's own Open vSwitch keeps its database and sockets."""
    return os.path.join(ledger.NAMED_DIR, name, "ovs")


def environment(name):
    """What a process serving fabric `name` needs in its environment: the
    name, and Open vSwitch's tools pointed at that fabric's own daemons."""
    folder = ovs_dir(name)
    return {NAME_ENV: name, "OVS_RUNDIR": folder, "OVS_DBDIR": folder, "OVS_LOGDIR": folder}


def new_namespaces_argv(argv):
    """The command that runs `hpnlab argv` again in new namespaces."""
    return [
        "unshare",
        "--net",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _ENTER_NEW,
        "hpnlab",
    ] + own_module("testbed.cli", *argv)


def running_namespaces_argv(owner, argv):
    """The command that runs `hpnlab argv` in the namespaces of the process
    `owner` (a named fabric's owner), in the same working directory."""
    return ["nsenter", f"--target={owner}", "--net", "--mount", f"--wd={os.getcwd()}"] + own_module(
        "testbed.cli", *argv
    )


def reexec(argv, owning):
    """Replace this process by `hpnlab argv` in the named fabric's namespaces:
    new ones when `owning` (up, run: the fabric is built there), else the
    running fabric's. Returns only when there is nothing to enter: a status
    and a message, or None when the command should run here (no fabric of
    that name is up: it will say so itself)."""
    name = current()
    env = dict(os.environ, **environment(name))
    if owning:
        os.execvpe("unshare", new_namespaces_argv(argv), env)
    record = ledger.load()
    if record is None or not record.owner_running():
        return None
    owner = record.data["owner"]
    try:
        env[NS_ENV] = os.readlink(f"/proc/{owner}/ns/net")
    except OSError:  # it ended a moment ago (a process that is gone keeps its PID until reaped)
        return None
    os.execvpe("nsenter", running_namespaces_argv(owner, argv), env)
    return None  # not reached


# --- the fabric's own Open vSwitch ---------------------------------------------

DAEMONS = ("ovsdb-server", "ovs-vswitchd")
START_TIMEOUT_S = 30.0


def start_switch_daemons(record):
    """Start the named fabric's own Open vSwitch in this namespace, with a
    new database, and record both daemons in `record` (the fabric's ledger,
    already claimed: so the folder is this process's to replace) so that
    teardown, or the sweep of a dead owner, ends them. `--detach` returns
    once each daemon is ready to serve."""
    name = current()
    folder = ovs_dir(name)
    if os.path.islink(folder):
        os.unlink(folder)
    shutil.rmtree(folder, ignore_errors=True)  # a dead owner's, its processes already swept
    os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)
    os.mkdir(folder, 0o700)
    record.add("dirs", folder)
    record.data["named"] = {"name": name, "ovs_dir": folder}
    record.save()
    env = dict(os.environ, **environment(name))  # pid, log and control files go in the folder
    steps = [
        ["ovsdb-tool", "create", f"{folder}/conf.db"],
        [
            "ovsdb-server",
            f"{folder}/conf.db",
            f"--remote=punix:{folder}/db.sock",
            "--pidfile",
            "--log-file",
            "--detach",
        ],
        ["ovs-vsctl", "--timeout=10", "--no-wait", "init"],
        # why the options: capabilities.OVS_ROUTE_FEATURE
        [
            "ovs-vswitchd",
            f"unix:{folder}/db.sock",
            *capabilities.OVS_VSWITCHD_OPTIONS,
            "--pidfile",
            "--log-file",
            "--detach",
        ],
    ]
    # why: capabilities.OVS_MALLOC_FEATURE and OVS_PACER_FEATURE
    try:
        pacer = capabilities.ovs_pacer_library()
    except RuntimeError:  # it did not compile: the daemon runs unpaced, as without a compiler
        pacer = None
    preload = " ".join(p for p in (capabilities.ovs_malloc_library(), pacer) if p)
    vswitchd_env = dict(env, **{ovs_pacing.GAP_FILE_ENV: ovs_pacing.gap_file(folder)})
    if preload:
        vswitchd_env["LD_PRELOAD"] = preload
    for argv in steps:
        run_env = vswitchd_env if argv[0] == "ovs-vswitchd" else env
        try:
            r = subprocess.run(argv, env=run_env, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"fabric {name}: {argv[0]} did not start within {START_TIMEOUT_S:.0f} s"
            ) from None
        if r.returncode != 0:
            raise RuntimeError(f"fabric {name}: {argv[0]} failed: {(r.stderr or r.stdout).strip()[-300:]}")
        if argv[0] in DAEMONS:  # its PID file is written before --detach returns
            with open(os.path.join(folder, f"{argv[0]}.pid")) as fh:
                record.add_process(int(fh.read().strip()), argv)
    os.environ.update(environment(name))


def running():
    """The names of the named fabrics up on this machine (their owners alive)."""
    try:
        names = sorted(os.listdir(ledger.NAMED_DIR))
    except OSError:
        return []
    return [n for n in names if NAME_PATTERN.match(n) and ledger.lock_is_held(ledger.state_file(n))]


def stop_switch_daemons(record):
    """End the named fabric's own Open vSwitch (after its bridges are gone),
    waiting until both daemons have exited."""
    daemons = [p for p in record.data.get("processes", ()) if p["cmd"].split(" ", 1)[0] in DAEMONS]
    for proc in reversed(daemons):  # ovs-vswitchd before its database
        ledger.signal_process(proc["pid"], proc.get("start"), signal.SIGTERM)
    if not ledger.wait_until(
        lambda: not any(ledger.is_same_process(p["pid"], p.get("start")) for p in daemons), STOP_TIMEOUT_S
    ):
        raise RuntimeError(f"Open vSwitch of fabric {current()} did not exit within {STOP_TIMEOUT_S:.0f} s")


STOP_TIMEOUT_S = 10.0
