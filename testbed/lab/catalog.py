"""The labs shipped in `labs/`, and each lab's checks file read and checked
(pure but for reading files).

A lab is a folder `labs/NN-topic/` holding `README.md` (the handout),
`starter/` (the files a student begins with, TODOs in them), `solution/`
(files that pass every check) and `checks.yaml`:

    title: Dual-ToR against single-ToR
    minutes: 25            # on a 2-core laptop, runs included
    checks:
      - name: the dual-ToR host rides through the failure
        run: dual.yaml     # a scenario among the student's files
        metric: max_silence_s
        host: s0h0
        max: 1.0
        weight: 2          # default 1
        hint: what to look at when it fails

A check is an expectation (the same metrics and bounds a scenario's
`expect` takes) on the results of one run, with a weight and a hint. It is
judged on what the run measured, never on what the student's file says.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.fabric.loader import load_yaml
from testbed.fabric.problems import ConfigError, Problem
from testbed.fabric.records import Expectation
from testbed.fabric.vocabulary import JOB_METRICS
from testbed.results.expectations import METRICS

from . import params
from .params import bound_problem

LABS_DIR = Path(__file__).resolve().parents[2] / "labs"
PLAIN_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\.ya?ml$")
CHECK_KEYS = {
    "name",
    "run",
    "metric",
    "host",
    "job",
    "class",
    "fault",
    "relative_to",
    "min",
    "max",
    "weight",
    "hint",
}


@dataclass(frozen=True)
class Check:
    expectation: Expectation
    run: str  # a scenario file among the student's files
    weight: float
    hint: str
    # min and max as written when one names a parameter (params.py): the
    # expectation then holds None there until resolved for a student
    bounds: tuple[tuple[str, Any], ...] = ()
    named: bool = True  # the file gave the check its name

    @property
    def parametric(self) -> bool:
        return any(params.is_parametric(v) for _, v in self.bounds)

    def resolved(self, values: dict[str, float]) -> Check:
        """This check with a student's numbers in its bounds."""
        if not self.parametric:
            return self
        bound = dict(self.bounds)
        e = self.expectation
        if "min" in bound:
            e = dataclasses.replace(e, min=params.resolve_bound(bound["min"], values))
        if "max" in bound:
            e = dataclasses.replace(e, max=params.resolve_bound(bound["max"], values))
        if not self.named:
            e = dataclasses.replace(e, name=e.default_name())
        return dataclasses.replace(self, expectation=e, bounds=())


@dataclass(frozen=True)
class Lab:
    number: int
    slug: str  # the folder's name, e.g. 01-dual-tor
    path: Path
    title: str
    minutes: int
    checks: tuple[Check, ...]
    parameters: tuple[params.Parameter, ...] = ()
    seed: str = ""

    def values(self, student: str) -> dict[str, float]:
        """The student's own numbers (none for a lab without parameters)."""
        return params.values_for(self.parameters, self.seed, self.slug, student)

    def for_student(self, student: str) -> Lab:
        """The lab with the student's numbers in its checks' bounds."""
        values = self.values(student)
        return dataclasses.replace(self, checks=tuple(c.resolved(values) for c in self.checks))

    @property
    def starter(self) -> Path:
        return self.path / "starter"

    @property
    def solution(self) -> Path:
        return self.path / "solution"

    @property
    def runs(self) -> list[str]:
        """The scenario files the checks judge, in the order they first appear."""
        return list(dict.fromkeys(c.run for c in self.checks))


def all_labs(root: Path = LABS_DIR) -> list[Lab]:
    """Every lab folder under `root`, by number."""
    if not root.is_dir():
        return []
    found = sorted(p for p in root.iterdir() if p.is_dir() and re.match(r"^\d\d-[a-z0-9-]+$", p.name))
    return [load_lab(p) for p in found]


