"""Topology and scenario files into the pure data the rest of hpnlab uses:
a Fabric model, and a Scenario with its times in seconds, its defaults
filled in and its job sizes scaled.

Checking happens in two phases: the JSON Schemas first (shape, types,
ranges; schema.py), then, only when the shape is right, the checks that
need the built fabric (semantics.py and its semantics_* siblings). Every problem found is reported, one
line each; nothing is built from a file with problems.
"""

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import (
    bounds,
    queues,
    semantics,
    semantics_expect,
    semantics_jobs,
    semantics_queues,
    semantics_timeline,
)
from .build import ModelError, build_fabric
from .loader import SCENARIO, TOPOLOGY, detect_kind, load_yaml
from .model import Fabric
from .problems import TOP, ConfigError, Problem, fail, show
from .records import CruxRunning, Expectation, Fault, Job, TrafficFlow
from .schema import schema_problems
from .units import parse_time

# A file's path as the callers give it (a command line's string, a Path)
PathArg = str | os.PathLike

# --- whole files -------------------------------------------------------------


def load_fabric(path: PathArg, topology_dirs: Sequence[PathArg] = ()) -> tuple[str, Fabric]:
    """(kind, Fabric) for a topology or scenario file; kind says which it was.
    `topology_dirs`: folders a scenario's `topology:` may name files in,
    besides its own folder and hpnlab's topologies (see topology_roots)."""
    scenario, fabric = load_scenario_or_topology(path, topology_dirs)
    return (SCENARIO if scenario is not None else TOPOLOGY), fabric


def load_scenario_or_topology(
    path: PathArg, topology_dirs: Sequence[PathArg] = ()
) -> tuple["Scenario | None", Fabric]:
    """(the Scenario, its Fabric) for a scenario file; (None, the Fabric)
    for a topology file."""
    doc = load_yaml(path)
    if detect_kind(doc) == SCENARIO:
        sc = _scenario_from_doc(Path(path), doc, topology_dirs)
        return sc, sc.fabric
    return None, _topology_from_doc(path, doc)[1]


def check_files(paths: list[PathArg]) -> list[Problem]:
    """Every problem in the given files, each validated by its detected kind."""
    problems = []
    for path in paths:
        try:
            load_fabric(path)
        except ConfigError as e:
            problems += e.problems
    return problems


# --- names and paths that come from files ---------------------------------------

# A fabric built from a topology file is named after the file, and that name
# ends up in folder names and logs: only plain characters, so that nothing a
# file is called can reach a shell or a path as anything but a name.
FABRIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# hpnlab's own topologies (the scenarios it ships name them as ../topologies/...)
SHIPPED_TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def fabric_name_from(path: PathArg) -> str:
    """The name of the fabric a topology file builds: its file name without
    the extension; ConfigError when that is not a plain name."""
    stem = Path(path).stem
    if not FABRIC_NAME.fullmatch(stem):
        raise fail(
            path,
            TOP,
            f"the file name {show(stem)} cannot name a fabric: expected a name "
            "of letters, digits, '.', '_' and '-' (starting with a letter or "
            "digit, at most 64): rename the file",
        )
    return stem


def topology_roots(scenario_path: PathArg, extra: Sequence[PathArg] = ()) -> list[Path]:
    """The folders a scenario's `topology:` may name a file in: the
    scenario's own folder tree, hpnlab's shipped topologies, and those given
    on the command line. Anything else (an absolute path, `..` out of the
    tree, a symbolic link pointing away) is never opened: a scenario written
    by someone else must not make hpnlab, running as root, read a file."""
    return [Path(os.path.realpath(scenario_path)).parent, SHIPPED_TOPOLOGIES.resolve()] + [
        Path(os.path.realpath(d)) for d in extra
    ]


def allowed_topology_path(scenario_path: PathArg, topo: str, extra: Sequence[PathArg] = ()) -> Path | None:
    """The resolved path of `topo` when it lies under one of topology_roots,
    else None (then nothing about it was read)."""
    target = Path(os.path.realpath(Path(scenario_path).parent / topo))
    return target if _under(target, topology_roots(scenario_path, extra)) else None


def _under(target, roots):
    return any(target == root or root in target.parents for root in roots)


# --- topologies --------------------------------------------------------------


def _join(prefix, field):
    if not field:
        return prefix or TOP
    return f"{prefix}.{field}" if prefix else field


