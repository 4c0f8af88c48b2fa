"""Celery tasks of the recovery app: thin wrappers over services.

`execute` runs on the cluster's own queue (`recovery.<cluster>`), consumed by one worker on a
host with the scheduler's CLI. It is acknowledged late and rejected on worker loss, so a
worker killed mid-action leaves the message to be delivered again; the action's own record
(services.py) makes the second run finish the action instead of repeating it.
"""

from __future__ import annotations

from celery import shared_task

from webapp.core.ingest import DURABLE_TASK
from webapp.core.workrows import task_outcome
from webapp.recovery.actions import EXECUTE_TASK
from webapp.recovery.execution import action_execute
from webapp.recovery.services import actions_sweep


@shared_task(name=EXECUTE_TASK, **DURABLE_TASK)
def execute(self, action_id: int) -> dict:
    """Claim and run one recovery action; come back later when asked to (backoff, lease)."""
    outcome = action_execute(action_id, worker=self.request.hostname or "worker")
    return task_outcome(self, outcome, action=action_id)


@shared_task(name="vigil.recovery.sweep", ignore_result=True)
def sweep() -> dict:
    """Send again actions whose message was lost or whose worker died (from beat)."""
    return {"sent": actions_sweep()}
