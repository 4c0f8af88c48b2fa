"""Celery tasks of the telemetry app: thin wrappers over services."""

from __future__ import annotations

import logging

import psycopg
from celery import shared_task
from django.db import InterfaceError, OperationalError, connection

from collectors.schema import INGEST_TASK, BatchError
from webapp.fleet.services import AuthError
from webapp.outbox import outbox_redeliver
from webapp.telemetry.partitions import known_forget, partitions_maintain
from webapp.telemetry.services import batch_reject, rollups_refresh, samples_ingest

log = logging.getLogger("vigil.ingest")

# PostgreSQL unreachable or restarting: retry with backoff, never drop the batch.
_DB_DOWN = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


@shared_task(
    name=INGEST_TASK,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=_DB_DOWN,
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=None,
    ignore_result=True,
)
def ingest_batch(self, raw: str) -> dict:
    """Store one collector batch (wire schema v1, JSON text); refuse it whole if invalid."""
    try:
        result = samples_ingest(raw)
    except (BatchError, AuthError) as exc:
        batch_reject(raw, exc)
        return {"rejected": exc.reason}
    except _DB_DOWN:
        # The connection is dead; drop it so the retry opens a new one.
        connection.close_if_unusable_or_obsolete()
        connection.close()
        known_forget()
        log.warning(
            "database unavailable; batch will be retried (attempt %s)", self.request.retries + 1
        )
        raise
    return {"stored": result.samples_stored, "duplicates": result.duplicates}


@shared_task(name="vigil.telemetry.maintain_partitions", ignore_result=True)
def maintain_partitions() -> dict:
    return partitions_maintain()


@shared_task(name="vigil.telemetry.refresh_rollups", ignore_result=True)
def refresh_rollups() -> dict:
    batches, cells = rollups_refresh()
    return {"batches": batches, "cells": cells}


@shared_task(name="vigil.telemetry.redeliver_lost_batches", ignore_result=True)
def redeliver_lost_batches() -> int:
    return outbox_redeliver()