def _build(file, params, name, prefix):
    """build_fabric, with its errors turned into a ConfigError at `prefix`."""
    try:
        return build_fabric(params, name)
    except ModelError as e:
        raise fail(file, _join(prefix, e.field), str(e)) from None
    except (KeyError, TypeError, ValueError, ArithmeticError) as e:
        # The schema should make these impossible; say so rather than crash.
        raise fail(file, prefix or TOP, f"cannot build this topology ({type(e).__name__}: {e})") from None


def load_topology(path: PathArg) -> tuple[dict, Fabric]:
    """(params, Fabric) for a topology file; params is the mapping as written.

    The fabric is named after the file; `fabric.params` holds the parameters
    with defaults filled in.
    """
    return _topology_from_doc(path, load_yaml(path))


def _topology_from_doc(path, doc):
    problems = schema_problems(path, doc, TOPOLOGY)
    if problems:
        raise ConfigError(problems)
    return doc, _build(str(path), doc, fabric_name_from(path), prefix="")


# --- scenarios ---------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    path: str  # the scenario file
    topology_params: dict  # the topology mapping as written
    fabric: Fabric
    duration_s: float
    traffic: list[TrafficFlow]
    faults: list[Fault]  # sorted by at
    expect: list[Expectation]
    topology_path: str | None = None  # the topology file, when not inline
    jobs: tuple[Job, ...] = ()
    capture: dict | None = None  # {"hosts": [...], "packets": n}
    transport: dict | None = None  # agent knobs: window, rto_s, dcqcn (see _transport_entry)
    # N >= 1, or "auto" until the capacity plan resolves it; a Scenario that
    # dilation.dilate() returned holds the N it applied (see there)
    time_dilation: float | str = 1.0
    controller_timeline: list = dataclasses.field(default_factory=list)  # dicts sorted by at: at (s), action
    probes: tuple = ()  # dicts: src, dst, rate (packets/s), flows (source ports)
    crux: CruxRunning | None = None  # Crux as it runs (the controller measures the jobs)

    @property
    def jobs_only(self) -> bool:
        """Training jobs and no iperf3 flows: the drill ends when the last
        job does (and every fault has been applied), duration is its limit."""
        return bool(self.jobs) and not self.traffic


def load_scenario(path: PathArg, topology_dirs: Sequence[PathArg] = ()) -> Scenario:
    """The Scenario in file `path`; ConfigError listing every problem if invalid.
    `topology_dirs`: see load_fabric."""
    return _scenario_from_doc(Path(path), load_yaml(path), topology_dirs)


def _scenario_from_doc(path: Path, doc: dict, topology_dirs: Sequence[PathArg] = ()) -> Scenario:
    file = str(path)
    topo_path, params = _shape_checked(file, path, doc, topology_dirs)
    parts = _Parts.of(doc)
    fabric, problems = _scenario_fabric(file, doc, params, topo_path)
    if fabric is not None and parts.switch_faults:
        expanded, found = _switch_faults(file, parts.switch_faults, fabric)
        problems += found
        parts = dataclasses.replace(parts, faults=parts.faults + expanded)
    jobs, found = _semantic_problems(file, doc, parts, fabric)
    problems += found
    capture = doc.get("capture")
    if capture is not None and fabric is not None:
        capture = {"hosts": list(capture["hosts"]), "packets": capture.get("packets", 1000)}
    problems += bounds.cost_problems(file, doc, parts.duration, jobs, fabric)
    if problems:
        raise ConfigError(problems)
    if doc.get("queues"):
        fabric = dataclasses.replace(fabric, queues=queues.profile_from(doc["queues"]))

    return Scenario(
        name=doc["name"],
        description=doc.get("description", ""),
        path=file,
        topology_params=params,
        fabric=fabric,
        duration_s=parts.duration,
        traffic=parts.traffic,
        faults=sorted(parts.faults, key=lambda f: f.at),
        expect=parts.expect,
        topology_path=None if topo_path is None else str(topo_path),
        jobs=tuple(jobs),
        capture=capture,
        transport=_transport_entry(doc.get("transport")),
        time_dilation=_dilation_entry(doc.get("time_dilation", 1)),
        controller_timeline=sorted(parts.controller_timeline, key=lambda e: e["at"]),
        probes=tuple(parts.probes),
        crux=parts.crux,
    )


