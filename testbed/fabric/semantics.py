"""Checks that need the built fabric or the whole scenario. They run only
once the file's shape has passed the schema; each returns a list of
Problems. This module checks the run's length and what names hosts outside
the jobs (traffic, probes, captures), and the transport's timers; the rest
is checked beside it, one part of the scenario a module:

  semantics_timeline  faults and the controller timeline
  semantics_jobs      training jobs
  semantics_expect    expectations
  semantics_queues    queue classes, on every port they apply to

Each names a host through host_problem, below.
"""

from . import bounds
from .model import Fabric
from .problems import Problem, seconds, show
from .records import TrafficFlow
from .units import parse_time

# Bounds on the work a file may ask for (the schema bounds single numbers;
# these bound what they multiply into).
MAX_DURATION_S = 3600  # a drill, a compute phase
MAX_FLOWS = 1024  # iperf3 TCP streams in all (parallel x destinations)
MAX_PROBE_PPS = 10_000  # probe packets per second, all probes together


def duration_problems(file: str, raw: object, duration: float) -> list[Problem]:
    """A run of some seconds, at most MAX_DURATION_S; `raw` as written."""
    if duration <= 0:
        return [Problem(file, "duration", f"expected seconds > 0, got {show(raw)}")]
    if duration > MAX_DURATION_S:
        return [
            Problem(file, "duration", f"expected at most {seconds(MAX_DURATION_S)}, got {seconds(duration)}")
        ]
    return []


def after_the_end(file: str, field: str, what: str, at: float, duration: float) -> list[Problem]:
    """A problem when `what` (a start, a time) at `at` s is not before the
    end of the run, else none."""
    if at >= duration:
        return [
            Problem(
                file,
                field,
                f"expected {what} before the end of the run ({seconds(duration)}), got {seconds(at)}",
            )
        ]
    return []


def host_problem(fabric: Fabric, name: str) -> str | None:
    """Why `name` is not a host of `fabric`, or None if it is one."""
    node = fabric.nodes.get(name)
    if node is None:
        return f"host {name!r} is not in the topology ({_host_summary(fabric)})"
    if node.is_switch:
        return f"{name!r} is a switch ({node.kind}), expected a host ({_host_summary(fabric)})"
    return None


def _host_summary(fabric: Fabric) -> str:
    hosts = [n.name for n in fabric.hosts()]
    if len(hosts) <= 4:
        return "hosts: " + ", ".join(hosts)
    return f"hosts: {hosts[0]}..{hosts[-1]}"


def traffic_problems(
    file: str, raws: list, entries: list[TrafficFlow], duration: float, fabric: Fabric | None
) -> list[Problem]:
    """iperf3 streams within MAX_FLOWS, each starting inside the run, from
    a host to other hosts; `raws` as written, `entries` parsed."""
    problems = []
    # every rail counts as 16 (the most NICs a host has) until the
    # fabric is known, so that a file checked alone is never let through
    rails = [len(t.rails) if t.rails is not None else 16 for t in entries]
    if fabric is not None:
        rails = [len(t.rails_of(len(fabric.nics_of(t.src)))) or 1 for t in entries]
    flows = sum(t.parallel * len(t.dst) * r for t, r in zip(entries, rails))
    if flows > MAX_FLOWS:
        problems.append(
            Problem(
                file,
                "traffic",
                f"expected at most {MAX_FLOWS} iperf3 streams in all "
                f"(parallel x destinations x rails), got {flows}",
            )
        )
    for i, (raw, t) in enumerate(zip(raws, entries)):
        here = f"traffic[{i}]"
        problems += after_the_end(file, f"{here}.start", "a start", t.start, duration)
        if fabric is None:
            continue
        why = host_problem(fabric, t.src)
        if why:
            problems.append(Problem(file, f"{here}.src", why))
        for j, dst in enumerate(t.dst):
            where = f"{here}.dst[{j}]" if isinstance(raw["dst"], list) else f"{here}.dst"
            why = host_problem(fabric, dst)
            if why is None and dst == t.src:
                why = f"{dst!r} is also the source; expected a different host"
            if why:
                problems.append(Problem(file, where, why))
        problems += _rail_problems(file, here, t, fabric)
    return problems


def _rail_problems(file: str, here: str, t: TrafficFlow, fabric: Fabric) -> list[Problem]:
    """Each rail named is a NIC that the source and every destination have."""
    if t.rails is None:
        return []
    for host in (t.src, *t.dst):
        if host_problem(fabric, host) is not None:
            continue
        have = len(fabric.nics_of(host))
        for j, rail in enumerate(t.rails):
            if rail >= have:
                return [
                    Problem(
                        file,
                        f"{here}.rails[{j}]",
                        f"{host} has {have} NIC(s), rails 0..{have - 1}; got rail {rail}",
                    )
                ]
    return []


def probe_problems(file: str, probes: list, fabric: Fabric | None) -> list[Problem]:
    """Probes between two different hosts, each flow sending at least once
    a second, all of them within MAX_PROBE_PPS."""
    problems = []
    for i, p in enumerate(probes):
        here = f"probes[{i}]"
        if fabric is not None:
            for side in ("src", "dst"):
                why = host_problem(fabric, p[side])
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


def capture_problems(file: str, capture: dict, fabric: Fabric) -> list[Problem]:
    """The hosts to capture on are hosts of the fabric."""
    problems = []
    for k, h in enumerate(capture["hosts"]):
        why = host_problem(fabric, h)
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
