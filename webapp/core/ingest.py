"""The one policy of every task that takes a collector batch (samples, job events, node
events) or must not lose its work when PostgreSQL restarts.

Acknowledged late and rejected on worker loss (a killed worker's task is redelivered), and
retried with backoff, forever, while the database is unreachable (the batch is never
dropped). A batch that fails validation or authentication is refused whole: recorded in
RejectedBatch, logged, and acknowledged. A batch given by its outbox reference that cannot be
read (Redis failing under the worker) fails the task; its outbox entry stays, and the beat
task re-publishes it (webapp/core/outbox.py).

GPU sample batches, the bulk of the traffic, are taken several at a time and stored in one
transaction (`batches_run`); the policy is the same, carried out per batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
import redis
from celery.utils.time import get_exponential_backoff_interval
from django.db import InterfaceError, OperationalError, connection

from collectors.schema import BatchError
from webapp.core.refusals import AuthError, batch_reject

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
    _db_forget()
    log.warning(
        "database unavailable; %s will be retried (attempt %s)",
        task.name,
        task.request.retries + 1,
    )


# What apps cache about the database that a lost connection may have made wrong (telemetry:
# partitions made in a transaction that never committed). Apps add theirs when they load.
_on_db_lost: list[Callable[[], None]] = []


def on_db_lost(forget: Callable[[], None]) -> None:
    """Have `forget()` called whenever ingest drops a dead database connection."""
    if forget not in _on_db_lost:
        _on_db_lost.append(forget)


def _db_forget() -> None:
    connection.close_if_unusable_or_obsolete()
    connection.close()
    for forget in _on_db_lost:
        forget()


def _texts(task, args: list[str]) -> list[str | None]:
    """The batch texts of a task's arguments (webapp/core/outbox.py `batch_texts`); None, logged,
    for a reference whose outbox entry is gone: that batch was finished, and this is a
    redelivery."""
    from webapp.core.outbox import batch_texts

    texts = batch_texts(args)
    for arg, text in zip(args, texts, strict=True):
        if text is None:
            log.info("%s: %s was finished before; nothing to do", task.name, arg)
    return texts


def batch_run(task, arg: str, ingest: Callable[[str], dict]) -> dict:
    """Run `ingest(text)` under the policy above, where `arg` is the batch text or its outbox
    reference (webapp/core/outbox.py); a refused batch returns {"rejected": reason}."""
    [raw] = _texts(task, [arg])
    if raw is None:
        return {"finished_before": arg}
    try:
        return ingest(raw)
    except (BatchError, AuthError) as exc:
        batch_reject(raw, exc)
        return {"rejected": exc.reason}
    except DB_DOWN:
        db_down(task)
        raise


def batches_run(task, requests: list, ingest_many: Callable[[list[str]], object]) -> None:
    """The policy above for a task that takes its calls several at a time (celery-batches:
    `requests` are the buffered calls, each with the batch text or its outbox reference as
    its one argument). `ingest_many(texts)` stores the valid batches and records the refused
    ones, in one transaction, so every batch of the group is finished at once.

    celery-batches acknowledges every request once this returns, whatever happened, so the
    policy cannot leave a message unacknowledged to have it redelivered. Instead:
    - database unreachable: each batch is published again with the task's backoff and its
      retry count, as Celery's own retry does, and its outbox entry stays;
    - Redis cannot be read: the outbox entries stay, and the beat task re-publishes them;
    - a killed worker never returns here: its unacknowledged messages come back.
    """
    from webapp.core.outbox import batches_finished

    args = [request.args[0] for request in requests]
    try:
        texts = _texts(task, args)
    except redis.RedisError as exc:
        log.warning(
            "%s: %d batch(es) not read (%s); the outbox keeps them", task.name, len(args), exc
        )
        return
    todo = [i for i, text in enumerate(texts) if text is not None]
    try:
        ingest_many([texts[i] for i in todo])
    except DB_DOWN:
        _db_forget()
        for i in todo:
            retries = requests[i].request_dict.get("retries", 0)
            countdown = get_exponential_backoff_interval(
                DURABLE_TASK["retry_backoff"],
                retries,
                DURABLE_TASK["retry_backoff_max"],
                DURABLE_TASK["retry_jitter"],
            )
            task.apply_async(args=[args[i]], countdown=countdown, retries=retries + 1)
        log.warning(
            "database unavailable; %d batch(es) of %s will be retried", len(todo), task.name
        )
        return
    batches_finished(task.name, [args[i] for i in todo])