def _shape_checked(file, path, doc, topology_dirs):
    """(the topology file or None when inline, its mapping as written) of
    a scenario whose shape, and its topology file's, pass the schemas;
    ConfigError listing every schema problem otherwise."""
    problems = schema_problems(file, doc, SCENARIO)
    topo = doc.get(TOPOLOGY)
    topo_path, params = None, topo
    if isinstance(topo, str) and topo:
        topo_path = path.parent / topo
        try:
            params = _read_topology(file, path, topo, topology_dirs)
            problems += schema_problems(topo_path, params, TOPOLOGY)
        except ConfigError as e:
            problems += e.problems
    if problems:
        raise ConfigError(problems)
    return topo_path, params


@dataclass(frozen=True)
class _Parts:
    """A schema-checked scenario's entries: times in seconds, defaults filled in."""

    duration: float
    traffic: list[TrafficFlow]
    faults: list[Fault]
    switch_faults: list  # (entry number, entry) of each switch-down/up: expanded once the fabric is built
    controller_timeline: list
    expect: list[Expectation]
    probes: list
    crux: CruxRunning | None

    @classmethod
    def of(cls, doc: dict) -> "_Parts":
        return cls(
            duration=parse_time(doc["duration"]),
            traffic=[TrafficFlow.from_entry(t) for t in doc.get("traffic", [])],
            faults=_link_faults(doc.get("faults", [])),
            switch_faults=[
                (i, f) for i, f in enumerate(doc.get("faults", [])) if f["action"] in SWITCH_ACTIONS
            ],
            controller_timeline=[
                {"at": parse_time(e["at"]), "action": e["action"]} for e in doc.get("controller_timeline", [])
            ],
            expect=[Expectation.from_entry(e) for e in doc.get("expect", [])],
            probes=[
                {"src": p["src"], "dst": p["dst"], "rate": p.get("rate", 1000), "flows": p.get("flows", 8)}
                for p in doc.get("probes", [])
            ],
            crux=CruxRunning.from_entry(doc["crux"]) if doc.get("crux") is not None else None,
        )


SWITCH_ACTIONS = {"switch-down": "link-down", "switch-up": "link-up"}


def _link_faults(entries: list) -> list[Fault]:
    """The faults of the entries that name a link: a link-down or link-up
    each, a link-flap as its downs and ups."""
    out: list[Fault] = []
    for i, raw in enumerate(entries):
        if raw["action"] == "link-flap":
            out += Fault.flap(raw, source=i)
        elif raw["action"] not in SWITCH_ACTIONS:
            out.append(Fault.from_entry(raw, source=i))
    return out


def _switch_faults(file: str, entries: list, fabric) -> tuple[list[Fault], list[Problem]]:
    """A switch-down (switch-up) entry as a link-down (link-up) of every
    link of the switch at the same time, sharing the entry's name if any.

    They are applied one after the other, a few ms apart, in an order that
    never leaves a host's cable up to a switch cut off from the fabric:
    down, the links to hosts first; up, the links to other switches first.
    (Up in the other order, a host sent into a ToR whose uplinks were still
    down, its flows timed out, and TCP's back-off kept them silent for
    seconds after everything was back.)"""
    faults, problems = [], []
    for i, raw in entries:
        node = fabric.nodes.get(raw["switch"])
        if node is None or not node.is_switch:
            problems.append(
                Problem(
                    file, f"faults[{i}].switch", f"expected a switch of the topology, got {raw['switch']!r}"
                )
            )
            continue
        at, action, name = parse_time(raw["at"]), SWITCH_ACTIONS[raw["action"]], raw.get("name") or None
        up = action == "link-up"

        def later(link, up=up, switch=node.name):  # sorts after the others
            return fabric.nodes[link.other(switch).node].is_switch != up

        for link in sorted(fabric.links_of(node.name), key=later):
            other = link.other(node.name).node
            index = fabric.links_between(node.name, other).index(link)
            faults.append(Fault(at, action, (node.name, other), index, name, source=i))
    return faults, problems


def _scenario_fabric(file, doc, params, topo_path):
    """(the Fabric or None, the problems building it): inline topologies
    are named after the scenario, files after their file name."""
    try:
        if topo_path is None:
            return _build(file, params, doc["name"], prefix=TOPOLOGY), []
        return _build(str(topo_path), params, fabric_name_from(topo_path), prefix=""), []
    except ConfigError as e:
        return None, e.problems


