"""Checks that need the built fabric or the whole scenario: host names
exist, fault links exist and go down before they come up, timings fit in the
run, jobs and expectations are consistent. They run only once the file's
shape has passed the schema; each returns a list of Problems.
"""

import dataclasses
import re

from . import bounds, queues
from .model import Fabric
from .problems import Problem, count, seconds, show
from .units import parse_time
from .vocabulary import CLASS_METRICS, JOB_METRICS

# Bounds on the work a file may ask for (the schema bounds single numbers;
# these bound what they multiply into).
MAX_DURATION_S = 3600  # a drill, a compute phase
MAX_FLOWS = 1024  # iperf3 TCP streams in all (parallel x destinations)
MAX_JOB_BYTES = 1_000_000_000  # one job's bytes per iteration after scaling
MAX_PROBE_PPS = 10_000  # probe packets per second, all probes together
# A class's FIFO limit is a 32-bit byte count in tc; a GiB is minutes of
# queue at the rates emulated (215 s at 40 Mbit/s).
MAX_CLASS_BUFFER_BYTES = 1 << 30


def _class_expect_problems(file, i, e, cls, class_names):
    here = f"expect[{i}]"
    if e["metric"] not in CLASS_METRICS:
        return [
            Problem(
                file,
                f"{here}.class",
                f"metric {e['metric']} is not measured per queue "
                f"class (those are {', '.join(CLASS_METRICS)}): drop class",
            )
        ]
    if cls is None:
        return [
            Problem(
                file, f"{here}.class", f"metric {e['metric']} is measured per queue class: name the class"
            )
        ]
    if class_names is None:
        return [Problem(file, f"{here}.class", "the scenario declares no queues: add queues.classes")]
    if cls not in class_names:
        return [
            Problem(
                file, f"{here}.class", f"expected one of the classes ({', '.join(class_names)}), got {cls!r}"
            )
        ]
    if e["job"] is not None or e["host"] is not None or e.get("relative_to") is not None:
        return [
            Problem(file, f"{here}.class", "a class metric covers every port: drop host, job and relative_to")
        ]
    return []


def duration_problems(file: str, raw: object, duration: float) -> list[Problem]:
    if duration <= 0:
        return [Problem(file, "duration", f"expected seconds > 0, got {show(raw)}")]
    if duration > MAX_DURATION_S:
        return [
            Problem(file, "duration", f"expected at most {seconds(MAX_DURATION_S)}, got {seconds(duration)}")
        ]
    return []


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


def traffic_problems(
    file: str, raws: list, entries: list, duration: float, fabric: Fabric | None
) -> list[Problem]:
    problems = []
    flows = sum(t["parallel"] * len(t["dst"]) for t in entries)
    if flows > MAX_FLOWS:
        problems.append(
            Problem(
                file,
                "traffic",
                f"expected at most {MAX_FLOWS} iperf3 streams in all (parallel x destinations), got {flows}",
            )
        )
    for i, (raw, t) in enumerate(zip(raws, entries)):
        here = f"traffic[{i}]"
        if t["start"] >= duration:
            problems.append(
                Problem(
                    file,
                    f"{here}.start",
                    f"expected a start before the end of the run ({seconds(duration)}), "
                    f"got {seconds(t['start'])}",
                )
            )
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


def fault_problems(file: str, faults: list, duration: float, fabric: Fabric | None) -> list[Problem]:
    problems, valid = [], []
    for i, f in enumerate(faults):
        here = f"faults[{i}]"
        if f["at"] >= duration:
            problems.append(
                Problem(
                    file,
                    f"{here}.at",
                    f"expected a time before the end of the run ({seconds(duration)}), "
                    f"got {seconds(f['at'])}",
                )
            )
        link_problems = [] if fabric is None else _link_problems(file, here, f, fabric)
        problems += link_problems
        if not link_problems:
            valid.append((i, f))
    # Stable sort: each fault's problems together, in the order of the file.
    return sorted(
        problems + _sequence_problems(file, valid) + _fault_name_problems(file, faults),
        key=lambda p: _fault_number(p.field),
    )


