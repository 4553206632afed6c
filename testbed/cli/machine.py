"""Subcommands that build on the machine: doctor, up, down."""

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from testbed.drill.agents import frames_feature
from testbed.emulation import capabilities
from testbed.emulation import ledger as ledger_mod
from testbed.fabric.problems import ConfigError
from testbed.fabric.scenario import load_fabric, load_scenario
from testbed.plan import calibration
from testbed.results.text import fmt

from .common import (
    CANNOT_RUN_HERE,
    FAILED,
    INVALID,
    NOT_RUN,
    OK,
    Terminated,
    add_topology_dir_option,
    err,
    interrupted_status,
    need_root,
    print_problems,
)
from .progress import Progress


def sigterm_as_interrupt():
    """`hpnlab down` stops a running `up` with SIGTERM: unwind like Ctrl-C
    so the same teardown runs."""

    def handler(signum, frame):
        raise Terminated

    signal.signal(signal.SIGTERM, handler)


def prepare_report(out, force):
    """(the folder to write a report in, None): `out` made ready
    (rundir.prepare_report_dir) and resolved; or (None, the exit status)
    once the reason was said on one line. Asked only when the machine is
    free: a run that is refused leaves an earlier report, and the folder,
    as they were."""
    from testbed.emulation import ledger
    from testbed.emulation.rundir import FolderError, prepare_report_dir

    if ledger.lock_is_held():
        return None, err(ledger.holder_message(), NOT_RUN)
    try:
        return prepare_report_dir(out, force), None
    except FolderError as e:
        return None, err(f"--out: {e}", INVALID)
    except OSError as e:
        return None, err(f"--out: cannot use {out}: {e.strerror or e}", INVALID)


# --- doctor ------------------------------------------------------------------

REQUIRED = (
    "htb",
    "iperf3",
    "ovs-vsctl",
    "ovsdb running",
    "ethtool",
    "mnexec",
    "python: mininet",
    "python: os_ken",
)


def add_doctor(sub):
    p = sub.add_parser("doctor", help="what this machine's kernel and tools can do")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the CPU each emulated packet costs here with a short ring "
        "drill and store it (for 'hpnlab plan' and time_dilation: auto)",
    )
    p.add_argument(
        "--calibration",
        default=calibration.default_path(),
        metavar="FILE",
        help=f"where --calibrate stores it (default: {calibration.DEFAULT_PATH}, "
        f"or the file {calibration.PATH_ENV} names)",
    )
    p.set_defaults(run=run_doctor)


def run_doctor(args):
    if args.calibrate:
        return run_calibrate(args)
    feats = capabilities.probe() + [frames_feature()]
    missing = [f.name for f in feats if f.name in REQUIRED and not f.present]
    if args.json:
        print(
            json.dumps(
                {
                    "features": [f.__dict__ for f in feats],
                    "datapath": capabilities.datapath(feats),
                    "missing_required": missing,
                },
                indent=1,
            )
        )
    else:
        width = max(len(f.name) for f in feats)
        for f in feats:
            mark = "yes" if f.present else "NO "
            print(f"{f.name:<{width}}  {mark}  {f.enables}  [{f.detail}]")
        kind = capabilities.datapath(feats)
        why = "kernel module present" if kind == "kernel" else "userspace: no openvswitch module"
        print(f"\nswitch datapath: {kind} ({why})")
        if missing:
            print(f"missing and required: {', '.join(missing)} (run: make setup)")
    return CANNOT_RUN_HERE if missing else OK


def run_calibrate(args):
    """Run the built-in calibration drill through the normal runner and
    store what its results measured per packet."""
    if need_root("doctor --calibrate"):
        return NOT_RUN
    from testbed.drill.runner import ReachabilityError, run_scenario
    from testbed.emulation.realize import CapabilityError

    out, status = prepare_report(default_dir("results", "calibration"), force=False)
    if out is None:
        return status
    try:
        sc = load_scenario(calibration.write_drill(out))
    except ConfigError as e:
        return print_problems(e)
    print(f"calibrating: {sc.name} ({sc.jobs[0].ranks}-rank ring on HPN-mini); report in {out}")
    sigterm_as_interrupt()
    try:
        results = run_scenario(sc, out)
        cal = calibration.from_results(
            results, "hpnlab doctor --calibrate", os.path.join(out, "results.json")
        )
    except KeyboardInterrupt as e:
        err("interrupted; the fabric was torn down, nothing was stored")
        return interrupted_status(e)
    except CapabilityError as e:
        return err(str(e), CANNOT_RUN_HERE)
    except (ReachabilityError, RuntimeError, TimeoutError, ValueError, OSError) as e:
        return err(f"calibration failed, nothing was stored: {e}")
    try:
        cal = calibration.save(cal, args.calibration)
    except OSError as e:
        return err(f"cannot store the calibration in {args.calibration}: {e.strerror or e}")
    # The cost per packet holds even when the drill itself fell behind.
    print(
        f"drill fidelity {fmt(results['metrics']['fidelity']['min'])}; stored in "
        f"{args.calibration}: {cal.describe()}"
    )
    return OK


