"""Semantic checks on a scenario's training jobs (see semantics.py): names
unique, hosts that exist, sizes and times in range, groups and NIC ports
that fit the hosts, and options that need something else in the file."""

from .model import Fabric
from .problems import Problem, seconds
from .records import Job
from .semantics import MAX_DURATION_S, after_the_end, host_problem

MAX_JOB_BYTES = 1_000_000_000  # one job's bytes per iteration after scaling


def job_problems(
    file: str, raws: list, jobs: list[Job], duration: float, fabric: Fabric, has_queues: bool = False
) -> list[Problem]:
    """Every problem of every job, each job's together in the order of the
    file; groups and ports are checked only on jobs whose hosts all exist."""
    problems, seen = [], set()
    for i, (_raw, j) in enumerate(zip(raws, jobs)):
        here = f"jobs[{i}]"
        if j.name in seen:
            problems.append(Problem(file, f"{here}.name", f"job name {j.name!r} is used twice"))
        seen.add(j.name)
        bad_hosts = _host_problems(file, here, j, fabric)
        problems += bad_hosts
        problems += _size_problems(file, here, j, duration, fabric)
        if not bad_hosts:
            problems += _layout_problems(file, here, j, fabric)
        problems += _option_problems(file, here, j, has_queues)
    return problems


def _host_problems(file: str, here: str, job: Job, fabric: Fabric) -> list[Problem]:
    problems = []
    for k, h in enumerate(job.hosts):
        why = host_problem(fabric, h)
        if why:
            problems.append(Problem(file, f"{here}.hosts[{k}]", why))
    return problems


def _size_problems(file: str, here: str, job: Job, duration: float, fabric: Fabric) -> list[Problem]:
    """Bytes, compute time and start in range; a rank count the collective takes."""
    problems = []
    n = len(job.hosts)
    if job.bytes > MAX_JOB_BYTES:
        problems.append(
            Problem(
                file,
                f"{here}.bytes",
                f"expected at most {MAX_JOB_BYTES} bytes "
                f"per iteration after scaling by {fabric.scale:g}, got {job.bytes}",
            )
        )
    if job.compute_s > MAX_DURATION_S:
        problems.append(
            Problem(
                file,
                f"{here}.compute",
                f"expected at most {seconds(MAX_DURATION_S)}, got {seconds(job.compute_s)}",
            )
        )
    problems += after_the_end(file, f"{here}.start", "a start", job.start, duration)
    if job.collective == "halving-doubling" and n & (n - 1):
        problems.append(
            Problem(file, f"{here}.hosts", f"halving-doubling needs a power-of-two number of ranks, got {n}")
        )
    if job.bytes < n:
        problems.append(
            Problem(
                file,
                f"{here}.bytes",
                f"expected at least one byte per rank after "
                f"scaling by {fabric.scale:g}, got {job.bytes} bytes for {n} ranks",
            )
        )
    return problems


def _layout_problems(file: str, here: str, job: Job, fabric: Fabric) -> list[Problem]:
    """Groups that split the job's hosts, and a NIC port every host has."""
    problems = []
    if job.groups is not None:
        flat = [h for g in job.groups for h in g]
        if sorted(flat) != sorted(job.hosts) or len(flat) != len(set(flat)):
            problems.append(
                Problem(
                    file,
                    f"{here}.groups",
                    "expected groups that split the job's hosts, each host in exactly one group",
                )
            )
    if job.port is not None:
        ports = min(len(fabric.nics_of(h)[0].ports) for h in job.hosts)
        if job.port >= ports:
            problems.append(
                Problem(
                    file,
                    f"{here}.port",
                    f"expected a NIC port below {ports} "
                    f"(the job's hosts have {ports} port(s) per NIC), got {job.port}",
                )
            )
    return problems


def _option_problems(file: str, here: str, job: Job, has_queues: bool) -> list[Problem]:
    """Options that need the rest of the file: crux priorities need queue
    classes, groups the hierarchical collective."""
    problems = []
    if job.priority == "crux" and not has_queues:
        problems.append(
            Problem(
                file,
                f"{here}.priority",
                "crux priorities are compressed into "
                "the scenario's queue classes: add queues, or drop priority",
            )
        )
    if job.groups is not None and job.collective != "hierarchical":
        problems.append(
            Problem(
                file,
                f"{here}.groups",
                f"groups apply to the hierarchical collective only, not {job.collective}",
            )
        )
    return problems