def controller_timeline_problems(file: str, timeline: list, duration: float) -> list[Problem]:
    """Each entry inside the run; the controller stops only while running
    and starts only while stopped (it runs when the drill begins)."""
    problems = []
    running = True
    for i, e in sorted(enumerate(timeline), key=lambda item: item[1]["at"]):
        here = f"controller_timeline[{i}]"
        if e["at"] >= duration:
            problems.append(
                Problem(
                    file,
                    f"{here}.at",
                    f"expected a time before the end of the run "
                    f"({seconds(duration)}), got {seconds(e['at'])}",
                )
            )
        if (e["action"] == "stop") != running:
            state = "running" if running else "stopped"
            problems.append(
                Problem(
                    file,
                    f"{here}.action",
                    f"the controller is already {state} at {seconds(e['at'])}; "
                    f"expected {'stop' if running else 'start'}",
                )
            )
        else:
            running = not running
    return problems


def _link_problems(file, here, fault, fabric):
    a, b = fault["link"]
    missing = [
        Problem(file, f"{here}.link[{j}]", f"node {name!r} is not in the topology")
        for j, name in enumerate((a, b))
        if name not in fabric.nodes
    ]
    if missing:
        return missing
    if a == b:
        return [Problem(file, f"{here}.link", f"expected two different nodes, got {a!r} twice")]
    links = fabric.links_between(a, b)
    if not links:
        neighbours = sorted({l.other(a).node for l in fabric.links_of(a)})
        return [
            Problem(
                file,
                f"{here}.link",
                f"{a!r} and {b!r} share no link ({a} is linked to {', '.join(neighbours)})",
            )
        ]
    if fault["index"] >= len(links):
        return [
            Problem(
                file,
                f"{here}.index",
                f"expected an index below {len(links)} ({a} and {b} share "
                f"{count(len(links), 'link')}), got {fault['index']}",
            )
        ]
    return []


def _sequence_problems(file, faults):
    """A link goes down before it comes up, and goes down only while up."""
    down_since = {}  # (frozenset of ends, index) -> (time, fault number)
    problems = []
    for i, f in sorted(faults, key=lambda item: item[1]["at"]):
        key = (frozenset(f["link"]), f["index"])
        name = "-".join(f["link"]) + (f" #{f['index']}" if f["index"] else "")
        if f["action"] == "link-down":
            if key in down_since:
                t, j = down_since[key]
                problems.append(
                    Problem(
                        file,
                        f"faults[{i}].action",
                        f"link {name} is already down at {seconds(f['at'])} "
                        f"(since {seconds(t)}, faults[{j}]); expected a link-up first",
                    )
                )
            else:
                down_since[key] = (f["at"], i)
        elif key in down_since:
            del down_since[key]
        else:
            problems.append(
                Problem(
                    file,
                    f"faults[{i}].action",
                    f"link {name} is not down at {seconds(f['at'])}; expected a link-down of it earlier",
                )
            )
    return problems


def _fault_number(field):
    return int(re.search(r"\[(\d+)\]", field).group(1))


def probe_problems(file: str, probes: list, fabric: Fabric | None) -> list[Problem]:
    problems = []
    for i, p in enumerate(probes):
        here = f"probes[{i}]"
        if fabric is not None:
            for side in ("src", "dst"):
                why = _host_problem(fabric, p[side])
                if why:
                    problems.append(Problem(file, f"{here}.{side}", why))
        if p["src"] == p["dst"]:
            problems.append(
                Problem(file, f"{here}.dst", f"expected a host other than the source, got {p['dst']!r} twice")
            )
        if p["flows"] > p["rate"]:
            problems.append(
                Problem(
                    file,
                    f"{here}.flows",
                    f"expected at most rate ({p['rate']}) "
                    f"flows, so each sends at least once a second, got {p['flows']}",
                )
            )
    total = sum(p["rate"] for p in probes)
    if total > MAX_PROBE_PPS:
        problems.append(
            Problem(file, "probes", f"expected at most {MAX_PROBE_PPS} packets/s in all, got {total}")
        )
    return problems


