"""Celery tasks of the jobs app: thin wrappers over services."""

from __future__ import annotations

import logging

import psycopg
from celery import shared_task
from django.db import InterfaceError, OperationalError, connection

from collectors.schema import JOB_EVENTS_TASK, BatchError
from webapp.fleet.models import Cluster
from webapp.fleet.services import AuthError
from webapp.jobs.characterization import Window
from webapp.jobs.selectors import characterization_cached
from webapp.jobs.services import job_events_ingest
from webapp.telemetry.services import batch_reject

log = logging.getLogger("vigil.jobs")

# PostgreSQL unreachable or restarting: retry with backoff, never drop the batch (the same
# policy as telemetry's ingest task).
_DB_DOWN = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


@shared_task(
    name=JOB_EVENTS_TASK,
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
def ingest_events(self, raw: str) -> dict:
    """Apply one job-event batch (JSON text); refuse it whole if invalid."""
    try:
        result = job_events_ingest(raw)
    except (BatchError, AuthError) as exc:
        batch_reject(raw, exc)
        return {"rejected": exc.reason}
    except _DB_DOWN:
        # The connection is dead; drop it so the retry opens a new one.
        connection.close_if_unusable_or_obsolete()
        connection.close()
        log.warning(
            "database unavailable; job events will be retried (attempt %s)",
            self.request.retries + 1,
        )
        raise
    return {"applied": result.applied, "duplicates": result.duplicates, "jobs": result.jobs}


@shared_task(name="vigil.jobs.warm_characterization", ignore_result=True)
def warm_characterization() -> dict:
    """Keep every cluster's characterization page (all its jobs, the page's default window)
    in the shared cache: computed when the cluster has new jobs, kept alive otherwise. Over a
    million jobs the computation takes seconds; the page then reads the cache."""
    clusters = 0
    for cluster in Cluster.objects.order_by("name"):
        characterization_cached(Window(cluster), keep=True)
        clusters += 1
    return {"clusters": clusters}