# --- up / down ---------------------------------------------------------------


def add_up(sub):
    p = sub.add_parser("up", help="build a fabric and keep it running (or --check it and tear down)")
    p.add_argument("file", metavar="FILE", help="topology or scenario file")
    p.add_argument(
        "--check",
        action="store_true",
        help="verify all-pairs reachability over every port, print a summary, tear down",
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary (with --check)")
    p.add_argument(
        "--run-dir",
        "--out",
        dest="run_dir",
        default=None,
        help="where logs go: a new or empty folder (default: a new private folder in /tmp); "
        "--out is the same, as in 'run'",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="return once the fabric is up; it stays until 'hpnlab down' (its log: up.log in the run folder)",
    )
    p.add_argument("--serve-detached", action="store_true", help=argparse.SUPPRESS)
    add_topology_dir_option(p)
    p.set_defaults(run=run_up)


def run_up(args):
    """Bring the fabric up and check it or serve it until Ctrl-C. One
    function on purpose: its try statement encloses the fabric's whole life,
    so every way out (an interrupt while serving or before, a kernel that
    cannot, a bad folder) maps to its exit status in one place, and the run
    folder made here is removed there if nothing was written in it."""
    try:
        _, fabric = load_fabric(args.file, args.topology_dir)
    except ConfigError as e:
        return print_problems(e)
    if need_root("up"):
        return NOT_RUN
    if args.detach and not args.check:
        return _up_detached(args)
    from testbed.emulation.realize import CapabilityError, FabricNet
    from testbed.emulation.rundir import FolderError, new_private_dir

    try:
        run_dir = args.run_dir or new_private_dir("/tmp", f"hpnlab-{fabric.name}")
    except OSError as e:
        return err(f"cannot make a run folder in /tmp: {e.strerror or e}")
    log = Progress(sys.stderr if args.json else sys.stdout)
    sigterm_as_interrupt()
    serving = False
    log.phase("bringing the fabric up")
    try:
        with FabricNet(fabric, run_dir, log=log) as fnet:
            log.phase(None)
            if args.check:
                status = _check(fnet, fabric, args.json)
            else:
                from testbed.drill.live_traffic import TrafficServer

                # 'hpnlab traffic start' plays a scenario's traffic on this fabric
                traffic = TrafficServer(fnet, log)
                traffic.start()
                log(
                    f"fabric is up (logs in {fnet.run_dir}); Ctrl-C or "
                    f"'{ledger_mod.down_command()}' tears it down"
                )
                serving = True
                if args.serve_detached:
                    _write_to_log(fnet.run_dir)
                try:
                    while True:
                        signal.pause()
                finally:
                    log.phase("tearing the fabric down")
                    traffic.stop()
        if status == OK and args.run_dir is None:
            # a check that passed leaves nothing behind; one that failed keeps its logs
            shutil.rmtree(fnet.run_dir, ignore_errors=True)
        elif status != OK:
            log(f"logs in {fnet.run_dir}")
        return status
    except KeyboardInterrupt as e:
        print("torn down", file=sys.stderr)
        # the way to end a fabric that is up; before that, or during a
        # check, the work asked for was cut short
        return OK if serving else interrupted_status(e)
    except CapabilityError as e:
        return err(str(e), CANNOT_RUN_HERE)
    except FolderError as e:
        return err(f"--run-dir: {e}", INVALID)
    except (RuntimeError, TimeoutError, OSError) as e:
        return err(str(e))
    finally:
        log.phase(None)
        if args.run_dir is None:  # the folder we made, if nothing was written in it
            with contextlib.suppress(OSError):
                os.rmdir(run_dir)


UP_LOG = "up.log"  # a detached fabric's output, in its run folder


def _up_detached(args):
    """`up --detach`: start `up` in a session of its own, show what it says
    until the fabric is up (or it fails), then leave it serving."""
    from testbed.emulation.procs import own_module

    argv = own_module("testbed.cli", "up", os.path.abspath(args.file), "--serve-detached")
    if args.run_dir:
        argv += ["--run-dir", os.path.abspath(args.run_dir)]
    for folder in args.topology_dir or ():
        argv += ["--topology-dir", os.path.abspath(folder)]
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd="/"
    )
    try:
        for line in child.stdout:
            print(line, end="", flush=True)
            if line.startswith("fabric is up"):
                print(f"detached (pid {child.pid}): the fabric stays up until '{ledger_mod.down_command()}'")
                return OK
        return child.wait()  # it ended before the fabric was up: its status, its reason above
    except KeyboardInterrupt as e:
        child.terminate()  # still coming up: it tears down what it built
        child.wait()
        return interrupted_status(e)


