"""A student's own numbers (pure): a lab may give each student different
values (a job's size, a threshold), so that a neighbour's files, copied,
measure the neighbour's numbers and fail the copier's checks.

In checks.yaml:

    seed: spring-term       # optional; an instructor's copy may change it
    parameters:
      s_gb: {choices: [3, 4, 5, 6]}
    checks:
      - run: collectives.yaml
        metric: bytes_per_rank
        job: ring
        min: {param: s_gb, times: 349650}   # 0.999 x 2(N-1)/N x S / scale
        max: {param: s_gb, times: 350350}

A student's value of each parameter is drawn from its choices by a hash of
the seed, the lab, the parameter and the student's id: the same every
time, different between most neighbours, and nothing to store. The
starter's and the solution's files carry `{{s_gb}}` where the value goes;
`hpnlab lab start --student ID` writes it in.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any

NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
PLACEHOLDER = re.compile(r"\{\{\s*([a-z][a-z0-9_]{0,31})\s*\}\}")
# A student's id names their numbers and, at grading, their folder: plain
# characters only (it is printed and written into files).
STUDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
MAX_CHOICES = 100
BOUND_KEYS = {"param", "times", "plus"}


@dataclass(frozen=True)
class Parameter:
    name: str
    choices: tuple[float, ...]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parameter_problems(raw: Any) -> tuple[tuple[Parameter, ...], list[tuple[str, str]]]:
    """(the parameters of a checks file's `parameters:` entry, [(field,
    what is wrong)])."""
    if raw is None:
        return (), []
    if not isinstance(raw, dict):
        return (), [("parameters", "expected a mapping of names to {choices: [numbers]}")]
    params, problems = [], []
    for name, spec in raw.items():
        here = f"parameters.{name}"
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(
                ("parameters", f"expected names of lower-case letters, digits and _, got {name!r}")
            )
            continue
        choices = spec.get("choices") if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or set(spec) != {"choices"}:
            problems.append((here, "expected {choices: [numbers]}"))
        elif not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES:
            problems.append((here + ".choices", f"expected a list of 2 to {MAX_CHOICES} numbers"))
        elif not all(_number(c) for c in choices) or len(set(choices)) != len(choices):
            problems.append((here + ".choices", "expected distinct numbers"))
        else:
            params.append(Parameter(name, tuple(float(c) for c in choices)))
    return tuple(params), problems


def bound_problem(raw: Any, params: tuple[Parameter, ...]) -> str | None:
    """What is wrong with a check's `min` or `max`: a number, or
    {param: NAME, times: NUMBER, plus: NUMBER}; None when it is right."""
    if _number(raw):
        return None
    if not isinstance(raw, dict):
        return "expected a number or {param: NAME, times: N, plus: N}"
    if set(raw) - BOUND_KEYS or "param" not in raw:
        return "expected {param: NAME, times: N, plus: N} (times and plus optional)"
    names = [p.name for p in params]
    if raw["param"] not in names:
        return f"no parameter {raw['param']!r} (parameters: {', '.join(names) or 'none'})"
    if not all(_number(raw.get(k, 0)) for k in ("times", "plus")):
        return "expected numbers for times and plus"
    return None


def is_parametric(raw: Any) -> bool:
    return isinstance(raw, dict)


def resolve_bound(raw: Any, values: dict[str, float]) -> float | None:
    """A bound as a number for a student with `values`."""
    if raw is None or not is_parametric(raw):
        return raw
    return values[raw["param"]] * raw.get("times", 1) + raw.get("plus", 0)


def values_for(params: tuple[Parameter, ...], seed: str, lab: str, student: str) -> dict[str, float]:
    """The student's value of each parameter: one of its choices, picked by
    a hash (the same every time for the same seed, lab and student)."""
    out = {}
    for p in params:
        digest = hashlib.sha256("\0".join((seed, lab, p.name, student)).encode()).digest()
        out[p.name] = p.choices[int.from_bytes(digest[:8], "big") % len(p.choices)]
    return out


def fill(text: str, values: dict[str, float]) -> str:
    """`text` with each {{name}} of a parameter replaced by the value; other
    braces are left as written."""
    return PLACEHOLDER.sub(lambda m: f"{values[m.group(1)]:g}" if m.group(1) in values else m.group(0), text)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def describe(values: dict[str, float]) -> str:
    return ", ".join(f"{k} = {v:g}" for k, v in values.items())
