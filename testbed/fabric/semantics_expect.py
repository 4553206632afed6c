"""Semantic checks on a scenario's expectations (see semantics.py): each
names what its metric is measured on (a job, a queue class, a named fault,
a host, or nothing), that thing exists in the scenario, and min <= max."""

from collections.abc import Collection

from .model import Fabric
from .problems import Problem
from .records import Expectation
from .semantics import host_problem
from .units import is_percent
from .vocabulary import CLASS_METRICS, JOB_METRICS, RATIO_METRICS, time_unit


def expect_problems(
    file: str,
    expect: list[Expectation],
    fabric: Fabric | None,
    job_names: Collection[str] = frozenset(),
    class_names: list[str] | None = None,
    fault_names: Collection[str] = frozenset(),
    has_probes: bool = False,
) -> list[Problem]:
    """`class_names`: the scenario's queue classes (None: it has no queues);
    `fault_names`: the names the faults carry."""
    problems = []
    for i, e in enumerate(expect):
        cls = e.queue_class
        if e.metric == "gap_ms" or e.fault is not None:
            problems += _gap_expect_problems(file, i, e, fault_names, has_probes)
        elif e.metric in CLASS_METRICS or cls is not None:
            problems += _class_expect_problems(file, i, e, cls, class_names)
        else:
            problems += _job_expect_problems(file, i, e, job_names)
        problems += _host_and_range_problems(file, i, e, fabric)
    return problems


def _gap_expect_problems(
    file: str, i: int, e: Expectation, fault_names: Collection[str], has_probes: bool
) -> list[Problem]:
    here = f"expect[{i}]"
    if e.metric != "gap_ms":
        return [Problem(file, f"{here}.fault", f"metric {e.metric} is not measured per fault: drop fault")]
    if not has_probes:
        return [Problem(file, f"{here}.metric", "gap_ms is measured by probes: add probes")]
    if e.fault is None:
        return [Problem(file, f"{here}.fault", "gap_ms is measured per named fault: name the fault")]
    if e.fault not in fault_names:
        return [
            Problem(
                file,
                f"{here}.fault",
                f"no fault is named {e.fault!r} (named faults: {', '.join(sorted(fault_names)) or 'none'})",
            )
        ]
    if e.job is not None or e.host is not None or e.queue_class is not None:
        return [Problem(file, f"{here}.fault", "a gap covers every probe: drop host, job and class")]
    return []


def _class_expect_problems(
    file: str, i: int, e: Expectation, cls: str | None, class_names: list[str] | None
) -> list[Problem]:
    here = f"expect[{i}]"
    if e.metric not in CLASS_METRICS:
        return [
            Problem(
                file,
                f"{here}.class",
                f"metric {e.metric} is not measured per queue "
                f"class (those are {', '.join(CLASS_METRICS)}): drop class",
            )
        ]
    if cls is None:
        return [
            Problem(file, f"{here}.class", f"metric {e.metric} is measured per queue class: name the class")
        ]
    if class_names is None:
        return [Problem(file, f"{here}.class", "the scenario declares no queues: add queues.classes")]
    if cls not in class_names:
        return [
            Problem(
                file, f"{here}.class", f"expected one of the classes ({', '.join(class_names)}), got {cls!r}"
            )
        ]
    if e.job is not None or e.host is not None or e.relative_to is not None:
        return [
            Problem(file, f"{here}.class", "a class metric covers every port: drop host, job and relative_to")
        ]
    return []


def _job_expect_problems(file: str, i: int, e: Expectation, job_names: Collection[str]) -> list[Problem]:
    """The jobs an expectation on flows, links or jobs names: at most the
    first thing wrong with them."""
    here = f"expect[{i}]"
    jobs = ", ".join(sorted(job_names)) or "none"
    if e.job is not None and e.host is not None:
        return [Problem(file, f"{here}.job", "expected either host or job, got both")]
    if e.job is not None and e.job not in job_names:
        return [Problem(file, f"{here}.job", f"job {e.job!r} is not in this scenario (jobs: {jobs})")]
    if e.relative_to is not None and e.relative_to not in job_names:
        return [
            Problem(
                file,
                f"{here}.relative_to",
                f"job {e.relative_to!r} is not in this scenario (jobs: {jobs})",
            )
        ]
    if e.relative_to is not None and e.job is None:
        return [Problem(file, f"{here}.relative_to", "a comparison needs the job to compare: name it in job")]
    if e.metric not in JOB_METRICS and (e.job is not None or e.relative_to):
        return [
            Problem(
                file,
                f"{here}.job",
                f"metric {e.metric} is measured on flows and links, not per job: drop job/relative_to",
            )
        ]
    if e.metric == "fidelity" and e.host is not None:
        return [Problem(file, f"{here}.host", "fidelity is measured per link for the whole run: drop host")]
    if e.metric in JOB_METRICS and e.job is None:
        return [Problem(file, f"{here}.job", f"metric {e.metric} is measured per job: name the job")]
    return []


def _host_and_range_problems(file: str, i: int, e: Expectation, fabric: Fabric | None) -> list[Problem]:
    """The host named is one of the fabric's; min <= max."""
    problems = []
    if e.host is not None and fabric is not None:
        why = host_problem(fabric, e.host)
        if why:
            problems.append(Problem(file, f"expect[{i}].host", why))
    if e.min is not None and e.max is not None and e.min > e.max:
        problems.append(
            Problem(file, f"expect[{i}].min", f"expected min <= max, got min {e.min:g} > max {e.max:g}")
        )
    return problems


def bound_spelling_problems(file: str, raw_expect: list[dict]) -> list[Problem]:
    """A percentage bounds only a ratio (a ratio metric, or any metric with
    relative_to) and a duration only a time: '45%' of a byte count, or
    '2s' of a ratio, is a slip the file is refused for, not a number to guess."""
    problems = []
    for i, raw in enumerate(raw_expect):
        metric, relative = raw["metric"], raw.get("relative_to") is not None
        for side in ("min", "max"):
            value = raw.get(side)
            if not isinstance(value, str):
                continue
            if is_percent(value):
                if metric not in RATIO_METRICS and not relative:
                    problems.append(
                        Problem(
                            file,
                            f"expect[{i}].{side}",
                            f"a percentage bounds a ratio and {metric} is not one: "
                            f"expected a number, got {value!r}",
                        )
                    )
            elif time_unit(metric) is None or relative:
                problems.append(
                    Problem(
                        file,
                        f"expect[{i}].{side}",
                        f"a duration bounds a time and {metric}{' relative to a job' if relative else ''} "
                        f"is not one: expected a number, got {value!r}",
                    )
                )
    return problems
