"""The base of every Celery task of the app: the ingest queue runs only the ingest tasks.

Every node can write to the ingest queue (deploy/redis/README.md), so it can carry any task
name a node chooses: a recovery action, an alert, a prune. The Celery app names this class
(webapp/celery.py) rather than importing it, so the app module imports nothing of core.
"""

from typing import Any

from celery import Task

from collectors.schema import (
    INGEST_QUEUE,
    INGEST_TASK,
    JOB_EVENTS_TASK,
    NODE_EVENTS_TASK,
    UnreadableBatch,
)
from webapp.core.ingest import Refused
from webapp.core.refusals import batch_reject

# What the ingest queue is for.
INGEST_QUEUE_TASKS = frozenset({INGEST_TASK, JOB_EVENTS_TASK, NODE_EVENTS_TASK})


class VigilTask(Task):
    """Every task of the app: one that came through the ingest queue and is not an ingest task
    is refused (recorded as `foreign_task`) instead of run.

    A worker that consumes only the ingest queue (`-Q ingest`, as the README deploys them)
    refuses every other task name, whatever the message says of its route. A worker that also
    consumes other queues can only go by the routing key the message carries, which a node
    writing to Redis could forge: ingest workers are kept apart for that reason.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.name not in INGEST_QUEUE_TASKS and _from_ingest_queue(self):
            return _foreign_task_refuse(self.name)
        return super().__call__(*args, **kwargs)


def _from_ingest_queue(task: Task) -> bool:
    request = task.request
    if getattr(request, "called_directly", True):  # run in-process (eager, tests), not sent
        return False
    consumed = task.app.amqp.queues.consume_from
    if consumed and set(consumed) == {INGEST_QUEUE}:
        return True
    return (getattr(request, "delivery_info", None) or {}).get("routing_key") == INGEST_QUEUE


def _foreign_task_refuse(name: str) -> dict:
    why = f"task {name[:200]} came through the ingest queue, which runs only the ingest tasks"
    batch_reject(UnreadableBatch(why), Refused("foreign_task", why))
    return {"rejected": "foreign_task"}
