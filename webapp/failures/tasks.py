"""Celery tasks of the failures app: thin wrappers over services."""

from __future__ import annotations

import logging

import psycopg
from celery import shared_task
from django.db import InterfaceError, OperationalError, connection

from collectors.schema import NODE_EVENTS_TASK, BatchError
from webapp.failures.services import failure_diagnose, node_events_ingest, stragglers_detect
from webapp.fleet.services import AuthError
from webapp.telemetry.services import batch_reject

log = logging.getLogger("vigil.failures")

# PostgreSQL unreachable or restarting: retry with backoff, never drop the batch (the same
# policy as telemetry's ingest task).
_DB_DOWN = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
_RETRY = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": _DB_DOWN,
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": None,
    "ignore_result": True,
}


def _db_down(task) -> None:
    # The connection is dead; drop it so the retry opens a new one.
    connection.close_if_unusable_or_obsolete()
    connection.close()
    log.warning(
        "database unavailable; %s will be retried (attempt %s)", task.name, task.request.retries + 1
    )


@shared_task(name=NODE_EVENTS_TASK, **_RETRY)
def ingest_node_events(self, raw: str) -> dict:
    """Store one node-event batch (GPU errors, job log windows); refuse it whole if invalid."""
    try:
        result = node_events_ingest(raw)
    except (BatchError, AuthError) as exc:
        batch_reject(raw, exc)
        return {"rejected": exc.reason}
    except _DB_DOWN:
        _db_down(self)
        raise
    return {
        "gpu_events": result.gpu_events_stored,
        "log_windows": result.log_windows_stored,
        "failures": result.failures_opened,
    }


@shared_task(name="vigil.failures.diagnose", **_RETRY)
def diagnose(self, failure_id: int) -> dict:
    """Diagnose one failure event (idempotent: the same evidence gives the same answer)."""
    try:
        failure = failure_diagnose(failure_id)
    except _DB_DOWN:
        _db_down(self)
        raise
    if failure is None:
        return {"missing": failure_id}
    return {"cause": failure.cause, "action": failure.action}


@shared_task(name="vigil.failures.detect_stragglers", ignore_result=True)
def detect_stragglers() -> dict:
    """Look for straggling GPUs of running jobs (every minute, from the beat schedule)."""
    return {"opened": stragglers_detect()}