def _fault_name_problems(file, faults):
    """Faults that share a name happen together (a switch failing takes all
    its links): the same time and the same action."""
    first = {}
    problems = []
    for i, f in enumerate(faults):
        name = f.get("name")
        if not name:
            continue
        if name not in first:
            first[name] = (i, f)
            continue
        j, g = first[name]
        if (f["at"], f["action"]) != (g["at"], g["action"]):
            problems.append(
                Problem(
                    file,
                    f"faults[{i}].name",
                    f"name {name!r} is taken by faults[{j}] "
                    f"({g['action']} at {seconds(g['at'])}); faults that share a name "
                    "must share at and action",
                )
            )
    return problems


def _gap_expect_problems(file, i, e, fault_names, has_probes):
    here = f"expect[{i}]"
    if e["metric"] != "gap_ms":
        return [Problem(file, f"{here}.fault", f"metric {e['metric']} is not measured per fault: drop fault")]
    if not has_probes:
        return [Problem(file, f"{here}.metric", "gap_ms is measured by probes: add probes")]
    if e.get("fault") is None:
        return [Problem(file, f"{here}.fault", "gap_ms is measured per named fault: name the fault")]
    if e["fault"] not in fault_names:
        return [
            Problem(
                file,
                f"{here}.fault",
                f"no fault is named {e['fault']!r} (named faults: "
                f"{', '.join(sorted(fault_names)) or 'none'})",
            )
        ]
    if e["job"] is not None or e["host"] is not None or e.get("class") is not None:
        return [Problem(file, f"{here}.fault", "a gap covers every probe: drop host, job and class")]
    return []


def expect_problems(
    file, expect, fabric, job_names=frozenset(), class_names=None, fault_names=frozenset(), has_probes=False
):
    """`class_names`: the scenario's queue classes (None: it has no queues);
    `fault_names`: the names the faults carry."""
    problems = []
    for i, e in enumerate(expect):
        cls = e.get("class")
        if e["metric"] == "gap_ms" or e.get("fault") is not None:
            problems += _gap_expect_problems(file, i, e, fault_names, has_probes)
        elif e["metric"] in CLASS_METRICS or cls is not None:
            problems += _class_expect_problems(file, i, e, cls, class_names)
        elif e["job"] is not None and e["host"] is not None:
            problems.append(Problem(file, f"expect[{i}].job", "expected either host or job, got both"))
        elif e["job"] is not None and e["job"] not in job_names:
            problems.append(
                Problem(
                    file,
                    f"expect[{i}].job",
                    f"job {e['job']!r} is not in this "
                    f"scenario (jobs: {', '.join(sorted(job_names)) or 'none'})",
                )
            )
        elif e.get("relative_to") is not None and e["relative_to"] not in job_names:
            problems.append(
                Problem(
                    file,
                    f"expect[{i}].relative_to",
                    f"job {e['relative_to']!r} is "
                    f"not in this scenario (jobs: {', '.join(sorted(job_names)) or 'none'})",
                )
            )
        elif e.get("relative_to") is not None and e["job"] is None:
            problems.append(
                Problem(
                    file, f"expect[{i}].relative_to", "a comparison needs the job to compare: name it in job"
                )
            )
        elif e["metric"] not in JOB_METRICS and (e["job"] is not None or e.get("relative_to")):
            problems.append(
                Problem(
                    file,
                    f"expect[{i}].job",
                    f"metric {e['metric']} is measured on flows and links, not per job: drop job/relative_to",
                )
            )
        elif e["metric"] == "fidelity" and e["host"] is not None:
            problems.append(
                Problem(
                    file, f"expect[{i}].host", "fidelity is measured per link for the whole run: drop host"
                )
            )
        elif e["metric"] in JOB_METRICS and e["job"] is None:
            problems.append(
                Problem(file, f"expect[{i}].job", f"metric {e['metric']} is measured per job: name the job")
            )
        if e["host"] is not None and fabric is not None:
            why = _host_problem(fabric, e["host"])
            if why:
                problems.append(Problem(file, f"expect[{i}].host", why))
        if e["min"] is not None and e["max"] is not None and e["min"] > e["max"]:
            problems.append(
                Problem(
                    file, f"expect[{i}].min", f"expected min <= max, got min {e['min']:g} > max {e['max']:g}"
                )
            )
    return problems


