"""Celery tasks of the telemetry app: thin wrappers over services."""

from __future__ import annotations

from celery import shared_task
from celery_batches import Batches
from django.conf import settings

from collectors.schema import INGEST_TASK
from webapp.core.ingest import batches_run
from webapp.core.outbox import outbox_redeliver
from webapp.telemetry.compaction import samples_compact
from webapp.telemetry.partitions import partitions_maintain
from webapp.telemetry.rollup_hourly import rollups_hourly_refresh
from webapp.telemetry.services import rollups_refresh, samples_ingest_many


@shared_task(
    name=INGEST_TASK,
    base=Batches,
    bind=True,
    acks_late=True,
    ignore_result=True,
    flush_every=settings.VIGIL_INGEST_GROUP,
    flush_interval=settings.VIGIL_INGEST_GROUP_WAIT_S,
)
def ingest_batch(self, requests: list) -> None:
    """Store collector batches (wire schema v1: each call's one argument is the JSON text or
    its outbox reference); refuse each invalid one whole.

    Calls are taken several at a time (celery-batches): up to VIGIL_INGEST_GROUP waiting
    calls, or what has come within VIGIL_INGEST_GROUP_WAIT_S, go to PostgreSQL in one
    transaction. Publishers still send one task per batch, by name.
    """
    batches_run(self, requests, samples_ingest_many)


@shared_task(name="vigil.telemetry.maintain_partitions", ignore_result=True)
def maintain_partitions() -> dict:
    return partitions_maintain()


@shared_task(name="vigil.telemetry.refresh_rollups", ignore_result=True)
def refresh_rollups() -> dict:
    batches, cells = rollups_refresh()
    return {"batches": batches, "cells": cells}


@shared_task(name="vigil.telemetry.compact_samples", ignore_result=True)
def compact_samples() -> dict:
    return samples_compact()


@shared_task(name="vigil.telemetry.refresh_hourly_rollups", ignore_result=True)
def refresh_hourly_rollups() -> dict:
    return rollups_hourly_refresh()


@shared_task(name="vigil.telemetry.redeliver_lost_batches", ignore_result=True)
def redeliver_lost_batches() -> int:
    return outbox_redeliver()
