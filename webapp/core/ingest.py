"""The one policy of every task that takes a collector batch (samples, job events, node
events) or must not lose its work when PostgreSQL restarts.

Acknowledged late and rejected on worker loss (a killed worker's task is redelivered), and
retried with backoff, forever, while the database is unreachable (the batch is never
dropped). A batch given by its outbox reference that cannot be read (Redis failing under the
worker) fails the task; its outbox entry stays, and the beat task re-publishes it
(webapp/core/outbox.py).

Every other outcome finishes the batch (its outbox entry is cleared, so it is never published
again), and a refusal is recorded in RejectedBatch and logged:
- it fails validation or authentication (BatchError, AuthError): refused whole;
- it cannot be read at all (an outbox entry that is not a Zstandard stream of UTF-8 text, a
  task argument that is not a string: nodes write both): refused alone as `unreadable`, the
  other batches of its group going on;
- storing it fails for any other reason than a database outage (a NUL byte PostgreSQL refuses
  in text, a value out of range for its column, a bug): refused as `store_failed`, with the
  exception's class and message, so it never loops;
- it was delivered VIGIL_POISON_DELIVERIES times without an outcome (the worker died or was
  killed while storing it, every time): refused as `poison`, without trying again. Deliveries
  are counted in Redis per batch id, before storing, so a SIGKILL cannot skip the count.

GPU sample batches, the bulk of the traffic, are taken several at a time and stored in one
transaction (`batches_run`); the policy is the same, carried out per batch. A batch delivered
before without an outcome is a suspect: it is stored alone, after the others, and counted
only when its own turn comes, so a batch that kills the worker is never blamed on the
batches delivered with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import redis
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from collectors.schema import BatchError, OversizedBatch, UnreadableBatch, is_signed
from webapp.core.outbox import (
    DELIVERIES_KEY,
    batch_id_of,
    batch_texts,
    batches_finished,
    broker_client,
)
from webapp.core.refusals import AuthError, batch_reject

log = logging.getLogger("vigil.ingest")

# PostgreSQL unreachable or restarting.
DB_DOWN = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)

# SQLSTATE classes of an OperationalError that is the database's trouble, not the batch's, so
# a retry can succeed: connection exception (08), transaction rollback: serialization failure
# or deadlock (40), insufficient resources (53), operator intervention: shutdown, restart,
# statement cancelled (57); and lock not available (55P03). Every other SQLSTATE (e.g. 54000,
# program limit exceeded) refuses the batch. Source: PostgreSQL manual, Appendix A "PostgreSQL
# Error Codes".
_OUTAGE_CLASSES = frozenset({"08", "40", "53", "57"})
_OUTAGE_STATES = frozenset({"55P03"})

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

# settings.VIGIL_POISON_DELIVERIES: deliveries of a batch that may end without an outcome
# (worker killed each time) before it is refused as poison. Five by default: a worker
# restarted by a deploy or the OOM killer while storing healthy batches costs a batch one
# delivery, rarely more than two in a row.


def db_outage(exc: BaseException) -> bool:
    """True if `exc` is the database unreachable or transiently unable (retry the batch),
    False if it is this batch failing to store (refuse it)."""
    if not isinstance(exc, DB_DOWN):
        return False
    error = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    sqlstate = getattr(error, "sqlstate", None)
    # No SQLSTATE: raised by the client (connection refused, closed, lost).
    return sqlstate is None or sqlstate[:2] in _OUTAGE_CLASSES or sqlstate in _OUTAGE_STATES


@dataclass(frozen=True)
class Refused:
    """A refusal that is not the batch's content or sender (webapp/core/refusals.py)."""

    reason: str
    detail: str


# A batch that comes through the broker must carry an HMAC of its body, never its node token
# (collectors sign in the transport): one with a token put a secret into Redis, and is refused
# so that the collector that sent it is found and upgraded.
UNSIGNED = Refused(
    "unsigned",
    "a batch through the broker must be signed (HMAC of its body), not carry its node token: "
    "upgrade the collector",
)


