"""Celery tasks of the telemetry app: thin wrappers over services."""

from __future__ import annotations

from celery import shared_task

from collectors.schema import INGEST_TASK
from webapp.ingest import DURABLE_TASK, batch_run
from webapp.outbox import outbox_redeliver
from webapp.telemetry.partitions import partitions_maintain
from webapp.telemetry.services import rollups_refresh, samples_ingest


@shared_task(name=INGEST_TASK, **DURABLE_TASK)
def ingest_batch(self, raw: str) -> dict:
    """Store one collector batch (wire schema v1, JSON text); refuse it whole if invalid."""

    def store(text: str) -> dict:
        result = samples_ingest(text)
        return {"stored": result.samples_stored, "duplicates": result.duplicates}

    return batch_run(self, raw, store)


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
