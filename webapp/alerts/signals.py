"""Events the alerts app reacts to as they are stored, each by a task sent on commit (so the
diagnosis or the recovery action never waits on mail):

- `failures.signals.failure_diagnosed`: a failure was diagnosed (its alert, and the alerts of
  its recovery actions awaiting approval);
- `recovery.dispatch.action_failed`: a recovery action failed for good (sent from
  recovery.execution._failed).
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import receiver

from webapp.celery import app
from webapp.failures.dispatch import failure_diagnosed
from webapp.failures.models import FailureEvent
from webapp.recovery.dispatch import action_failed
from webapp.recovery.models import RecoveryAction


@receiver(failure_diagnosed, sender=FailureEvent, dispatch_uid="alerts.failure_diagnosed")
def alert_failure(sender: type[FailureEvent], failure: FailureEvent, **kwargs: object) -> None:
    from webapp.alerts.dispatch import FAILURE_TASK

    pk = failure.pk
    # robust: the beat round does not re-read failures, but a broker outage must not undo the
    # diagnosis; the failure page still shows it.
    transaction.on_commit(lambda: app.send_task(FAILURE_TASK, args=[pk]), robust=True)


@receiver(action_failed, sender=RecoveryAction, dispatch_uid="alerts.action_failed")
def alert_action_failed(
    sender: type[RecoveryAction], action: RecoveryAction, **kwargs: object
) -> None:
    from webapp.alerts.dispatch import ACTION_TASK

    pk = action.pk
    transaction.on_commit(lambda: app.send_task(ACTION_TASK, args=[pk]), robust=True)
