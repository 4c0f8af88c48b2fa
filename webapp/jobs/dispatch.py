"""What the jobs app asks of the apps above it, which it does not import.

`job_energy_wanted`: the job page asks for a job's energy (sent with `job`, `allocations` and
`now`); the energy app answers with its one reading of a job's energy
(`webapp.energy.job_energy.job_energy`), connected when it loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from django.dispatch import Signal

from webapp.jobs.models import Job

job_energy_wanted = Signal()


class AllocationEnergy(Protocol):
    """One allocation's share of a job's energy, as the job page lists it."""

    allocation: object  # the selectors' AllocationRow
    resets: int

    @property
    def kwh(self) -> float: ...


class JobEnergyAnswer(Protocol):
    """A job's energy as the job page shows it: the total, the method in one line and the
    share of each allocation."""

    method: str

    @property
    def kwh(self) -> float: ...

    @property
    def per_gpu(self) -> Sequence[AllocationEnergy]: ...


def job_energy_asked(job: Job, allocations: list, now: datetime) -> JobEnergyAnswer | None:
    """The job's energy from the first receiver that answers (None: no app answers)."""
    sent = job_energy_wanted.send(sender=Job, job=job, allocations=allocations, now=now)
    return next((answer for _receiver, answer in sent if answer is not None), None)
