"""Validation of topology and scenario files (pure; no root, no network).

Every problem found becomes one line, `FILE: FIELD: message`, where FIELD is
a path into the document such as `traffic[0].dst` or `topology.planes`, and
the message says what was expected and what was found. Checking happens in
two phases: the JSON Schemas in `schemas/` first (shape, types, ranges), then,
only when the shape is right, the checks that need the built fabric (host
names exist, fault links exist, timings fit in the run).
"""
import difflib
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from .build import ModelError, build_fabric
from .expectations import JOB_METRICS
from .model import Fabric
from .units import parse_bytes, parse_time

SCENARIO, TOPOLOGY = "scenario", "topology"
TOP = "(top)"   # the FIELD of problems about the document as a whole


# --- problems ----------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    file: str
    field: str
    message: str

    def __str__(self):
        # Always one line, so that output can be grepped and counted.
        text = f"{self.file}: {self.field or TOP}: {self.message}"
        return re.sub(r"\s*\n\s*", " ", text)


class ConfigError(Exception):
    """One or more problems in the files given; `problems` lists them all."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _fail(file, field, message):
    return ConfigError([Problem(str(file), field, message)])


# --- YAML --------------------------------------------------------------------

class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of keeping the last."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are allowed to be overridden
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_message(err):
    """A one-line description of a YAML parse error, with its position."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return f"invalid YAML: {err}"
    mark = err.problem_mark
    text = f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {err.problem}"
    if err.context and err.context_mark is not None:
        text += f" ({err.context} started at line {err.context_mark.line + 1})"
    return text


def load_yaml(path):
    """The mapping in the YAML file `path`; ConfigError with one problem if not."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(name, TOP, "file not found") from None
    except IsADirectoryError:
        raise _fail(name, TOP, "is a directory, expected a YAML file") from None
    except UnicodeDecodeError as e:
        raise _fail(name, TOP, f"not UTF-8 text (bad byte at offset {e.start})") from None
    except OSError as e:
        raise _fail(name, TOP, f"cannot read the file: {e.strerror or e}") from None
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise _fail(name, TOP, _yaml_message(e)) from None
    if doc is None:
        raise _fail(name, TOP, "the file is empty, expected a mapping of fields")
    if not isinstance(doc, dict):
        raise _fail(name, TOP, f"expected a mapping of fields at the top level, got {_describe(doc)}")
    return doc


def detect_kind(doc):
    """'scenario' for a mapping with a `topology` key, else 'topology'."""
    return SCENARIO if isinstance(doc, dict) and TOPOLOGY in doc else TOPOLOGY


# --- JSON Schema -------------------------------------------------------------

def _is_integer(_checker, value):
    # Unlike the default, 2.0 is not an integer: range(2.0) would fail later.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_checker, value):
    # YAML spells infinity and NaN as .inf and .nan; neither is a useful setting.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_Validator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}),
)


def load_schema(name):
    """The JSON Schema for 'topology' or 'scenario' files, as a dict."""
    text = resources.files(__package__).joinpath("schemas", f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def _validator(name):
    # Without "$schema", jsonschema keeps using _Validator (and its stricter
    # types) when a $ref enters another schema; with it, it would switch back
    # to the stock class for that dialect.
    schemas = {kind: {k: v for k, v in load_schema(kind).items() if k != "$schema"}
               for kind in (TOPOLOGY, SCENARIO)}
    # The scenario schema refers to the topology schema by its $id.
    registry = Registry().with_resources(
        (s["$id"], DRAFT202012.create_resource(s)) for s in schemas.values())
    return _Validator(schemas[name], registry=registry)


def schema_problems(file, doc, kind):
    """Problems of `doc` against the schema of `kind`, in document order."""
    errors = sorted(_validator(kind).iter_errors(doc),
                    key=lambda e: _document_order(doc, e.absolute_path))
    problems = [Problem(str(file), format_path(path), message)
                for error in errors for path, message in _explain(error)]
    return _unique(problems)


def _unique(items):
    return list(dict.fromkeys(items))


def _document_order(doc, path):
    """Positions of `path`'s steps in `doc`, so problems follow the file."""
    key, node = [], doc
    for step in path:
        if isinstance(node, dict):
            keys = list(node)
            key.append(keys.index(step) if step in node else len(keys))
        elif isinstance(node, list) and isinstance(step, int):
            key.append(step)
        else:
            break
        node = node[step]
    return tuple(key)


