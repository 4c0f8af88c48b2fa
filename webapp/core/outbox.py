"""Server side of the outbox (collectors/outbox.py): read a batch by its reference, clear
the entries of finished batches, and re-publish the ones a dead worker took off the queue
without recording them.

Every batch a worker takes from the broker passes through `batch_texts`, which holds it to
the size limits before anything parses it: VIGIL_BATCH_MAX_COMPRESSED_BYTES for the outbox
entry as stored, VIGIL_BATCH_MAX_BYTES for the text (defaults in collectors/schema.py). A
batch over either comes back as an `OversizedBatch`, which the parse refuses as `too_large`
(recorded like any refused batch), and decompression stops at the limit, so a compression
bomb costs a worker no more memory than an honest batch of the largest size. An entry that
cannot be read back (not Zstandard, not UTF-8) comes back as an `UnreadableBatch`, refused
as `unreadable` and finished like any refusal, so beat never publishes it again.
"""

from __future__ import annotations

import bz2
import logging
import lzma
import zlib
from collections.abc import Callable
from functools import cache
from typing import Any

import redis
from celery.signals import task_postrun
from django.conf import settings
from kombu import compression

from collectors import outbox
from collectors.schema import (
    INGEST_QUEUE,
    INGEST_TASK,
    JOB_EVENTS_TASK,
    NODE_EVENTS_TASK,
    OversizedBatch,
)

log = logging.getLogger("vigil.ingest")

# Tasks whose single argument is a wire batch that may have an outbox entry.
BATCH_TASKS = frozenset({JOB_EVENTS_TASK, NODE_EVENTS_TASK})
# Every task that takes a collector batch (the GPU sample one takes them grouped).
INGEST_TASKS = BATCH_TASKS | {INGEST_TASK}


# Redis hash: batch id -> deliveries begun and not finished (webapp/core/ingest.py counts
# them; they go with the batch's outbox entry when it is finished).
DELIVERIES_KEY = "vigil:ingest:deliveries"


@cache
def broker_client() -> redis.Redis | None:
    """The process's one client of the broker's Redis (prefork children call this after the
    fork); None when the broker is not Redis."""
    return outbox.client_for(settings.CELERY_BROKER_URL)


def batch_id_of(arg: str) -> str | None:
    """The batch id of a batch task's argument: its outbox reference, or the batch text."""
    return outbox.reference_id(arg) or outbox.batch_id_of(arg)


def max_batch_bytes() -> int:
    return settings.VIGIL_BATCH_MAX_BYTES


def max_batch_compressed_bytes() -> int:
    return settings.VIGIL_BATCH_MAX_COMPRESSED_BYTES


def batch_texts(args: list[str]) -> list[str | None]:
    """The batch texts batch tasks were given: each argument itself, or the outbox entry it
    refers to (one Redis round trip for all references); None for a reference whose entry is
    gone (the batch was finished before); an `OversizedBatch` for one over the size limits.
    Raises redis.RedisError when Redis cannot be read (the entries stay)."""
    limit = max_batch_bytes()
    texts: list[str | None] = [
        OversizedBatch(f"batch of {len(arg)} characters exceeds {limit} bytes", len(arg))
        if len(arg) > limit
        else arg
        for arg in args
    ]
    ids = {i: batch_id for i, arg in enumerate(args) if (batch_id := outbox.reference_id(arg))}
    if not ids:
        return texts
    client = broker_client()
    if client is None:
        raise RuntimeError(
            f"{args[next(iter(ids))]!r} refers to the outbox, but the broker is not Redis"
        )
    found = outbox.outbox_get_many(client, list(ids.values()), limit, max_batch_compressed_bytes())
    for i, text in zip(ids, found, strict=True):
        texts[i] = text
    return texts


class MessageTooLarge(ValueError):
    """A compressed Celery message that holds more than VIGIL_BATCH_MAX_BYTES."""


def _bounded(new_decompressor: Callable[[], Any]) -> Callable[[bytes], bytes]:
    def decompress(body: bytes) -> bytes:
        limit = max_batch_bytes()
        out = outbox.decompress_bounded(new_decompressor(), body, limit)
        if out is None:
            raise MessageTooLarge(f"compressed message decompresses past {limit} bytes")
        return out

    return decompress


def bounded_decompression_install() -> None:
    """Make kombu decompress message bodies (batches sent inline to brokers other than Redis)
    only up to the batch size limit. kombu's own decoders inflate a whole body, so one small
    message could make a worker allocate gigabytes. A refused body is logged by Celery as
    undecodable and acknowledged: it never reaches a task. Idempotent."""
    decoders = {
        "application/x-gzip": lambda: zlib.decompressobj(),
        "application/x-bz2": bz2.BZ2Decompressor,
        "application/x-lzma": lzma.LZMADecompressor,
        "application/zstd": outbox.zstd.ZstdDecompressor,
    }
    for content_type, new_decompressor in decoders.items():
        encoder, _ = compression.get_encoder(content_type)
        compression.register(encoder, _bounded(new_decompressor), content_type)


# The worker imports this module (webapp/telemetry/tasks.py) before it consumes anything.
bounded_decompression_install()


def batches_finished(task: str, args: list[str]) -> None:
    """Batches of `task` were finished (stored, or refused for good): their outbox entries and
    delivery counts can go. A failure to say so is only logged: the entry stays, and its redelivery
    finds the batch stored and changes nothing."""
    client = broker_client()
    if client is None:
        return
    ids = list(filter(None, map(batch_id_of, args)))
    try:
        outbox.outbox_done(client, task, ids, DELIVERIES_KEY)
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

    client = broker_client()
    if client is None:
        return 0
    if older_than_s is None:
        older_than_s = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] + 60
    due = outbox.outbox_due(client, older_than_s)
    # The index is written by nodes (collectors/outbox.py): only the batch tasks are ever
    # re-published, whatever task name a member carries.
    known = [(batch_id, task) for batch_id, task in due if task in INGEST_TASKS]
    if len(known) < len(due):
        log.warning(
            "outbox index names %d entries of unknown tasks; ignored", len(due) - len(known)
        )
    for batch_id, task in known:
        app.send_task(task, args=[outbox.reference(batch_id)], queue=INGEST_QUEUE)
    if known:
        log.warning("re-published %d batch(es) that no worker finished", len(known))
    return len(known)
