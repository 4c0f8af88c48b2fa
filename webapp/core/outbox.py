"""Server side of the outbox (collectors/outbox.py): read a batch by its reference, clear
the entries of finished batches, and re-publish the ones a dead worker took off the queue
without recording them."""

from __future__ import annotations

import logging
from functools import cache

import redis
from celery.signals import task_postrun
from django.conf import settings

from collectors import outbox
from collectors.schema import INGEST_QUEUE, JOB_EVENTS_TASK, NODE_EVENTS_TASK

log = logging.getLogger("vigil.ingest")

# Tasks whose single argument is a wire batch that may have an outbox entry.
BATCH_TASKS = frozenset({JOB_EVENTS_TASK, NODE_EVENTS_TASK})


@cache
def _client() -> redis.Redis | None:
    # One client per process (prefork children call this after the fork).
    return outbox.client_for(settings.CELERY_BROKER_URL)


def batch_texts(args: list[str]) -> list[str | None]:
    """The batch JSON texts batch tasks were given: each argument itself, or the outbox entry
    it refers to (one Redis round trip for all references); None for a reference whose entry
    is gone (the batch was finished before). Raises redis.RedisError when Redis cannot be read
    (the entries stay)."""
    ids = {i: batch_id for i, arg in enumerate(args) if (batch_id := outbox.reference_id(arg))}
    if not ids:
        return list(args)
    client = _client()
    if client is None:
        raise RuntimeError(
            f"{args[next(iter(ids))]!r} refers to the outbox, but the broker is not Redis"
        )
    found = dict(zip(ids, outbox.outbox_get_many(client, list(ids.values())), strict=True))
    return [found.get(i, arg) for i, arg in enumerate(args)]


def batches_finished(task: str, args: list[str]) -> None:
    """Batches of `task` were finished (stored, or refused for good): their outbox entries
    can go. A failure to say so is only logged: the entry stays, and its redelivery finds the
    batch stored and changes nothing."""
    client = _client()
    if client is None:
        return
    ids = [
        batch_id
        for arg in args
        if (batch_id := outbox.reference_id(arg) or outbox.batch_id_of(arg))
    ]
    try:
        outbox.outbox_done(client, task, ids)
    except redis.RedisError as exc:
        log.warning("outbox entries of %d batch(es) not cleared: %s", len(ids), exc)


@task_postrun.connect
def _batch_finished(sender=None, args=None, state=None, **kwargs) -> None:
    """A single-batch task returned (stored, or refused for good): its outbox entry can go.

    A task that will be retried (state RETRY) keeps its entry until the retry finishes.
    GPU sample batches are buffered several to a call (webapp/telemetry/tasks.py), whose
    policy clears their entries itself.
    """
    if sender is None or sender.name not in BATCH_TASKS or state != "SUCCESS" or not args:
        return
    batches_finished(sender.name, [args[0]])


def outbox_redeliver(older_than_s: float | None = None) -> int:
    """Re-publish batches still in the outbox after the broker's redelivery window; how many.

    Default age: the visibility timeout (after which the broker itself would have restored a
    message it knew about) plus a minute, so normal redelivery goes first.
    """
    from webapp.celery import app

    client = _client()
    if client is None:
        return 0
    if older_than_s is None:
        older_than_s = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] + 60
    due = outbox.outbox_due(client, older_than_s)
    for batch_id, task in due:
        app.send_task(task, args=[outbox.reference(batch_id)], queue=INGEST_QUEUE)
    if due:
        log.warning("re-published %d batch(es) that no worker finished", len(due))
    return len(due)