def _write_to_log(run_dir):
    """A detached fabric's output goes on in its run folder: the shell that
    started it has gone, and writing to its pipe would fail."""
    fd = os.open(os.path.join(run_dir, UP_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _check(fnet, fabric, as_json):
    from testbed.emulation.reachability import unreachable

    t = time.monotonic()
    reach = fnet.check_reachability()
    pairs = [(h, p, r) for h, d in reach.items() for p, r in d.items()]
    bad = unreachable(reach)
    rtts = [r for _, _, r in pairs if r is not None]
    summary = {
        "fabric": fabric.name,
        "kind": fabric.kind,
        "datapath": fnet.datapath,
        "hosts": len(fabric.hosts()),
        "switches": len(fabric.switches()),
        "links": len(fabric.links),
        "bringup_s": round(fnet.timings["routes"], 3),
        "check_s": round(time.monotonic() - t, 3),
        "pairs": len(pairs),
        "reachable": len(pairs) - len(bad),
        "unreachable": bad,
        "max_rtt_ms": max(rtts) if rtts else None,
        "passed": not bad,
    }
    if as_json:
        print(json.dumps(summary, indent=1))
    else:
        print(
            f"{summary['reachable']}/{summary['pairs']} host-port pairs reachable "
            f"(bring-up {summary['bringup_s']} s, check {summary['check_s']} s, "
            f"max RTT {summary['max_rtt_ms']} ms)"
        )
        for b in bad:
            print(f"  unreachable: {b}")
        print("PASSED" if not bad else "FAILED")
    return OK if not bad else FAILED


def add_down(sub):
    p = sub.add_parser("down", help="tear down the fabric left running by 'hpnlab up'")
    p.add_argument("--any-user", action="store_true", help="also stop a fabric another user started")
    p.set_defaults(run=run_down)


def run_down(args):
    if need_root("down"):
        return NOT_RUN
    led = ledger_mod.load()
    if led is None:
        from .live import other_fabrics

        name = os.environ.get("HPNLAB_FABRIC")
        others = other_fabrics()
        also = f" (up on this machine: {', '.join(others)})" if others else ""
        print((f"no fabric named {name} is running" if name else "no fabric is running") + also)
        return OK
    started_by, me = led.data.get("user"), ledger_mod.invoking_user()
    if started_by and started_by != me and not args.any_user:
        return err(
            f"fabric {led.data.get('fabric')!r} was started by {started_by}, not by {me}; "
            "pass --any-user to stop it anyway"
        )
    owner = led.data["owner"]
    if owner != os.getpid() and ledger_mod.signal_process(owner, led.data.get("owner_start"), signal.SIGTERM):
        print(f"stopping fabric {led.data['fabric']!r} (pid {owner})")
        # its lock goes when its teardown is done (or when it dies)
        ledger_mod.wait_until(lambda: not ledger_mod.lock_is_held(), DOWN_WAIT_S)
    # Only with the lock held here: a run that started meanwhile keeps its
    # fabric, and nothing is swept while its owner still tears down.
    left = ledger_mod.sweep_unheld()
    if left is None:
        return err(f"{ledger_mod.holder_message()} (it did not stop within {DOWN_WAIT_S:.0f} s)")
    if left:
        print(f"removed what it left: {', '.join(left)}")
    print("down")
    return OK


# How long `down` waits for a fabric's own teardown before it says so.
DOWN_WAIT_S = 90.0


def default_dir(base, name):
    """base/NAME-TIME, with a number added when two runs start in one second."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = os.path.join(base, f"{name}-{stamp}"), 1
    while os.path.lexists(path):
        n += 1
        path = os.path.join(base, f"{name}-{stamp}-{n}")
    return path


COMMANDS = (add_doctor, add_up, add_down)
