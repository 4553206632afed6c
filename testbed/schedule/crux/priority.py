"""Crux's step 2, priority assignment: each job's priority is
P_j = k_j * I_j, its GPU intensity on the chosen paths corrected by a factor
k_j for how much it actually suffers from waiting (a job whose traffic
hides behind its own computation hardly suffers at all). k_j is measured
against a reference job (k = 1) with the shared-link model.

Apart from the model (shared_link.py) because this is where Crux's
argument lives: which job should transmit first, and why the ratio of
waiting losses is the right correction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import Bandwidth, Job, Path, communication_time, validate_jobs
from .shared_link import Periodic, utilization

# Bounds on the correction factor k: a job that never suffers from waiting
# keeps a sliver of its intensity so that such jobs still order among
# themselves, and one that suffers while the reference never does still gets a
# finite priority.
FACTOR_FLOOR = 0.01
FACTOR_CEILING = 100.0

# Losses of utilization below this are simulation noise, not a preference.
_NEGLIGIBLE_LOSS = 1e-9


def waiting_loss(share_when_first: float, share_when_second: float) -> float:
    """Utilization a job loses by transmitting second instead of first
    (never below zero)."""
    return max(share_when_first - share_when_second, 0.0)


def factor_from_losses(
    job_loss: float, job_intensity: float, reference_loss: float, reference_intensity: float
) -> float:
    """k_j from the two jobs' losses: (L_j / I_j) / (L_r / I_r), bounded to
    [FACTOR_FLOOR, FACTOR_CEILING]; 1 when neither job loses anything."""
    if reference_loss <= _NEGLIGIBLE_LOSS:
        return 1.0 if job_loss <= _NEGLIGIBLE_LOSS else FACTOR_CEILING
    factor = (job_loss / job_intensity) / (reference_loss / reference_intensity)
    return min(max(factor, FACTOR_FLOOR), FACTOR_CEILING)


def priority_factor(job: Periodic, reference: Periodic) -> float:
    """k_j for `job` against `reference` (both Periodic), such that equal
    priorities k_j * I_j = k_r * I_r (k_r = 1) mean both orders on a shared
    link give the same combined utilization.

    Derivation: let U_x^1 and U_x^2 be job x's utilization when it transmits
    first and second, and L_x = U_x^1 - U_x^2 what waiting costs it. Combined
    utilization is the mean of the two jobs, so putting j before r instead of
    after changes it by ((U_j^1 + U_r^2) - (U_r^1 + U_j^2)) / 2 = (L_j - L_r) / 2:
    the job that loses more should go first, and the orders tie exactly when
    L_j = L_r. Priorities rank the same way and tie at the same point when
    P_j / P_r = L_j / L_r, i.e. k_j * I_j / I_r = L_j / L_r, so
    k_j = (L_j / I_j) / (L_r / I_r).

    Example (no overlap): j computes 1 s and sends 1 s, r computes 2 s and
    sends 2 s (equal intensity). r first: U_r = 1/2, U_j = 1/4 (combined
    37.5%); j first: U_j = 1/2, U_r = 1/3 (combined 41.7%). L_j = 1/4,
    L_r = 1/6, so k_j = 1.5. A job whose traffic hides behind its own
    computation loses little by waiting, so its k is small."""
    job_first = utilization(job, reference)
    reference_first = utilization(reference, job)
    job_loss = waiting_loss(job_first.first, reference_first.second)
    reference_loss = waiting_loss(reference_first.first, job_first.second)
    return factor_from_losses(job_loss, job.intensity, reference_loss, reference.intensity)


@dataclass(frozen=True)
class Priority:
    """Step 2's result for one job: intensity on its chosen paths, the
    correction factor k and the priority P = k * I."""

    intensity: float
    factor: float
    value: float


def reference_job(jobs: Sequence[Job]) -> Job:
    """The job with the most traffic per iteration (k = 1); ties by name."""
    return min(jobs, key=lambda job: (-job.total_bytes, job.name))


def as_periodic(job: Job, chosen: dict[str, Path], bandwidth: Bandwidth) -> Periodic:
    """The job as its busiest link sees it, with flows on `chosen`."""
    return Periodic(job.compute_s, communication_time(job, chosen, bandwidth), job.overlap)


def assign_priorities(jobs: Sequence[Job], chosen: dict, bandwidth: Bandwidth) -> dict:
    """{job name: Priority}: each job's intensity on its chosen paths
    (`chosen` is {job name: {flow name: path}}), corrected by the factor k
    measured against the reference job."""
    if not jobs:
        return {}
    validate_jobs(jobs, bandwidth)
    for job in jobs:
        if job.name not in chosen:
            raise ValueError(f"job {job.name!r}: no paths chosen; expected an entry per job")
    reference = reference_job(jobs)
    reference_spec = as_periodic(reference, chosen[reference.name], bandwidth)
    priorities = {}
    for job in jobs:
        spec = as_periodic(job, chosen[job.name], bandwidth)
        factor = 1.0 if job is reference else priority_factor(spec, reference_spec)
        priorities[job.name] = Priority(spec.intensity, factor, factor * spec.intensity)
    return priorities
