"""The recovery app plans every diagnosed failure, in the transaction that diagnosed it: a
diagnosis is never on record without its plan, and no poll stands between the two."""

from __future__ import annotations

from django.dispatch import receiver

from webapp.failures.dispatch import failure_diagnosed
from webapp.failures.models import FailureEvent


@receiver(failure_diagnosed, sender=FailureEvent, dispatch_uid="recovery.failure_diagnosed")
def plan_recovery(sender: type[FailureEvent], failure: FailureEvent, **kwargs: object) -> None:
    from webapp.recovery.planning import failure_recovery_plan

    failure_recovery_plan(failure)