def job_problems(
    file: str, raws: list, jobs: list, duration: float, fabric: Fabric, has_queues: bool = False
) -> list[Problem]:
    problems, seen = [], set()
    for i, (_raw, j) in enumerate(zip(raws, jobs)):
        here = f"jobs[{i}]"
        if j.name in seen:
            problems.append(Problem(file, f"{here}.name", f"job name {j.name!r} is used twice"))
        seen.add(j.name)
        bad_host = False
        for k, h in enumerate(j.hosts):
            why = _host_problem(fabric, h)
            if why:
                problems.append(Problem(file, f"{here}.hosts[{k}]", why))
                bad_host = True
        n = len(j.hosts)
        if j.bytes > MAX_JOB_BYTES:
            problems.append(
                Problem(
                    file,
                    f"{here}.bytes",
                    f"expected at most {MAX_JOB_BYTES} bytes "
                    f"per iteration after scaling by {fabric.scale:g}, got {j.bytes}",
                )
            )
        if j.compute_s > MAX_DURATION_S:
            problems.append(
                Problem(
                    file,
                    f"{here}.compute",
                    f"expected at most {seconds(MAX_DURATION_S)}, got {seconds(j.compute_s)}",
                )
            )
        if j.start >= duration:
            problems.append(
                Problem(
                    file,
                    f"{here}.start",
                    f"expected a start before the end of the "
                    f"run ({seconds(duration)}), got {seconds(j.start)}",
                )
            )
        if j.collective == "halving-doubling" and n & (n - 1):
            problems.append(
                Problem(
                    file, f"{here}.hosts", f"halving-doubling needs a power-of-two number of ranks, got {n}"
                )
            )
        if j.bytes < n:
            problems.append(
                Problem(
                    file,
                    f"{here}.bytes",
                    f"expected at least one byte per rank after "
                    f"scaling by {fabric.scale:g}, got {j.bytes} bytes for {n} ranks",
                )
            )
        if j.groups is not None and not bad_host:
            flat = [h for g in j.groups for h in g]
            if sorted(flat) != sorted(j.hosts) or len(flat) != len(set(flat)):
                problems.append(
                    Problem(
                        file,
                        f"{here}.groups",
                        "expected groups that split the job's hosts, each host in exactly one group",
                    )
                )
        if j.port is not None and not bad_host:
            ports = min(len(fabric.nics_of(h)[0].ports) for h in j.hosts)
            if j.port >= ports:
                problems.append(
                    Problem(
                        file,
                        f"{here}.port",
                        f"expected a NIC port below {ports} "
                        f"(the job's hosts have {ports} port(s) per NIC), got {j.port}",
                    )
                )
        if j.priority == "crux" and not has_queues:
            problems.append(
                Problem(
                    file,
                    f"{here}.priority",
                    "crux priorities are compressed into "
                    "the scenario's queue classes: add queues, or drop priority",
                )
            )
        if j.groups is not None and j.collective != "hierarchical":
            problems.append(
                Problem(
                    file,
                    f"{here}.groups",
                    f"groups apply to the hierarchical collective only, not {j.collective}",
                )
            )
    return problems


def capture_problems(file: str, capture: dict, fabric: Fabric) -> list[Problem]:
    problems = []
    for k, h in enumerate(capture["hosts"]):
        why = _host_problem(fabric, h)
        if why:
            problems.append(Problem(file, f"capture.hosts[{k}]", why))
    return problems


def transport_problems(file: str, raw: dict | None) -> list[Problem]:
    """The agents' timers in range (bounds.py); then DCQCN's alpha, which
    decays once per alpha period without a CNP: if the period is shorter
    than the receivers' CNP interval, alpha decays between the CNPs of a
    flow that is congested all along."""
    out_of_range = bounds.transport_problems(file, raw)
    if out_of_range:
        return out_of_range
    dcqcn = (raw or {}).get("dcqcn") or {}
    alpha = parse_time(dcqcn.get("alpha_period", "5ms"))
    cnp = parse_time(dcqcn.get("cnp_interval", "4ms"))
    if alpha <= cnp:
        return [
            Problem(
                file,
                "transport.dcqcn.alpha_period",
                f"expected an alpha period longer than "
                f"the CNP interval ({seconds(cnp)}), got {seconds(alpha)}",
            )
        ]
    return []