def format_path(steps):
    """('traffic', 0, 'dst') -> 'traffic[0].dst'; () -> '(top)'."""
    text = ""
    for step in steps:
        if isinstance(step, int) and not isinstance(step, bool):
            text += f"[{step}]"
        else:
            text += f".{step}" if text else str(step)
    return text or TOP


def _join(prefix, field):
    if not field:
        return prefix or TOP
    return f"{prefix}.{field}" if prefix else field


# Validators whose failure is better said in the schema's own "x-expected"
# words than in generic ones; the others describe structure, not a value.
_STRUCTURAL = {"required", "additionalProperties", "uniqueItems", "enum", "const", "oneOf", "anyOf"}


def _explain(error):
    """[(path, message)] for one jsonschema error."""
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    kind, value, inst = error.validator, error.validator_value, error.instance
    if "x-message" in schema:
        return [(path, schema["x-message"])]
    if kind == "required":
        return [(path + (name,), "required field is missing") for name in value if name not in inst]
    if kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        return [(path, _unknown_field(key, allowed)) for key in inst if key not in allowed]
    if kind in ("oneOf", "anyOf"):
        return _explain_alternatives(error, path)
    expected = None if kind in _STRUCTURAL else schema.get("x-expected")
    message = f"expected {expected or _expectation(error)}, got {_found(error)}"
    if kind == "enum" and isinstance(inst, str):
        message += _did_you_mean(inst, [v for v in value if isinstance(v, str)])
    return [(path, message)]


def _explain_alternatives(error, path):
    keys = _required_alternatives(error.validator_value)
    if keys is not None and isinstance(error.instance, dict):
        # oneOf/anyOf over `required` lists: "exactly one of rate, oversubscription".
        present = [k for k in keys if k in error.instance]
        want = "exactly one of" if error.validator == "oneOf" else "at least one of"
        got = "neither" if not present else "both" if len(present) == 2 else ", ".join(present)
        return [(path, f"expected {want} {_names(keys)}, got {got}")]
    if error.context:
        return _explain(best_match(error.context))
    return [(path, error.message)]


def _required_alternatives(subschemas):
    """The key names if every alternative is just {"required": [one key]}."""
    keys = []
    for sub in subschemas:
        if not (isinstance(sub, dict) and set(sub) == {"required"} and len(sub["required"]) == 1):
            return None
        keys.append(sub["required"][0])
    return keys


def _unknown_field(key, allowed):
    hint = _did_you_mean(str(key), allowed).strip(" ()")
    hint = f"{hint} " if hint else ""
    return f"unknown field {_show(key)} ({hint}allowed: {', '.join(allowed)})"


def _did_you_mean(text, choices):
    close = difflib.get_close_matches(text, [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _names(keys):
    return ", ".join(str(k) for k in keys)


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string",
               "boolean": "true or false", "object": "a mapping", "array": "a list",
               "null": "nothing"}


def _expectation(error):
    """What the failing keyword wanted, in words."""
    kind, value, schema = error.validator, error.validator_value, error.schema
    if kind == "type":
        types = value if isinstance(value, list) else [value]
        return " or ".join(_TYPE_WORDS.get(t, t) for t in types)
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return _bounds(schema)
    if kind == "multipleOf":
        return f"a multiple of {value}"
    if kind == "enum":
        return "one of " + ", ".join(_show(v) for v in value)
    if kind == "const":
        return _show(value)
    if kind == "minLength":
        return "a non-empty string" if value == 1 else f"a string of at least {value} characters"
    if kind == "maxLength":
        return f"a string of at most {value} characters"
    if kind == "pattern":
        return f"text matching {value}"
    if kind == "minItems":
        return f"a list of at least {_count(value, 'item')}"
    if kind == "maxItems":
        return f"a list of at most {_count(value, 'item')}"
    if kind == "uniqueItems":
        return "a list without repeats"
    return error.message


def _bounds(schema):
    noun = "an integer" if schema.get("type") == "integer" else "a number"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f"{noun} from {low} to {high}"
    parts = []
    for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"),
                      ("maximum", "<="), ("exclusiveMaximum", "<")):
        if key in schema:
            parts.append(f"{sign} {schema[key]}")
    return f"{noun} {' and '.join(parts)}"


def _found(error):
    inst = error.instance
    if error.validator == "uniqueItems" and isinstance(inst, list):
        seen = []
        for item in inst:
            if item in seen:
                return f"{_show(item)} more than once"
            seen.append(item)
    return _describe(inst)


