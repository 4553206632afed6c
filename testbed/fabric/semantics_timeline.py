"""Semantic checks on a scenario's timeline (see semantics.py): each fault
strikes a link that exists, before the end of the run, takes a link down
only while it is up and up only while it is down, restores only a degraded
link's rate, and faults that share a name happen together; the controller stops only while it runs and starts
only while it is stopped."""

import re

from .model import Fabric
from .problems import Problem, count, seconds
from .records import Fault
from .semantics import after_the_end


def fault_problems(file: str, faults: list[Fault], duration: float, fabric: Fabric | None) -> list[Problem]:
    """Every problem of the faults, each fault's together in the order of the file."""
    problems, valid = [], []
    for i, f in _numbered(faults):
        here = f"faults[{i}]"
        problems += after_the_end(file, f"{here}.at", "a time", f.at, duration)
        link_problems = [] if fabric is None else _link_problems(file, here, f, fabric)
        problems += link_problems
        if not link_problems:
            valid.append((i, f))
    # Stable sort: each fault's problems together, in the order of the file;
    # an entry that made several faults (a flap, a switch) says each once.
    found = problems + _sequence_problems(file, valid) + _fault_name_problems(file, faults)
    return sorted(dict.fromkeys(found), key=lambda p: _fault_number(p.field))


def controller_timeline_problems(file: str, timeline: list, duration: float) -> list[Problem]:
    """Each entry inside the run; the controller stops only while running
    and starts only while stopped (it runs when the drill begins)."""
    problems = []
    running = True
    for i, e in sorted(enumerate(timeline), key=lambda item: item[1]["at"]):
        here = f"controller_timeline[{i}]"
        problems += after_the_end(file, f"{here}.at", "a time", e["at"], duration)
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
    a, b = fault.link
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
    if fault.index >= len(links):
        return [
            Problem(
                file,
                f"{here}.index",
                f"expected an index below {len(links)} ({a} and {b} share "
                f"{count(len(links), 'link')}), got {fault.index}",
            )
        ]
    return []


def _sequence_problems(file, faults):
    """A link goes down before it comes up, and goes down only while up."""
    down_since = {}  # (frozenset of ends, index) -> (time, fault number)
    degraded = set()  # (frozenset of ends, index) of the links at a cut rate
    problems = []
    for i, f in sorted(faults, key=lambda item: item[1].at):
        key = (frozenset(f.link), f.index)
        name = "-".join(f.link) + (f" #{f.index}" if f.index else "")
        if f.action == "link-degrade":  # again on a degraded link: its new rate
            degraded.add(key)
        elif f.action == "link-restore":
            if key in degraded:
                degraded.discard(key)
            else:
                problems.append(
                    Problem(
                        file,
                        f"faults[{i}].action",
                        f"link {name} is not degraded at {seconds(f.at)}; "
                        "expected a link-degrade of it earlier",
                    )
                )
        elif f.action == "link-down":
            if key in down_since:
                t, j = down_since[key]
                problems.append(
                    Problem(
                        file,
                        f"faults[{i}].action",
                        f"link {name} is already down at {seconds(f.at)} "
                        f"(since {seconds(t)}, faults[{j}]); expected a link-up first",
                    )
                )
            else:
                down_since[key] = (f.at, i)
        elif key in down_since:
            del down_since[key]
        else:
            problems.append(
                Problem(
                    file,
                    f"faults[{i}].action",
                    f"link {name} is not down at {seconds(f.at)}; expected a link-down of it earlier",
                )
            )
    return problems


def _fault_number(field):
    return int(re.search(r"\[(\d+)\]", field).group(1))


def _numbered(faults):
    """(the number of the file's entry it comes from, fault) of each fault."""
    return [(i if f.source is None else f.source, f) for i, f in enumerate(faults)]


def _fault_name_problems(file, faults):
    """Faults that share a name happen together (a switch failing takes all
    its links): the same time and the same action."""
    first = {}
    problems = []
    for i, f in _numbered(faults):
        name = f.name
        if not name:
            continue
        if name not in first:
            first[name] = (i, f)
            continue
        j, g = first[name]
        if (f.at, f.action) != (g.at, g.action):
            problems.append(
                Problem(
                    file,
                    f"faults[{i}].name",
                    f"name {name!r} is taken by faults[{j}] "
                    f"({g.action} at {seconds(g.at)}); faults that share a name "
                    "must share at and action",
                )
            )
    return problems
