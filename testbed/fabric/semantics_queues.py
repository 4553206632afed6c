"""Semantic checks on a scenario's queue classes (see semantics.py): what
the classes declare is consistent, and on every port of the fabric each
class gets a buffer, ECN thresholds and PFC thresholds that fit."""

import dataclasses

from . import queues
from .model import Fabric, Link
from .problems import Problem

# A class's FIFO limit is a 32-bit byte count in tc; a GiB is minutes of
# queue at the rates emulated (215 s at 40 Mbit/s).
MAX_CLASS_BUFFER_BYTES = 1 << 30


def queue_problems(file: str, raw: dict | None, fabric: Fabric | None) -> list[Problem]:
    """Class names unique, each DSCP in one class at most, overrides naming
    classes that exist, and on every port a buffer of at least two frames
    with ECN thresholds inside it."""
    if raw is None or fabric is None:
        return []
    names = [c["name"] for c in raw["classes"]]
    problems = _class_problems(file, raw["classes"], names) + _override_problems(file, raw, names)
    if problems:
        return problems
    return _queue_size_problems(file, fabric, queues.profile_from(raw))


def _class_problems(file: str, classes: list[dict], names: list[str]) -> list[Problem]:
    """Names unique, each DSCP in one class, ECN a step or a ramp."""
    problems = []
    owner: dict = {}
    for i, c in enumerate(classes):
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
    return problems


def _override_problems(file: str, raw: dict, names: list[str]) -> list[Problem]:
    """Per-port-kind overrides name classes that exist."""
    return [
        Problem(
            file,
            f"queues.ports.{kind}.{name}",
            f"expected one of the classes ({', '.join(names)}), got {name!r}",
        )
        for kind, by in (raw.get("ports") or {}).items()
        for name in by
        if name not in names
    ]


def _queue_size_problems(file: str, fabric: Fabric, profile: queues.QueueProfile) -> list[Problem]:
    """The first port that breaks each class's sizes, per field."""
    frame = queues.frame_bytes(fabric.mtu)
    with_queues = dataclasses.replace(fabric, queues=profile)
    first: dict = {}  # (class index, field) -> the first port that breaks it, and how
    for link in fabric.links:
        for end in (link.a, link.b):
            kind = queues.port_kind(fabric, link, end)
            for pc in queues.classes_at(with_queues, link, end):
                for what, ok, wanted, got in _port_class_checks(pc, link, frame):
                    if not ok:
                        first.setdefault((pc.index, what), (wanted, f"{got} on {end.ifname} (a {kind} port)"))
    return [
        Problem(file, f"queues.classes[{index}].{what}", f"expected {wanted} on every port, got {got}")
        for (index, what), (wanted, got) in sorted(first.items())
    ]


def _port_class_checks(pc: queues.PortClass, link: Link, frame: int) -> list[tuple[str, bool, str, str]]:
    """(field, holds, what was expected, what was found) for one class on
    one port: its buffer, its ECN thresholds and its PFC thresholds."""
    sizes = f"buffer {pc.limit} bytes"
    checks = [
        (
            "buffer",
            pc.limit >= 2 * frame or (pc.lossless and not pc.limit),
            f"at least 2 frames ({2 * frame} bytes)",
            sizes,
        ),
        ("buffer", pc.limit <= MAX_CLASS_BUFFER_BYTES, f"at most {MAX_CLASS_BUFFER_BYTES} bytes", sizes),
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
            ("pfc.xon", 0 <= pc.xon < pc.xoff, "below xoff", f"xon {pc.xon}, xoff {pc.xoff} bytes"),
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
    return checks
