"""The traffic agents of a drill's training jobs, as processes: one per core,
or as many as HPNLAB_AGENT_PROCESSES says (testbed/plan/processes.py), each
playing its share of the hosts with every host's sockets made in that
host's namespace; released together at a common start time, followed for
progress, waited for and ended."""

import json
import os
import subprocess
import threading
import time

import traffic
from testbed.emulation import compiled
from testbed.emulation.capabilities import Feature
from testbed.emulation.procs import end as end_process
from testbed.emulation.procs import own_module
from testbed.plan.calibration import cores_here
from testbed.plan.processes import PROCESSES_ENV, host_groups, process_count
from traffic import cframes

# The agents' per-frame work in C (traffic/cframes.py), built once per version
FRAMES_SOURCE = os.path.join(os.path.dirname(os.path.abspath(traffic.__file__)), "c", "frames.c")
FRAMES_PREFIX = "hpnlab-agent-frames-"


def frames_library(log=print, out_dir=compiled.LIBRARY_DIR):
    """The agents' C frame library, built if need be; None (with a warning: the
    agents then do that work in Python, at more CPU per frame) when it
    cannot be."""
    try:
        lib = compiled.shared_library(FRAMES_SOURCE, FRAMES_PREFIX, out_dir=out_dir)
    except (RuntimeError, OSError) as e:
        log(
            f"WARNING: the traffic agents' C frame library did not build ({e}): "
            "they run without it, at more CPU per frame"
        )
        return None
    if lib is None:
        log(
            "WARNING: no C compiler: the traffic agents do without their C frame library (more CPU per frame)"
        )
    return lib


FRAMES_FEATURE = "agents' frame library"


def frames_feature(out_dir=compiled.LIBRARY_DIR):
    """`hpnlab doctor`'s line on the agents' C frame library: built as a
    drill builds it, and loaded as an agent loads it (refused when anyone
    but root could have written it)."""
    enables = "less agent CPU per frame (without it the agents do that work in Python)"
    if os.geteuid() != 0 and not compiled.roots_alone(
        compiled.versioned_path(FRAMES_SOURCE, out_dir, FRAMES_PREFIX, ".so")
    ):
        return Feature(FRAMES_FEATURE, False, "not built yet: a drill (as root) builds it", enables)
    warnings = []
    lib = frames_library(log=warnings.append, out_dir=out_dir)
    if lib is None:
        return Feature(FRAMES_FEATURE, False, warnings[0].removeprefix("WARNING: "), enables)
    native, path = cframes.load(lib)
    return Feature(FRAMES_FEATURE, native is not None, lib if native is not None else path, enables)


class JobAgents:
    def __init__(self, fnet, configs, run_dir, log=print):
        self.fnet = fnet
        self.configs = configs
        self.run_dir = run_dir
        self.log = log
        self.procs = {}  # the first host of each process -> the process
        self.hosts_of = {}  # the first host of each process -> all its hosts
        self.progress = []
        self.ready = set()
        self.done = set()  # hosts whose jobs are all done
        self.lock = threading.Condition()

    def start(self):
        hosts = list(self.configs)
        n = process_count(len(hosts), cores_here(), asked=os.environ.get(PROCESSES_ENV))
        lib = frames_library(self.log)
        for group in host_groups(hosts, n):
            paths = []
            for host in group:
                path = os.path.join(self.run_dir, f"agent-{host}.cfg.json")
                with open(path, "w") as fh:
                    cfg = {**self.configs[host], "netns": self.fnet.netns_of(host), "frames_library": lib}
                    json.dump(cfg, fh, indent=1)
                paths.append(path)
            # Started in its first host's namespace, as a process of one host
            # was: what it loads at start (scapy looks at the interfaces of
            # where it runs) sees that host's two ports, not the hundreds of
            # switch ports of the machine's own namespace.
            with open(self._log_of(group[0]), "w") as err:
                proc = self.fnet.popen_in(
                    group[0],
                    own_module("traffic.agent", *paths),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            self.procs[group[0]] = proc
            self.hosts_of[group[0]] = group
            threading.Thread(target=self._follow, args=(group[0], proc), daemon=True).start()

    def _log_of(self, first):
        return os.path.join(self.run_dir, f"agent-{first}.log")

    def _names(self, first):
        """The hosts one process plays, for messages."""
        return ", ".join(self.hosts_of[first])

    def _follow(self, host, proc):
        for line in proc.stdout:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self.lock:
                event = rec.get("event")
                if event == "ready":
                    self.ready.add(rec.get("host"))
                elif event == "done":
                    self.done.add(rec.get("host"))
                    if self.done >= set(self.configs):
                        self._release()
                else:
                    self.progress.append(rec)
                self.lock.notify_all()
        with self.lock:  # the agent is gone: whoever waits for it must know now
            self.lock.notify_all()

    def wait_ready(self, timeout=60.0):
        """Block until every agent has set up its sockets (an event each
        agent prints), so that they can all start at the same moment."""
        with self.lock:
            ok = self.lock.wait_for(
                lambda: (
                    self.ready >= set(self.configs) or any(p.poll() is not None for p in self.procs.values())
                ),
                timeout,
            )
            missing = sorted(set(self.configs) - self.ready)
        if not ok or missing:
            raise RuntimeError(
                f"traffic agents not ready in {timeout:.0f} s: {', '.join(missing)} (logs in {self.run_dir})"
            )

    def _release(self):
        """Every host's jobs are done: end the agents now. Each would
        otherwise linger for twice its retransmission timeout, in case a
        peer still missed its last ACK; but a rank's job is done only once
        its peers acknowledged all it sent, so with every job done no peer
        is waiting. SIGTERM ends an agent's loop, which then writes its
        results as at the end of a linger."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()

    def go(self, start_at):
        for proc in self.procs.values():
            proc.stdin.write(json.dumps({"start_at": start_at}) + "\n")
            proc.stdin.flush()

    def last_progress(self):
        with self.lock:
            return list(self.progress)

    def wait(self, timeout):
        """Wait for every agent (each stops itself at its deadline)."""
        problems = []
        deadline = time.monotonic() + timeout
        for first, proc in self.procs.items():
            try:
                rc = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rc = end_process(proc, 10)
                problems.append(f"the agent of {self._names(first)} did not stop by itself")
            if rc != 0:
                problems.append(
                    f"the agent of {self._names(first)} exited with status {rc}: see {self._log_of(first)}"
                )
        return problems

    def stop(self):
        """End every agent. Closing its stdin first releases one still
        waiting for the start (it returns on end of input)."""
        for proc in self.procs.values():
            if proc.stdin and not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            end_process(proc, max(0.1, deadline - time.monotonic()))

    def results(self):
        out = {}
        for host, cfg in self.configs.items():
            try:
                with open(cfg["out"]) as fh:
                    out[host] = json.load(fh)
            except (OSError, json.JSONDecodeError):
                out[host] = None
        return out
