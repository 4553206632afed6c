"""This machine's capacity for emulated packets: what a calibration drill
measured, stored in one JSON file per machine and read back by `hpnlab
plan` and by `time_dilation: auto`.

Two costs describe it, both in CPU microseconds:
  * agent_us_per_packet: a traffic agent's CPU per data packet it sends
    (its share of receiving and acknowledging included);
  * switch_us_per_packet_hop: Open vSwitch's CPU per packet per switch it
    crosses.
`hpnlab doctor --calibrate` measures them with a short ring drill (the
CALIBRATION_DRILL below, played by the normal runner), and so does the
first undilated run like it (unlike_the_ring) on a machine that has
none, from its results' `metrics.cpu_per_packet`. Without a file the plan
uses DEFAULT_COSTS, which are labelled as defaults wherever they are shown.

A calibration records which code measured it (a fingerprint of the packet
path: the agents and Open vSwitch's pass pacer) and on which kernel. One
measured by other code or on another kernel is flagged wherever it is
shown, and the next undilated run replaces it: its costs are those of
code this machine no longer runs.
"""

import dataclasses
import datetime
import functools
import hashlib
import importlib.util
import json
import math
import os
import stat
from dataclasses import asdict, dataclass, field

import yaml

from testbed.fabric.problems import TOP, ConfigError, Problem, describe
from testbed.results.store import atomic_write

DEFAULT_PATH = "/var/lib/hpnlab/calibration.json"
# Another file for it, for runs that must leave the machine's alone: the
# test suite's drills would otherwise calibrate the machine they run on.
PATH_ENV = "HPNLAB_CALIBRATION"
MAX_FILE_BYTES = 64 * 1024
# Conservative guesses for a machine never measured: a 2-core machine
# without the OVS kernel module forwarded a few hundred Mbit/s of 9000-byte
# frames in all, over paths of 1 to 3 switches (about 50 us per
# packet-hop); the agent's sender alone took about 6 us per packet, and
# receiving and acknowledging cost more than sending.
DEFAULT_COSTS = {"agent_us_per_packet": 20.0, "switch_us_per_packet_hop": 50.0}
MIN_PACKETS = 5000  # fewer measured packets do not make a calibration
# What sets the CPU an emulated packet costs, and so what a calibration
# measured: the traffic agents (Python and C) and the pacer Open vSwitch
# runs with. Packages, and folders inside them, whose files are hashed.
PACKET_PATH = (("traffic", ""), ("testbed", "emulation/pacer"))
CODE_SUFFIXES = (".py", ".c", ".h")
RECALIBRATE = "sudo hpnlab doctor --calibrate"
FIELDS = ("cores", "agent_us_per_packet", "switch_us_per_packet_hop", "measured_at", "source")

# The drill `doctor --calibrate` runs: scenarios/allreduce-ring.yaml on
# HPN-mini, shortened to 6 iterations and without expectations.
CALIBRATION_DRILL = {
    "name": "calibration-ring",
    "description": "hpnlab doctor --calibrate: an 8-rank ring AllReduce on HPN-mini, "
    "measuring the CPU each packet costs the agents and Open vSwitch.",
    "topology": {"kind": "hpn"},
    "duration": 30,
    "jobs": [
        {
            "name": "ring8",
            "hosts": ["s0h0", "s0h1", "s0h2", "s0h3", "s1h0", "s1h1", "s1h2", "s1h3"],
            "collective": "ring",
            "bytes": "5GB",
            "compute": "200ms",
            "iterations": 6,
        }
    ],
}