def load_lab(path: Path, checks_file: str | None = None) -> Lab:
    """The lab in folder `path`; ConfigError naming the field on a bad
    checks file. `checks_file`: an instructor's own checks (the same
    format; title and minutes may be left out), judged instead of the
    lab's: checks students never see."""
    file = str(path / "checks.yaml")
    doc = _mapping(file)
    problems: list[Problem] = []
    title, minutes = doc.get("title"), doc.get("minutes")
    if not isinstance(title, str) or not title:
        problems.append(Problem(file, "title", "expected the lab's title"))
    if not isinstance(minutes, int) or isinstance(minutes, bool) or not 1 <= minutes <= 600:
        problems.append(Problem(file, "minutes", "expected whole minutes from 1 to 600"))
    if checks_file is not None:
        file, doc = checks_file, _mapping(checks_file)
    parameters, found = params.parameter_problems(doc.get("parameters"))
    problems += [Problem(file, field, why) for field, why in found]
    seed = doc.get("seed", "")
    if not isinstance(seed, str) or len(seed) > 200:
        problems.append(Problem(file, "seed", "expected text of at most 200 characters"))
    checks = _checks(file, doc.get("checks"), problems, parameters)
    if problems:
        raise ConfigError(problems)
    return Lab(
        int(path.name[:2]),
        path.name,
        path,
        str(title),
        int(minutes or 0),
        tuple(checks),
        parameters,
        str(seed),
    )


def _mapping(file: str) -> dict:
    doc = load_yaml(file)
    if not isinstance(doc, dict):
        raise ConfigError([Problem(file, "(top)", "expected a mapping with title, minutes and checks")])
    return doc


def _checks(file: str, raws, problems: list[Problem], parameters=()) -> list[Check]:
    """The checks of list `raws` from `file`; what is wrong goes to `problems`."""
    if not isinstance(raws, list) or not raws:
        problems.append(Problem(file, "checks", "expected a list of at least one check"))
        return []
    checks: list[Check] = []
    for i, raw in enumerate(raws):
        check, why = _check(raw, parameters)
        if check is None:
            problems.append(Problem(file, f"checks[{i}]", why or "expected a check"))
        else:
            checks.append(check)
    return checks


def find_lab(which: str, root: Path = LABS_DIR, checks_file: str | None = None) -> Lab:
    """The lab numbered or named `which` (1, 01 or 01-dual-tor), judged by
    `checks_file` when given (load_lab)."""
    for lab in all_labs(root):
        if which in (str(lab.number), f"{lab.number:02d}", lab.slug):
            return load_lab(lab.path, checks_file) if checks_file else lab
    names = ", ".join(lab.slug for lab in all_labs(root)) or "none"
    raise LookupError(f"no lab {which!r} (labs: {names})")


def _check(raw, parameters=()) -> tuple[Check | None, str | None]:
    """(the Check an entry describes, None) or (None, what is wrong)."""
    if not isinstance(raw, dict):
        return None, "expected a mapping"
    unknown = sorted(set(raw) - CHECK_KEYS)
    if unknown:
        return None, f"unknown field {unknown[0]!r}"
    run = raw.get("run")
    if not isinstance(run, str) or not PLAIN_FILE.match(run):
        return None, "expected run: a plain scenario file name such as dual.yaml"
    metric = raw.get("metric")
    if metric not in METRICS and metric not in JOB_METRICS:
        return None, f"unknown metric {metric!r}"
    for bound in ("min", "max"):
        why = bound_problem(raw[bound], parameters) if bound in raw else None
        if why:
            return None, f"{bound}: {why}"
    if "min" not in raw and "max" not in raw:
        return None, "expected min, max or both"
    weight = raw.get("weight", 1)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 < weight <= 100:
        return None, "expected a weight from above 0 to 100"
    hint = raw.get("hint", "")
    if not isinstance(hint, str):
        return None, "expected a hint as text"
    bounds = tuple((k, raw[k]) for k in ("min", "max") if k in raw and params.is_parametric(raw[k]))
    entry = {k: v for k, v in raw.items() if k not in ("run", "weight", "hint") and k not in dict(bounds)}
    expectation = Expectation.from_entry(entry) if len(bounds) < 2 or "name" in raw else None
    if expectation is None:  # both bounds wait for a student: no default name yet
        expectation = Expectation.from_entry({**entry, "name": raw["metric"]})
    return (
        Check(expectation, run, float(weight), hint.strip(), bounds, named="name" in raw),
        None,
    )


def student_file(folder: str, name: str) -> str:
    """The path of scenario `name` in the student's folder (a plain name:
    it cannot point anywhere else)."""
    if not PLAIN_FILE.match(name):
        raise ValueError(f"{name!r} is not a plain file name")
    return os.path.join(folder, name)
