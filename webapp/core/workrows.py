"""Leased work rows: the one way a worker takes a row (a notification, a recovery action, an
export, a report delivery, an evaluation run) to work on, and records how the work ended.

A row is claimed by one conditional UPDATE: from a claimable status, a retry whose wait is
over, or a running row whose worker's lease ran out (it died), to the running status with the
worker's name and a lease. Two workers given the same row: one UPDATE matches, the other
finds nothing to update, so the work runs once. The lease is the time a worker may hold the
row without a word: work that takes longer extends it (`lease_extend`) as it goes.

How the work ended is an `Outcome`: done (a final status, the lease cleared), retry later
(`retry_later`: the row waits out a backoff, then is claimable again), or come back in a
while (`retry_in_s`: another worker holds it, or it is not due yet). A Celery task hands its
outcome to `task_outcome`, which raises the task's retry for the latter.

Each model keeps its own statuses: a `LeaseSpec` says which of them mean what.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import Task
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

# The retry backoff: 2, 4, 8 ... s after the first, second, third attempt, capped here.
BACKOFF_CAP_S = 300.0


@dataclass(frozen=True)
class Outcome:
    """What became of one run of a work row: its status (or why nothing ran: "missing",
    "held"), and when to look again (None: never, the row is done or someone else's)."""

    status: str
    retry_in_s: float | None = None
    note: str = ""


@dataclass(frozen=True)
class LeaseSpec:
    """Which statuses of `model` mean what to the claim.

    `claimable`: taken outright. `running`: held by the worker named in `claimed_by` until
    `lease_until`, then free to claim again. `retry`: waiting out a backoff until
    `lease_until` (a model without it waits in its first claimable status, its backoff in
    `due_field`, which the caller checks before claiming). `attempts`/`started` name the
    counter incremented and the first-start time set by each claim ("" when the model has
    none).
    """

    model: type[models.Model]
    claimable: tuple[str, ...]
    running: str
    retry: str = ""
    due_field: str = ""
    attempts: str = "attempts"
    started: str = ""

    def __post_init__(self) -> None:
        if not self.claimable:
            raise ValueError(f"{self.model.__name__}: a lease spec needs a claimable status")

    def claim_q(self, now: datetime) -> Q:
        """The rows a worker may claim at `now`."""
        q = Q(status__in=self.claimable) | Q(status=self.running, lease_until__lt=now)
        if self.retry:
            q |= Q(status=self.retry, lease_until__lte=now)
        return q

    def lost_q(self, now: datetime) -> Q:
        """The rows nobody holds though they were taken or wait for a retry that is due: what
        a sweep sends to a worker again (pending rows whose message was lost are the
        caller's to add: when a message counts as lost is the model's)."""
        q = Q(status=self.running, lease_until__lt=now)
        if self.retry:
            q |= Q(status=self.retry, lease_until__lte=now)
        return q


def backoff_s(attempts: int) -> float:
    """Delay before the next attempt after `attempts` of them: 2, 4, 8 ... s, capped."""
    return min(BACKOFF_CAP_S, 2.0 ** max(1, attempts))


def claim(
    spec: LeaseSpec,
    pk: Any,
    worker: str,
    lease_s: float,
    *,
    now: datetime | None = None,
    only: Q | None = None,
    **fields: Any,
) -> bool:
    """Take row `pk` for `worker` for `lease_s` seconds if it is free (`spec.claim_q`, and
    `only` when given); also writes `fields`. True: this worker has it, alone."""
    now = now or timezone.now()
    rows = spec.model.objects.filter(spec.claim_q(now), pk=pk)
    if only is not None:
        rows = rows.filter(only)
    update: dict[str, Any] = {
        "status": spec.running,
        "claimed_by": worker[:128],
        "lease_until": now + timedelta(seconds=lease_s),
        **fields,
    }
    if spec.attempts:
        update[spec.attempts] = F(spec.attempts) + 1
    if spec.started:
        update[spec.started] = Coalesce(F(spec.started), now)
    return bool(rows.update(**update))


def not_claimed(spec: LeaseSpec, row: models.Model | None) -> Outcome:
    """The outcome for a row `claim` did not get: missing, held by another worker (look again
    when its lease ends), waiting for its retry (look again then), or its status."""
    if row is None:
        return Outcome("missing")
    lease = getattr(row, "lease_until", None)
    if lease is not None:
        left = (lease - timezone.now()).total_seconds()
        if row.status == spec.running:
            return Outcome("held", retry_in_s=max(1.0, left + 1))
        if spec.retry and row.status == spec.retry:
            return Outcome(spec.retry, retry_in_s=max(0.5, left))
    return Outcome(row.status)


def lease_extend(spec: LeaseSpec, pk: Any, lease_s: float, **fields: Any) -> int:
    """Hold row `pk` another `lease_s` seconds from now (work that goes on), writing `fields`
    with it."""
    until = timezone.now() + timedelta(seconds=lease_s)
    return spec.model.objects.filter(pk=pk).update(lease_until=until, **fields)


def finish(
    spec: LeaseSpec,
    pk: Any,
    status: str,
    *,
    if_running: bool = False,
    unless: tuple[str, ...] = (),
    **fields: Any,
) -> int:
    """Record how row `pk` ended: `status` and `fields`, the lease cleared. `if_running`: only
    while it is still running (a worker that lost its lease and finished late writes
    nothing); `unless`: not over these statuses. Returns the rows written (0 or 1)."""
    rows = spec.model.objects.filter(pk=pk)
    if if_running:
        rows = rows.filter(status=spec.running)
    if unless:
        rows = rows.exclude(status__in=unless)
    return rows.update(status=status, lease_until=None, **fields)


def retry_later(spec: LeaseSpec, pk: Any, wait_s: float, **fields: Any) -> int:
    """Give row `pk` back to be claimed again in `wait_s` seconds (a transient failure): in
    the retry status until then, or in the first claimable one not before then
    (`due_field`). Only while this worker still runs it."""
    due = timezone.now() + timedelta(seconds=wait_s)
    rows = spec.model.objects.filter(pk=pk, status=spec.running)
    if spec.retry:
        return rows.update(status=spec.retry, lease_until=due, **fields)
    if not spec.due_field:
        raise ValueError(f"{spec.model.__name__}: no retry status nor due field to wait in")
    return rows.update(
        status=spec.claimable[0], lease_until=None, **{spec.due_field: due}, **fields
    )


def task_outcome(task: Task, outcome: Outcome, **result: Any) -> dict[str, Any]:
    """What a Celery task returns for `outcome`, or its retry (at the outcome's time, with no
    limit: the row's own attempts count decides when to stop)."""
    if outcome.retry_in_s is not None:
        raise task.retry(countdown=outcome.retry_in_s, max_retries=None)
    return {**result, "status": outcome.status, "note": outcome.note}
