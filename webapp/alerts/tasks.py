"""Celery tasks of the alerts app: thin wrappers over services (ids in, one service call).

`send` is acknowledged late and rejected on worker loss (DURABLE_TASK): a worker killed while
sending leaves the message to be delivered again, and the Notification's own record (claim,
lease, sent_at) decides whether it is sent.
"""

from __future__ import annotations

from celery import shared_task

from webapp.alerts.delivery import group_flush, notification_send
from webapp.alerts.dispatch import ACTION_TASK, FAILURE_TASK, FLUSH_TASK, SEND_TASK
from webapp.alerts.evaluate import alerts_evaluate, failure_alerts, recovery_action_alerts
from webapp.core.ingest import DURABLE_TASK
from webapp.core.workrows import task_outcome


@shared_task(name=FAILURE_TASK, **DURABLE_TASK)
def failure(self, failure_id: int) -> dict:
    """Raise the alerts of a failure just diagnosed (sent on the diagnosis' commit)."""
    return {"alerts": [a.pk for a in failure_alerts(failure_id)]}


@shared_task(name=ACTION_TASK, **DURABLE_TASK)
def recovery_action(self, action_id: int) -> dict:
    return {"alerts": [a.pk for a in recovery_action_alerts(action_id)]}


@shared_task(name=FLUSH_TASK, **DURABLE_TASK)
def flush(self, group_id: int) -> dict:
    """Send a group's due notification (after its group_wait / group_interval)."""
    return {"notifications": [n.pk for n in group_flush(group_id)]}


@shared_task(name=SEND_TASK, **DURABLE_TASK)
def send(self, notification_id: int) -> dict:
    """Deliver one notification; come back when asked to (backoff, another worker's lease)."""
    outcome = notification_send(notification_id, worker=self.request.hostname or "worker")
    return task_outcome(self, outcome, notification=notification_id)


@shared_task(name="vigil.alerts.evaluate", ignore_result=True)
def evaluate() -> dict:
    """Condition rules, expiry, due groups and stale deliveries (from beat)."""
    return alerts_evaluate()


@shared_task(name="vigil.alerts.prune_notifications", ignore_result=True)
def prune_notifications() -> dict:
    """Delete finished notifications and outbox emails past their retention (daily, beat)."""
    from webapp.alerts.services import notifications_prune

    return {"pruned": notifications_prune()}
