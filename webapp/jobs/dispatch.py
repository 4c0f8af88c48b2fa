"""What the jobs app asks of the apps above it, which it does not import.

`job_energy_wanted`: the job page asks for a job's energy (sent with `job`, `allocations` and
`now`); the energy app answers with its one reading of a job's energy
(`webapp.energy.job_energy.job_energy`), connected when it loads.

`job_incident_wanted`: the job page asks what happened to a job beyond its scheduler events
(sent with `job`): its failures, their diagnoses, the GPU errors behind them and the recovery
actions taken, each a `TimelineEntry` linking its own page. The pages app answers
(`webapp.pages.job_incident`), since failures and recovery both sit above jobs.

`eval_phases_wanted`: the characterization asks for its evaluation jobs' GPU time by phase
(sent with `window`); the evaluation app answers (`webapp.evaluation.phases.eval_phases`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.dispatch import Signal

from webapp.core.windows import Window
from webapp.jobs.models import Job

job_energy_wanted = Signal()
job_incident_wanted = Signal()
eval_phases_wanted = Signal()


@dataclass(frozen=True)
class TimelineEntry:
    """One line of a job's timeline: when, what kind of step ("run", "failure", "diagnosis",
    "gpu_error", "action"), its title and detail in words, the page it links (url), a status
    word (the action's status, "failed", "running"), and further links as (text, url) pairs
    (the blamed GPU's page)."""

    ts: datetime
    kind: str
    title: str
    detail: str = ""
    url: str = ""
    status: str = ""
    links: tuple[tuple[str, str], ...] = ()

    @property
    def kind_label(self) -> str:
        return STEP_LABELS.get(self.kind, self.kind)


STEP_LABELS = {
    "run": "Run",
    "failure": "Failure",
    "diagnosis": "Diagnosis",
    "gpu_error": "GPU error",
    "action": "Recovery action",
}


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


def job_incident_asked(job: Job) -> list[TimelineEntry]:
    """Every receiver's timeline entries for the job (none: no app answers)."""
    sent = job_incident_wanted.send(sender=Job, job=job)
    return [entry for _receiver, answer in sent for entry in answer or ()]


class EvalPhasesAnswer(Protocol):
    """Evaluation jobs' GPU time by phase as the characterization page shows it."""

    jobs: int
    allocations: int
    limited: bool
    from_rollup: int
    share: dict[str, float | None]

    @property
    def gpu_h(self) -> dict[str, float]: ...


def eval_phases_asked(window: Window) -> EvalPhasesAnswer | None:
    """The window's evaluation phases from the first receiver that answers (None: none does)."""
    sent = eval_phases_wanted.send(sender=Job, window=window)
    return next((answer for _receiver, answer in sent if answer is not None), None)