def queue_problems(file: str, raw: dict | None, fabric: Fabric | None) -> list[Problem]:
    """Class names unique, each DSCP in one class at most, overrides naming
    classes that exist, and on every port a buffer of at least two frames
    with ECN thresholds inside it."""
    if raw is None or fabric is None:
        return []
    problems = []
    names = [c["name"] for c in raw["classes"]]
    owner: dict = {}
    for i, c in enumerate(raw["classes"]):
        here = f"queues.classes[{i}]"
        if names.index(c["name"]) != i:
            problems.append(
                Problem(file, f"{here}.name", f"expected a name no other class has, got {c['name']!r} again")
            )
        for d in c.get("dscp", ()):
            if d in owner:
                problems.append(
                    Problem(
                        file,
                        f"{here}.dscp",
                        f"expected each DSCP in one class, got {d} here and in class {owner[d]!r}",
                    )
                )
            owner.setdefault(d, c["name"])
        ecn = c.get("ecn") or {}
        if ecn and ("k" in ecn) == ("min" in ecn or "max" in ecn):
            problems.append(
                Problem(file, f"{here}.ecn", "expected either k (a step) or min and max (a ramp)")
            )
        elif ecn and "k" not in ecn and not ("min" in ecn and "max" in ecn):
            problems.append(Problem(file, f"{here}.ecn", "expected both min and max"))
    for kind, by in (raw.get("ports") or {}).items():
        for name in by:
            if name not in names:
                problems.append(
                    Problem(
                        file,
                        f"queues.ports.{kind}.{name}",
                        f"expected one of the classes ({', '.join(names)}), got {name!r}",
                    )
                )
    if problems:
        return problems
    return _queue_size_problems(file, fabric, queues.profile_from(raw))


def _queue_size_problems(file, fabric, profile):
    frame = queues.frame_bytes(fabric.mtu)
    first = {}  # (class index, field) -> the first port that breaks it, and how
    for link in fabric.links:
        for end in (link.a, link.b):
            kind = queues.port_kind(fabric, link, end)
            for pc in queues.classes_at(dataclasses.replace(fabric, queues=profile), link, end):
                sizes = f"buffer {pc.limit} bytes"
                checks = [
                    (
                        "buffer",
                        pc.limit >= 2 * frame or (pc.lossless and not pc.limit),
                        f"at least 2 frames ({2 * frame} bytes)",
                        sizes,
                    ),
                    (
                        "buffer",
                        pc.limit <= MAX_CLASS_BUFFER_BYTES,
                        f"at most {MAX_CLASS_BUFFER_BYTES} bytes",
                        sizes,
                    ),
                ]
                if pc.ecn_mode == queues.ECN_STEP:
                    checks.append(
                        (
                            "ecn.k",
                            pc.k_low < pc.limit or not pc.limit,
                            "below the class buffer",
                            f"k {pc.k_low} bytes, {sizes}",
                        )
                    )
                elif pc.ecn_mode == queues.ECN_RED:
                    checks.append(
                        (
                            "ecn.max",
                            pc.k_low < pc.k_high <= (pc.limit or pc.k_high),
                            "min < max <= the class buffer",
                            f"min {pc.k_low}, max {pc.k_high} bytes, {sizes}",
                        )
                    )
                if pc.xoff or pc.headroom:
                    checks += [
                        ("pfc.xoff", frame <= pc.xoff, "a frame or more", f"xoff {pc.xoff} bytes"),
                        (
                            "pfc.xon",
                            0 <= pc.xon < pc.xoff,
                            "below xoff",
                            f"xon {pc.xon}, xoff {pc.xoff} bytes",
                        ),
                    ]
                if pc.lossless and link.delay_s > 0:
                    checks.append(
                        (
                            "pfc",
                            False,
                            "links without delay (a paused class cannot also be delayed here)",
                            f"a delay of {link.delay_s * 1e3:g} ms",
                        )
                    )
                for what, ok, wanted, got in checks:
                    if not ok:
                        first.setdefault((pc.index, what), (wanted, f"{got} on {end.ifname} (a {kind} port)"))
    return [
        Problem(file, f"queues.classes[{index}].{what}", f"expected {wanted} on every port, got {got}")
        for (index, what), (wanted, got) in sorted(first.items())
    ]