def _semantic_problems(file, doc, parts, fabric):
    """(the jobs, none without a fabric; every semantic problem of the
    scenario, part by part in the order of the format)."""
    duration = parts.duration
    problems = semantics.duration_problems(file, doc["duration"], duration)
    problems += semantics.traffic_problems(file, doc.get("traffic", []), parts.traffic, duration, fabric)
    jobs = []
    if fabric is not None:
        jobs = [_job_entry(j, fabric) for j in doc.get("jobs", [])]
        problems += semantics_jobs.job_problems(
            file, doc.get("jobs", []), jobs, duration, fabric, has_queues=bool(doc.get("queues"))
        )
    problems += semantics_timeline.fault_problems(file, parts.faults, duration, fabric)
    problems += semantics_timeline.controller_timeline_problems(file, parts.controller_timeline, duration)
    problems += semantics.probe_problems(file, parts.probes, fabric)
    classes = [c["name"] for c in (doc.get("queues") or {}).get("classes", [])] or None
    problems += semantics_expect.expect_problems(
        file,
        parts.expect,
        fabric,
        {j.name for j in jobs},
        classes,
        {f.name for f in parts.faults if f.name},
        bool(parts.probes),
    )
    problems += semantics_expect.bound_spelling_problems(file, doc.get("expect", []))
    problems += semantics_jobs.crux_running_problems(
        file, parts.crux, jobs, duration, bool(doc.get("queues"))
    )
    problems += semantics.transport_problems(file, doc.get("transport"))
    problems += semantics_queues.queue_problems(file, doc.get("queues"), fabric)
    if doc.get("capture") is not None and fabric is not None:
        problems += semantics.capture_problems(file, doc["capture"], fabric)
    return jobs, problems


def _dilation_entry(raw):
    return raw if isinstance(raw, str) else float(raw)


def _read_topology(file, path, topo, topology_dirs):
    """The mapping in the topology file a scenario names, read only when it
    lies where topology_roots allows. A file that is not a topology is
    refused without a word of what it holds."""
    if allowed_topology_path(path, topo, topology_dirs) is None:
        raise fail(
            file,
            TOPOLOGY,
            f"{show(topo)} is outside the scenario's folder and hpnlab's "
            "topologies: expected a topology file there (or name its "
            "folder with --topology-dir)",
        )
    if Path(topo).suffix not in (".yaml", ".yml"):
        raise fail(file, TOPOLOGY, f"{show(topo)} is not a topology file: expected a .yaml file")
    fabric_name_from(path.parent / topo)
    roots = topology_roots(path, topology_dirs)
    try:
        return load_yaml(path.parent / topo, within=lambda real: _under(Path(real), roots))
    except ConfigError as e:
        if len(e.problems) == 1 and e.problems[0].message == "file not found":
            raise fail(
                file, TOPOLOGY, f"topology file {show(topo)} not found (looked for {e.problems[0].file})"
            ) from None
        raise


# --- training jobs and transport ----------------------------------------------


def _job_entry(raw, fabric):
    """A job with defaults filled in and its sizes scaled (records.Job)."""
    groups = raw.get("groups")
    if groups is None and raw["collective"] == "hierarchical":
        groups = "dc" if len({n.dc for n in fabric.hosts()}) > 1 else "segment"
    return Job.from_entry(raw, fabric.scale, _job_groups(groups, raw["hosts"], fabric))


def _job_groups(groups, hosts, fabric):
    """'segment' / 'dc' / explicit lists -> lists of host names (job order kept)."""
    if groups is None:
        return None
    if isinstance(groups, list):
        return [list(g) for g in groups]
    keys = {}
    for h in hosts:
        node = fabric.nodes.get(h)
        if node is None:
            continue
        key = node.dc if groups == "dc" else (node.dc, node.segment)
        keys.setdefault(key, []).append(h)
    return list(keys.values())


def _transport_entry(raw):
    """Scenario transport knobs -> agent config keys (times in seconds; DCQCN
    rates stay shares of line rate until the runner knows the port rate)."""
    if raw is None:
        return None
    out = {}
    if "window" in raw:
        out["window"] = raw["window"]
    if "rto" in raw:
        out["rto_s"] = parse_time(raw["rto"])
    if "control_dscp" in raw:
        out["control_dscp"] = raw["control_dscp"]
    names = {
        "g": "g",
        "fast_recovery_steps": "fast_recovery_steps",
        "alpha_period": "alpha_period_s",
        "increase_period": "increase_period_s",
        "cnp_interval": "cnp_interval_s",
        "min_rate": "min_rate_share",
        "ai_rate": "ai_rate_share",
        "hai_rate": "hai_rate_share",
    }
    dcqcn = {}
    for key, value in (raw.get("dcqcn") or {}).items():
        dcqcn[names[key]] = parse_time(value) if key.endswith(("period", "interval")) else value
    if dcqcn:
        out["dcqcn"] = dcqcn
    return out