def _unsigned(raw: str) -> bool:
    """A batch text that came unsigned (an oversized or unreadable one is refused as such)."""
    return not isinstance(raw, OversizedBatch | UnreadableBatch) and not is_signed(raw)


def _not_text(arg: object) -> str | None:
    """Why a task argument is no batch text or outbox reference (anything but a str: a node
    writes the message), else None."""
    if isinstance(arg, str):
        return None
    kind = type(arg).__name__
    article = "an" if kind[:1] in "aeiou" else "a"
    return f"task argument: {article} {kind}, not a batch text or outbox reference"


def _refuse_argument(why: str) -> None:
    batch_reject(UnreadableBatch(why), Refused("unreadable", why))


def store_failure(exc: BaseException) -> Refused:
    """The refusal of a batch whose storing raised `exc` (not a database outage)."""
    return Refused("store_failed", f"{type(exc).__name__}: {exc}")


def poison_deliveries() -> int:
    return settings.VIGIL_POISON_DELIVERIES


def _poison(deliveries: int) -> Refused:
    return Refused(
        "poison",
        f"delivered {deliveries} times and never stored or refused: the worker storing it "
        "died or was killed every time",
    )


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
    texts = batch_texts(args)
    for arg, text in zip(args, texts, strict=True):
        if text is None:
            log.info("%s: %s was finished before; nothing to do", task.name, arg)
    return texts


# --- Deliveries ---------------------------------------------------------------------------


def _deliveries_add(args: Sequence[str], step: int = 1) -> list[int]:
    """Count one more (or, with step -1, one less) delivery of each batch; the counts, 0 for
    a batch without an id, or for all when Redis cannot count (then nothing is poison)."""
    client = broker_client()
    ids = [batch_id_of(arg) for arg in args]
    if client is None or not any(ids):
        return [0] * len(ids)
    try:
        pipe = client.pipeline(transaction=False)
        for batch_id in filter(None, ids):
            pipe.hincrby(DELIVERIES_KEY, batch_id, step)
        counts = iter(pipe.execute())
    except redis.RedisError as exc:
        log.warning("deliveries of %d batch(es) not counted: %s", len(ids), exc)
        return [0] * len(ids)
    return [next(counts) if batch_id else 0 for batch_id in ids]


# --- Single batches -----------------------------------------------------------------------


def batch_run(task, arg: str, ingest: Callable[[str], dict]) -> dict:
    """Run `ingest(text)` under the policy above, where `arg` is the batch text or its outbox
    reference (webapp/core/outbox.py); a refused batch returns {"rejected": reason}."""
    if (why := _not_text(arg)) is not None:
        _refuse_argument(why)
        return {"rejected": "unreadable"}
    [raw] = _texts(task, [arg])
    if raw is None:
        return {"finished_before": arg}
    if _unsigned(raw):
        return _refuse(raw, UNSIGNED)
    [deliveries] = _deliveries_add([arg])
    try:
        if deliveries > poison_deliveries():
            outcome = _refuse(raw, _poison(deliveries - 1))
        else:
            outcome = _ingest_one(raw, ingest)
    except DB_DOWN:  # only an outage comes out of _ingest_one
        _deliveries_add([arg], -1)  # this delivery ended with an outcome: a retry
        db_down(task)
        raise
    return outcome  # the postrun handler clears its outbox entry and delivery count


def _ingest_one(raw: str, ingest: Callable[[str], dict]) -> dict:
    try:
        return ingest(raw)
    except (BatchError, AuthError) as exc:
        return _refuse(raw, exc)
    except Exception as exc:
        if db_outage(exc):
            raise
        return _refuse(raw, store_failure(exc))


def _refuse(raw: str, refusal: BatchError | AuthError | Refused) -> dict:
    batch_reject(raw, refusal)
    return {"rejected": refusal.reason}


# --- Batches taken several at a time ------------------------------------------------------