@dataclass(frozen=True)
class Calibration:
    cores: int
    agent_us_per_packet: float
    switch_us_per_packet_hop: float
    measured_at: str | None = None
    source: dict = field(default_factory=dict)  # how it was measured
    path: str | None = None  # the file read; None: the defaults

    @property
    def is_default(self):
        return self.path is None

    @property
    def agent_processes(self):
        """How many processes played the measured drill's hosts; None when
        not recorded (the defaults, and calibrations stored before)."""
        n = self.source.get("agent_processes")
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

    def stale(self, code=None, kernel=None):
        """Why this calibration no longer prices this machine's packets (a
        short phrase), or None: measured by other packet-path code than
        `code` (default: this installation's) or on another kernel than
        `kernel` (default: the running one). A calibration that did not
        record them is stale too: it predates the record."""
        if self.is_default:
            return None
        recorded = self.source.get("code")
        if recorded is None:
            return "measured before calibrations recorded the code that measured them"
        if recorded != (code or code_fingerprint()):
            return "measured with other agent and pacer code than this hpnlab's"
        if self.source.get("kernel") != (kernel or os.uname().release):
            return "measured on another kernel than the running one"
        return None

    def describe(self):
        """One line saying where these numbers come from."""
        processes = self.agent_processes
        played = f" (the agents in {processes} processes)" if processes else ""
        costs = (
            f"{self.cores} cores, {self.agent_us_per_packet:g} us per packet in an agent{played}, "
            f"{self.switch_us_per_packet_hop:g} us per packet-hop in Open vSwitch"
        )
        if self.is_default:
            return f"DEFAULTS, not measured on this machine ({costs})"
        how = self.source.get("command") or "?"
        text = f"calibration {self.path}, measured {self.measured_at or '?'} by '{how}' ({costs})"
        why = self.stale()
        return text if why is None else f"{text}; STALE, {why}: run '{RECALIBRATE}'"

    def to_dict(self):
        return {k: v for k, v in asdict(self).items() if k != "path"}


@functools.cache
def code_fingerprint():
    """The fingerprint of this installation's packet path (PACKET_PATH)."""
    folders = []
    for package, folder in PACKET_PATH:
        spec = importlib.util.find_spec(package)  # found, not imported
        folders += [os.path.join(base, folder) for base in spec.submodule_search_locations or ()]
    return fingerprint(folders)


def fingerprint(folders):
    """A short hash of the code files under `folders`: it changes with any
    change to them that could move their CPU cost."""
    digest = hashlib.sha256()
    for top in folders:
        _hash_tree(digest, top)
    return digest.hexdigest()[:16]


def _hash_tree(digest, top):
    """Feed `digest` every code file under `top`, as its relative path and
    content, in a fixed order."""
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(CODE_SUFFIXES):
                path = os.path.join(folder, name)
                with open(path, "rb") as fh:
                    digest.update(os.path.relpath(path, top).encode() + b"\0" + fh.read() + b"\0")


def cores_here():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def defaults(cores=None):
    return Calibration(cores=cores or cores_here(), **DEFAULT_COSTS)


def default_path():
    """Where this machine's calibration is kept: the file HPNLAB_CALIBRATION
    names, else DEFAULT_PATH."""
    return os.environ.get(PATH_ENV) or DEFAULT_PATH


def load(path=DEFAULT_PATH):
    """The Calibration stored at `path`, or None when there is none;
    ConfigError with one line naming the file and field when it is bad."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _fail(path, TOP, f"cannot read the file: {e.strerror or e}") from None
    if not stat.S_ISREG(info.st_mode):
        raise _fail(path, TOP, "is not a regular file, expected a calibration (JSON)")
    if info.st_size > MAX_FILE_BYTES:
        raise _fail(path, TOP, f"is {info.st_size} bytes, expected at most {MAX_FILE_BYTES}")
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read(MAX_FILE_BYTES + 1).decode("utf-8"))
    except OSError as e:
        raise _fail(path, TOP, f"cannot read the file: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise _fail(path, TOP, "not UTF-8 text, expected a calibration (JSON)") from None
    except json.JSONDecodeError as e:
        raise _fail(path, TOP, f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    return _from_doc(path, doc)


def load_or_defaults(path=DEFAULT_PATH):
    """The stored calibration, or the labelled defaults when there is none."""
    return load(path) or defaults()


def _from_doc(path, doc):
    if not isinstance(doc, dict):
        raise _fail(path, TOP, f"expected a mapping of fields, got {describe(doc)}")
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise _fail(path, TOP, f"unknown field {unknown[0]!r} (allowed: {', '.join(FIELDS)})")
    for name in ("cores", "agent_us_per_packet", "switch_us_per_packet_hop"):
        value = doc.get(name)
        if name not in doc:
            raise _fail(path, name, "required field is missing")
        integer = name == "cores"
        if not _positive(value, integer):
            raise _fail(
                path, name, f"expected {'an integer' if integer else 'a number'} > 0, got {describe(value)}"
            )
    if not isinstance(doc.get("measured_at"), (str, type(None))):
        raise _fail(path, "measured_at", f"expected a date and time, got {describe(doc['measured_at'])}")
    if not isinstance(doc.get("source", {}), dict):
        raise _fail(path, "source", f"expected a mapping, got {describe(doc['source'])}")
    return Calibration(
        cores=doc["cores"],
        agent_us_per_packet=float(doc["agent_us_per_packet"]),
        switch_us_per_packet_hop=float(doc["switch_us_per_packet_hop"]),
        measured_at=doc.get("measured_at"),
        source=doc.get("source", {}),
        path=str(path),
    )


def _positive(value, integer):
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return False
    return math.isfinite(value) and value > 0


def _fail(path, field_name, message):
    return ConfigError([Problem(str(path), field_name, message)])


def save(calibration, path=DEFAULT_PATH):
    """Store `calibration` at `path` (readable by everyone: `hpnlab plan`
    runs without root), creating its folder; returns it as read from there."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
    atomic_write(path, json.dumps(calibration.to_dict(), indent=1) + "\n")
    return dataclasses.replace(calibration, path=path)


