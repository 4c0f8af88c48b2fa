"""The one policy of every task that takes a collector batch (samples, job events, node
events) or must not lose its work when PostgreSQL restarts.

Acknowledged late and rejected on worker loss (a killed worker's task is redelivered), and
retried with backoff, forever, while the database is unreachable (the batch is never
dropped). A batch that fails validation or authentication is refused whole: recorded in
RejectedBatch, logged, and acknowledged. A batch given by its outbox reference that cannot be
read (Redis failing under the worker) fails the task; its outbox entry stays, and the beat
task re-publishes it (webapp/outbox.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import InterfaceError, OperationalError, connection

from collectors.schema import BatchError
from webapp.fleet.services import AuthError

log = logging.getLogger("vigil.ingest")

# PostgreSQL unreachable or restarting.
DB_DOWN = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)

# Options for @shared_task(name=..., **DURABLE_TASK).
DURABLE_TASK: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": DB_DOWN,
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": None,
    "ignore_result": True,
}


def db_down(task) -> None:
    """Before a retry: drop the dead connection so the retry opens a new one."""
    from webapp.telemetry.partitions import known_forget

    connection.close_if_unusable_or_obsolete()
    connection.close()
    known_forget()  # partitions made in a transaction that never committed
    log.warning(
        "database unavailable; %s will be retried (attempt %s)",
        task.name,
        task.request.retries + 1,
    )


def batch_run(task, arg: str, ingest: Callable[[str], dict]) -> dict:
    """Run `ingest(text)` under the policy above, where `arg` is the batch text or its outbox
    reference (webapp/outbox.py); a refused batch returns {"rejected": reason}."""
    from webapp.outbox import batch_text
    from webapp.telemetry.services import batch_reject

    raw = batch_text(arg)
    if raw is None:
        # Its outbox entry is gone: the batch was finished, and this is a redelivery.
        log.info("%s: %s was finished before; nothing to do", task.name, arg)
        return {"finished_before": arg}
    try:
        return ingest(raw)
    except (BatchError, AuthError) as exc:
        batch_reject(raw, exc)
        return {"rejected": exc.reason}
    except DB_DOWN:
        db_down(task)
        raise