def batches_run(task, requests: list, ingest_many: Callable[[list[str]], object]) -> None:
    """The policy above for a task that takes its calls several at a time (celery-batches:
    `requests` are the buffered calls, each with the batch text or its outbox reference as
    its one argument). `ingest_many(texts)` stores the valid batches and records the refused
    ones, in one transaction, so every batch of the group is finished at once; it refuses a
    batch that fails to store by itself (telemetry.services.samples_ingest_many), and should
    it raise instead, the group is stored again one batch at a time.

    celery-batches acknowledges every request once this returns, whatever happened, so the
    policy cannot leave a message unacknowledged to have it redelivered. Instead:
    - database unreachable: each batch not finished is published again with the task's
      backoff and its retry count, as Celery's own retry does, and its outbox entry stays;
    - Redis cannot be read: the outbox entries stay, and the beat task re-publishes them;
    - a killed worker never returns here: its unacknowledged messages come back, and the
      batches it was storing come back suspects.
    """
    # A request whose argument is no text is refused alone; the others go on as a group.
    readable = []
    for request in requests:
        args = request.args if isinstance(request.args, list | tuple) else [request.args]
        why = _not_text(args[0]) if len(args) == 1 else f"task arguments: {len(args)}, not 1"
        if why is None:
            readable.append(request)
        else:
            _refuse_argument(why)
    requests = readable
    args = [request.args[0] for request in requests]
    if not args:
        return
    try:
        texts = _texts(task, args)
    except redis.RedisError as exc:
        log.warning(
            "%s: %d batch(es) not read (%s); the outbox keeps them", task.name, len(args), exc
        )
        return
    # One copy of a batch delivered twice in the group goes (it is finished for both).
    first = {arg: i for i, arg in reversed(list(enumerate(args)))}
    todo = [i for i, text in enumerate(texts) if text is not None and first[args[i]] == i]
    unsigned = [i for i in todo if _unsigned(texts[i])]
    for i in unsigned:
        batch_reject(texts[i], UNSIGNED)
    todo = [i for i in todo if i not in unsigned]
    counts = _deliveries_add([args[i] for i in todo])
    fresh = [i for i, n in zip(todo, counts, strict=True) if n <= 1]
    suspects = [i for i, n in zip(todo, counts, strict=True) if n > 1]
    if suspects:
        # Counted again when each one's turn comes (below), not for the group's sake.
        _deliveries_add([args[i] for i in suspects], -1)
    finished: list[int] = list(unsigned)
    try:
        if fresh:
            _group_store(ingest_many, [texts[i] for i in fresh])
            finished += fresh
        for i in suspects:
            [deliveries] = _deliveries_add([args[i]])
            if deliveries > poison_deliveries():
                batch_reject(texts[i], _poison(deliveries - 1))
            else:
                try:
                    _group_store(ingest_many, [texts[i]])
                except DB_DOWN:
                    _deliveries_add([args[i]], -1)
                    raise
            finished.append(i)
    except DB_DOWN:
        if finished == unsigned:
            _deliveries_add([args[i] for i in fresh], -1)
        _db_forget()
        _retry(task, requests, args, [i for i in todo if i not in finished])
    done = [args[i] for i in finished]
    if done:
        batches_finished(task.name, done)  # outbox entries and delivery counts, one MULTI


def _group_store(ingest_many: Callable[[list[str]], object], texts: list[str]) -> None:
    """ingest_many(texts); on an error that is not an outage, each batch again alone, and
    one that still fails is refused. An outage raises."""
    try:
        ingest_many(texts)
        return
    except Exception as exc:
        if db_outage(exc):
            raise
        if len(texts) == 1:
            batch_reject(texts[0], store_failure(exc))
            return
        log.warning("a group of %d batches failed to store (%r); one at a time", len(texts), exc)
    for text in texts:
        _group_store(ingest_many, [text])


def _retry(task, requests: list, args: list[str], todo: list[int]) -> None:
    """Publish each batch of `todo` again with the task's backoff and its retry count."""
    for i in todo:
        retries = requests[i].request_dict.get("retries", 0)
        countdown = get_exponential_backoff_interval(
            DURABLE_TASK["retry_backoff"],
            retries,
            DURABLE_TASK["retry_backoff_max"],
            DURABLE_TASK["retry_jitter"],
        )
        task.apply_async(args=[args[i]], countdown=countdown, retries=retries + 1)
    log.warning("database unavailable; %d batch(es) of %s will be retried", len(todo), task.name)