def from_results(results, command, results_path, cores=None, now=None):
    """The Calibration a drill's results measured (their
    `metrics.cpu_per_packet`: agents_us per packet sent, ovs_us per
    packet-hop, and the packets and packet-hops they were measured over);
    ValueError saying why when they measured too little."""
    cpp = (results.get("metrics") or {}).get("cpu_per_packet")
    if not isinstance(cpp, dict):
        raise ValueError("the drill did not measure the CPU per packet (metrics.cpu_per_packet)")
    packets = cpp.get("packets") or 0
    if packets < MIN_PACKETS:
        raise ValueError(
            f"the drill measured {packets} packets, fewer than the {MIN_PACKETS} a calibration needs"
        )
    instrumented = cpp.get("agents_instrumented")
    if instrumented:
        raise ValueError(
            f"the agents measured their own loop ({', '.join(map(str, instrumented))}), "
            "which costs them CPU an ordinary run does not spend"
        )
    for key in ("agents_us", "ovs_us"):
        if not _positive(cpp.get(key), integer=False):
            raise ValueError(
                f"metrics.cpu_per_packet.{key}: expected a number > 0, got {describe(cpp.get(key))}"
            )
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return Calibration(
        cores=cores or cores_here(),
        agent_us_per_packet=round(float(cpp["agents_us"]), 3),
        switch_us_per_packet_hop=round(float(cpp["ovs_us"]), 3),
        measured_at=now.isoformat(timespec="seconds"),
        source={
            "command": command,
            "drill": results.get("scenario"),
            "scenario_file": results.get("scenario_file"),
            "results": results_path,
            "packets": packets,
            "packet_hops": cpp.get("packet_hops"),
            "time_dilation": results.get("time_dilation", 1),
            # how many processes played the hosts: it moves the agents'
            # cost per packet (a quarter between one per host and one per core)
            "agent_processes": ((results.get("metrics") or {}).get("generators") or {}).get(
                "agent_processes"
            ),
            "code": code_fingerprint(),  # see Calibration.stale
            "kernel": os.uname().release,
        },
    )


def unlike_the_ring(results):
    """Why a drill's results are unlike the ring a calibration measures (a
    short phrase), or None. The CPU per packet moves with what the traffic
    does, so a machine takes its calibration from a run like
    CALIBRATION_DRILL only: one ring job, in one datacenter, no fault, and
    no packet retransmitted, slowed by DCQCN or paused. Over one suite's
    drills the 8-host rings cost 29-33 us per packet in an agent, the
    others up to five times that (docs/limits.md)."""
    if results.get("faults"):
        return "faults were applied"
    if (results.get("fabric") or {}).get("kind") == "region":
        return "a fabric of several datacenters"
    metrics = results.get("metrics") or {}
    jobs = metrics.get("jobs") or {}
    if len(jobs) != 1:
        return f"{len(jobs)} jobs, not one"
    [job] = jobs.values()
    if job.get("collective") != "ring":
        return f"its job runs {job.get('collective')}, not a ring"
    if job.get("retransmissions"):
        return f"{job['retransmissions']} packets retransmitted"
    if job.get("cnps"):
        return f"DCQCN slowed its flows ({job['cnps']} CNPs)"
    pauses = (metrics.get("pfc") or {}).get("pauses")
    if pauses:
        return f"{pauses} pauses"
    return None


def write_drill(directory):
    """Write CALIBRATION_DRILL as a scenario file into `directory` (kept
    beside its results, so the calibration says what it ran); its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "calibration-ring.yaml")
    atomic_write(path, yaml.safe_dump(CALIBRATION_DRILL, sort_keys=False))
    return path
