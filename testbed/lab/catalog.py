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

import os
import re
from dataclasses import dataclass
from pathlib import Path

from testbed.fabric.loader import load_yaml
from testbed.fabric.problems import ConfigError, Problem
from testbed.fabric.records import Expectation
from testbed.fabric.vocabulary import JOB_METRICS
from testbed.results.expectations import METRICS

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


@dataclass(frozen=True)
class Lab:
    number: int
    slug: str  # the folder's name, e.g. 01-dual-tor
    path: Path
    title: str
    minutes: int
    checks: tuple[Check, ...]

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
    checks = _checks(file, doc.get("checks"), problems)
    if problems:
        raise ConfigError(problems)
    return Lab(int(path.name[:2]), path.name, path, str(title), int(minutes or 0), tuple(checks))


def _mapping(file: str) -> dict:
    doc = load_yaml(file)
    if not isinstance(doc, dict):
        raise ConfigError([Problem(file, "(top)", "expected a mapping with title, minutes and checks")])
    return doc


def _checks(file: str, raws, problems: list[Problem]) -> list[Check]:
    """The checks of list `raws` from `file`; what is wrong goes to `problems`."""
    if not isinstance(raws, list) or not raws:
        problems.append(Problem(file, "checks", "expected a list of at least one check"))
        return []
    checks: list[Check] = []
    for i, raw in enumerate(raws):
        check, why = _check(raw)
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


def _check(raw) -> tuple[Check | None, str | None]:
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
        if bound in raw and (not isinstance(raw[bound], (int, float)) or isinstance(raw[bound], bool)):
            return None, f"expected a number for {bound}"
    if "min" not in raw and "max" not in raw:
        return None, "expected min, max or both"
    weight = raw.get("weight", 1)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 < weight <= 100:
        return None, "expected a weight from above 0 to 100"
    hint = raw.get("hint", "")
    if not isinstance(hint, str):
        return None, "expected a hint as text"
    entry = {k: v for k, v in raw.items() if k not in ("run", "weight", "hint")}
    return Check(Expectation.from_entry(entry), run, float(weight), hint.strip()), None


def student_file(folder: str, name: str) -> str:
    """The path of scenario `name` in the student's folder (a plain name:
    it cannot point anywhere else)."""
    if not PLAIN_FILE.match(name):
        raise ValueError(f"{name!r} is not a plain file name")
    return os.path.join(folder, name)