def _describe(value):
    """A short phrase for a value found in a file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "an empty value"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _show(value)
    if isinstance(value, dict):
        return "an empty mapping" if not value else "a mapping"
    if isinstance(value, list):
        return "an empty list" if not value else f"a list of {_count(len(value), 'item')}"
    return f"a {type(value).__name__} ({value})"


def _show(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(n, noun):
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _seconds(x):
    return f"{x:g}s"


# --- building ----------------------------------------------------------------

def _build(file, params, name, prefix):
    """build_fabric, with its errors turned into a ConfigError at `prefix`."""
    try:
        return build_fabric(params, name)
    except ModelError as e:
        raise _fail(file, _join(prefix, e.field), str(e)) from None
    except (KeyError, TypeError, ValueError, ArithmeticError) as e:
        # The schema should make these impossible; say so rather than crash.
        raise _fail(file, prefix or TOP, f"cannot build this topology ({type(e).__name__}: {e})") from None


def load_topology(path):
    """(params, Fabric) for a topology file; params is the mapping as written.

    The fabric is named after the file; `fabric.params` holds the parameters
    with defaults filled in.
    """
    return _topology_from_doc(path, load_yaml(path))


def _topology_from_doc(path, doc):
    problems = schema_problems(path, doc, TOPOLOGY)
    if problems:
        raise ConfigError(problems)
    return doc, _build(str(path), doc, Path(path).stem, prefix="")


# --- scenarios ---------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    path: str                 # the scenario file
    topology_params: dict     # the topology mapping as written
    fabric: Fabric
    duration_s: float
    traffic: list             # dicts: kind, src, dst (list), parallel, start (s)
    faults: list              # dicts sorted by at: at (s), action, link (a, b), index
    expect: list              # dicts: name, metric, host, job (or None), min, max (or None)
    topology_path: str | None = None   # the topology file, when not inline
    jobs: tuple = ()          # dicts: see _job_entry
    capture: dict | None = None   # {"hosts": [...], "packets": n}
    transport: dict | None = None  # agent knobs: window, rto_s, dcqcn (see _transport_entry)

    @property
    def jobs_only(self):
        """Training jobs and no iperf3 flows: the drill ends when the last
        job does (and every fault has been applied), duration is its limit."""
        return bool(self.jobs) and not self.traffic


def load_scenario(path):
    """The Scenario in file `path`; ConfigError listing every problem if invalid."""
    return _scenario_from_doc(Path(path), load_yaml(path))


def _scenario_from_doc(path, doc):
    file = str(path)
    problems = schema_problems(file, doc, SCENARIO)
    topo = doc.get(TOPOLOGY)
    topo_path, params = None, topo
    if isinstance(topo, str) and topo:
        topo_path = path.parent / topo
        try:
            params = load_yaml(topo_path)
            problems += schema_problems(topo_path, params, TOPOLOGY)
        except ConfigError as e:
            problems += _missing_topology(file, topo, e.problems)
    if problems:
        raise ConfigError(problems)

    duration = parse_time(doc["duration"])
    traffic = [_traffic_entry(t) for t in doc.get("traffic", [])]
    faults = [_fault_entry(f) for f in doc.get("faults", [])]
    expect = [_expect_entry(e) for e in doc.get("expect", [])]

    fabric = None
    try:
        if topo_path is None:
            fabric = _build(file, params, doc["name"], prefix=TOPOLOGY)
        else:
            fabric = _build(str(topo_path), params, topo_path.stem, prefix="")
    except ConfigError as e:
        problems += e.problems
    if duration <= 0:
        problems.append(Problem(file, "duration", f"expected seconds > 0, got {_show(doc['duration'])}"))
    problems += _traffic_problems(file, doc.get("traffic", []), traffic, duration, fabric)
    jobs = []
    if fabric is not None:
        jobs = [_job_entry(j, fabric) for j in doc.get("jobs", [])]
        problems += _job_problems(file, doc.get("jobs", []), jobs, duration, fabric)
    problems += _fault_problems(file, faults, duration, fabric)
    problems += _expect_problems(file, expect, fabric, {j["name"] for j in jobs})
    problems += _transport_problems(file, doc.get("transport"))
    capture = doc.get("capture")
    if capture is not None and fabric is not None:
        for k, h in enumerate(capture["hosts"]):
            why = _host_problem(fabric, h)
            if why:
                problems.append(Problem(file, f"capture.hosts[{k}]", why))
        capture = {"hosts": list(capture["hosts"]), "packets": capture.get("packets", 1000)}
    if problems:
        raise ConfigError(problems)

    return Scenario(
        name=doc["name"], description=doc.get("description", ""), path=file,
        topology_params=params, fabric=fabric, duration_s=duration, traffic=traffic,
        faults=sorted(faults, key=lambda f: f["at"]),
        expect=expect, topology_path=None if topo_path is None else str(topo_path),
        jobs=tuple(jobs), capture=capture, transport=_transport_entry(doc.get("transport")))


def _missing_topology(file, topo, problems):
    """A missing topology file is the scenario's problem; other ones are the file's."""
    if len(problems) == 1 and problems[0].message == "file not found":
        return [Problem(file, TOPOLOGY, f"topology file {topo!r} not found "
                                        f"(looked for {problems[0].file})")]
    return problems


def _traffic_entry(raw):
    dst = raw["dst"]
    return {"kind": raw.get("kind", "iperf3"), "src": raw["src"],
            "dst": list(dst) if isinstance(dst, list) else [dst],
            "parallel": raw.get("parallel", 1), "start": parse_time(raw.get("start", 0))}


def _fault_entry(raw):
    return {"at": parse_time(raw["at"]), "action": raw["action"],
            "link": tuple(raw["link"]), "index": raw.get("index", 0)}


def _expect_entry(raw):
    entry = {"name": raw.get("name"), "metric": raw["metric"], "host": raw.get("host"),
             "job": raw.get("job"), "relative_to": raw.get("relative_to"),
             "min": raw.get("min"), "max": raw.get("max")}
    if not entry["name"]:
        entry["name"] = _expect_name(entry)
    return entry


def _expect_name(entry):
    """A readable default name: 'fault_throughput_ratio of s0h0 >= 0.45'."""
    who = entry["host"] or entry.get("job")
    text = entry["metric"] + (f" of {who}" if who else "")
    if entry.get("relative_to"):
        text += f" / that of {entry['relative_to']}"
    low, high = entry["min"], entry["max"]
    if low is not None and high is not None:
        return f"{text} in [{low:g}, {high:g}]"
    return f"{text} >= {low:g}" if low is not None else f"{text} <= {high:g}"


# --- semantic checks ---------------------------------------------------------

def _host_problem(fabric, name):
    """Why `name` is not a host of `fabric`, or None if it is one."""
    node = fabric.nodes.get(name)
    if node is None:
        return f"host {name!r} is not in the topology ({_host_summary(fabric)})"
    if node.is_switch:
        return f"{name!r} is a switch ({node.kind}), expected a host ({_host_summary(fabric)})"
    return None


def _host_summary(fabric):
    hosts = [n.name for n in fabric.hosts()]
    if len(hosts) <= 4:
        return "hosts: " + ", ".join(hosts)
    return f"hosts: {hosts[0]}..{hosts[-1]}"


def _traffic_problems(file, raws, entries, duration, fabric):
    problems = []
    for i, (raw, t) in enumerate(zip(raws, entries)):
        here = f"traffic[{i}]"
        if t["start"] >= duration:
            problems.append(Problem(file, f"{here}.start",
                                    f"expected a start before the end of the run ({_seconds(duration)}), "
                                    f"got {_seconds(t['start'])}"))
        if fabric is None:
            continue
        why = _host_problem(fabric, t["src"])
        if why:
            problems.append(Problem(file, f"{here}.src", why))
        for j, dst in enumerate(t["dst"]):
            where = f"{here}.dst[{j}]" if isinstance(raw["dst"], list) else f"{here}.dst"
            why = _host_problem(fabric, dst)
            if why is None and dst == t["src"]:
                why = f"{dst!r} is also the source; expected a different host"
            if why:
                problems.append(Problem(file, where, why))
    return problems


def _fault_problems(file, faults, duration, fabric):
    problems, valid = [], []
    for i, f in enumerate(faults):
        here = f"faults[{i}]"
        if f["at"] >= duration:
            problems.append(Problem(file, f"{here}.at",
                                    f"expected a time before the end of the run ({_seconds(duration)}), "
                                    f"got {_seconds(f['at'])}"))
        link_problems = [] if fabric is None else _link_problems(file, here, f, fabric)
        problems += link_problems
        if not link_problems:
            valid.append((i, f))
    # Stable sort: each fault's problems together, in the order of the file.
    return sorted(problems + _sequence_problems(file, valid), key=lambda p: _fault_number(p.field))


def _link_problems(file, here, fault, fabric):
    a, b = fault["link"]
    missing = [Problem(file, f"{here}.link[{j}]", f"node {name!r} is not in the topology")
               for j, name in enumerate((a, b)) if name not in fabric.nodes]
    if missing:
        return missing
    if a == b:
        return [Problem(file, f"{here}.link", f"expected two different nodes, got {a!r} twice")]
    links = fabric.links_between(a, b)
    if not links:
        neighbours = sorted({l.other(a).node for l in fabric.links_of(a)})
        return [Problem(file, f"{here}.link",
                        f"{a!r} and {b!r} share no link ({a} is linked to {', '.join(neighbours)})")]
    if fault["index"] >= len(links):
        return [Problem(file, f"{here}.index",
                        f"expected an index below {len(links)} ({a} and {b} share "
                        f"{_count(len(links), 'link')}), got {fault['index']}")]
    return []


def _sequence_problems(file, faults):
    """A link goes down before it comes up, and goes down only while up."""
    down_since = {}   # (frozenset of ends, index) -> (time, fault number)
    problems = []
    for i, f in sorted(faults, key=lambda item: item[1]["at"]):
        key = (frozenset(f["link"]), f["index"])
        name = "-".join(f["link"]) + (f" #{f['index']}" if f["index"] else "")
        if f["action"] == "link-down":
            if key in down_since:
                t, j = down_since[key]
                problems.append(Problem(file, f"faults[{i}].action",
                                        f"link {name} is already down at {_seconds(f['at'])} "
                                        f"(since {_seconds(t)}, faults[{j}]); expected a link-up first"))
            else:
                down_since[key] = (f["at"], i)
        elif key in down_since:
            del down_since[key]
        else:
            problems.append(Problem(file, f"faults[{i}].action",
                                    f"link {name} is not down at {_seconds(f['at'])}; "
                                    "expected a link-down of it earlier"))
    return problems


def _fault_number(field):
    return int(re.search(r"\[(\d+)\]", field).group(1))


def _expect_problems(file, expect, fabric, job_names=frozenset()):
    problems = []
    for i, e in enumerate(expect):
        if e["job"] is not None and e["host"] is not None:
            problems.append(Problem(file, f"expect[{i}].job", "expected either host or job, got both"))
        elif e["job"] is not None and e["job"] not in job_names:
            problems.append(Problem(file, f"expect[{i}].job", f"job {e['job']!r} is not in this "
                                    f"scenario (jobs: {', '.join(sorted(job_names)) or 'none'})"))
        elif e.get("relative_to") is not None and e["relative_to"] not in job_names:
            problems.append(Problem(file, f"expect[{i}].relative_to", f"job {e['relative_to']!r} is "
                                    f"not in this scenario (jobs: {', '.join(sorted(job_names)) or 'none'})"))
        elif e.get("relative_to") is not None and e["job"] is None:
            problems.append(Problem(file, f"expect[{i}].relative_to",
                                    "a comparison needs the job to compare: name it in job"))
        elif e["metric"] not in JOB_METRICS and (e["job"] is not None or e.get("relative_to")):
            problems.append(Problem(file, f"expect[{i}].job", f"metric {e['metric']} is measured "
                                    "on flows and links, not per job: drop job/relative_to"))
        elif e["metric"] == "fidelity" and e["host"] is not None:
            problems.append(Problem(file, f"expect[{i}].host", "fidelity is measured per link for "
                                    "the whole run: drop host"))
        elif e["metric"] in JOB_METRICS and e["job"] is None:
            problems.append(Problem(file, f"expect[{i}].job",
                                    f"metric {e['metric']} is measured per job: name the job"))
        if e["host"] is not None and fabric is not None:
            why = _host_problem(fabric, e["host"])
            if why:
                problems.append(Problem(file, f"expect[{i}].host", why))
        if e["min"] is not None and e["max"] is not None and e["min"] > e["max"]:
            problems.append(Problem(file, f"expect[{i}].min",
                                    f"expected min <= max, got min {e['min']:g} > max {e['max']:g}"))
    return problems


# --- whole files -------------------------------------------------------------

def load_fabric(path):
    """(kind, Fabric) for a topology or scenario file; kind says which it was."""
    doc = load_yaml(path)
    if detect_kind(doc) == SCENARIO:
        return SCENARIO, _scenario_from_doc(Path(path), doc).fabric
    return TOPOLOGY, _topology_from_doc(path, doc)[1]


def check_files(paths):
    """Every problem in the given files, each validated by its detected kind."""
    problems = []
    for path in paths:
        try:
            load_fabric(path)
        except ConfigError as e:
            problems += e.problems
    return problems


# --- training jobs -------------------------------------------------------------

def _job_entry(raw, fabric):
    """A job with defaults filled in and its sizes scaled (bytes divided by
    the fabric's scale; times stay real, so compute/communication ratios hold)."""
    real = parse_bytes(raw["bytes"])
    groups = raw.get("groups")
    if groups is None and raw["collective"] == "hierarchical":
        groups = "dc" if len({n.dc for n in fabric.hosts()}) > 1 else "segment"
    return {"name": raw["name"], "hosts": list(raw["hosts"]), "collective": raw["collective"],
            "groups": _job_groups(groups, raw["hosts"], fabric), "bytes_real": real,
            "bytes": int(round(real / fabric.scale)), "compute_s": parse_time(raw.get("compute", 0)),
            "overlap": float(raw.get("overlap", 0.0)), "iterations": raw.get("iterations", 5),
            "dscp": raw.get("dscp", 26), "port": raw.get("port"),
            "microbatches": raw.get("microbatches", 1), "start": parse_time(raw.get("start", 0))}


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


def _job_problems(file, raws, jobs, duration, fabric):
    problems, seen = [], set()
    for i, (raw, j) in enumerate(zip(raws, jobs)):
        here = f"jobs[{i}]"
        if j["name"] in seen:
            problems.append(Problem(file, f"{here}.name", f"job name {j['name']!r} is used twice"))
        seen.add(j["name"])
        bad_host = False
        for k, h in enumerate(j["hosts"]):
            why = _host_problem(fabric, h)
            if why:
                problems.append(Problem(file, f"{here}.hosts[{k}]", why))
                bad_host = True
        n = len(j["hosts"])
        if j["start"] >= duration:
            problems.append(Problem(file, f"{here}.start", f"expected a start before the end of the "
                                    f"run ({_seconds(duration)}), got {_seconds(j['start'])}"))
        if j["collective"] == "halving-doubling" and n & (n - 1):
            problems.append(Problem(file, f"{here}.hosts", f"halving-doubling needs a power-of-two "
                                    f"number of ranks, got {n}"))
        if j["bytes"] < n:
            problems.append(Problem(file, f"{here}.bytes", f"expected at least one byte per rank after "
                                    f"scaling by {fabric.scale:g}, got {j['bytes']} bytes for {n} ranks"))
        if j["groups"] is not None and not bad_host:
            flat = [h for g in j["groups"] for h in g]
            if sorted(flat) != sorted(j["hosts"]) or len(flat) != len(set(flat)):
                problems.append(Problem(file, f"{here}.groups", "expected groups that split the "
                                        "job's hosts, each host in exactly one group"))
        if j["port"] is not None and not bad_host:
            ports = min(len(fabric.nics_of(h)[0].ports) for h in j["hosts"])
            if j["port"] >= ports:
                problems.append(Problem(file, f"{here}.port", f"expected a NIC port below {ports} "
                                        f"(the job's hosts have {ports} port(s) per NIC), got {j['port']}"))
        if j["groups"] is not None and j["collective"] != "hierarchical":
            problems.append(Problem(file, f"{here}.groups", "groups apply to the hierarchical "
                                    f"collective only, not {j['collective']}"))
    return problems


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
    names = {"g": "g", "fast_recovery_steps": "fast_recovery_steps",
             "alpha_period": "alpha_period_s", "increase_period": "increase_period_s",
             "cnp_interval": "cnp_interval_s", "min_rate": "min_rate_share",
             "ai_rate": "ai_rate_share", "hai_rate": "hai_rate_share"}
    dcqcn = {}
    for key, value in (raw.get("dcqcn") or {}).items():
        dcqcn[names[key]] = parse_time(value) if key.endswith(("period", "interval")) else value
    if dcqcn:
        out["dcqcn"] = dcqcn
    return out


def _transport_problems(file, raw):
    """DCQCN's alpha decays once per alpha period without a CNP; if the
    period is shorter than the receivers' CNP interval, alpha decays between
    the CNPs of a flow that is congested all along."""
    dcqcn = (raw or {}).get("dcqcn") or {}
    alpha = parse_time(dcqcn.get("alpha_period", "5ms"))
    cnp = parse_time(dcqcn.get("cnp_interval", "4ms"))
    if alpha <= cnp:
        return [Problem(file, "transport.dcqcn.alpha_period", f"expected an alpha period longer than "
                        f"the CNP interval ({_seconds(cnp)}), got {_seconds(alpha)}")]
    return []
