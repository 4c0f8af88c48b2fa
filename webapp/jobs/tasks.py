"""Celery tasks of the jobs app: thin wrappers over services."""

from __future__ import annotations

import logging

from celery import shared_task

from collectors.schema import JOB_EVENTS_TASK
from webapp.core.ingest import DURABLE_TASK, batch_run
from webapp.core.windows import Window
from webapp.fleet.models import Cluster
from webapp.jobs.selectors import characterization_cached
from webapp.jobs.services import job_events_ingest, job_tallies_compact_if_due

log = logging.getLogger("vigil.jobs")


@shared_task(name=JOB_EVENTS_TASK, **DURABLE_TASK)
def ingest_events(self, raw: str) -> dict:
    """Apply one job-event batch (JSON text); refuse it whole if invalid."""

    def apply(text: str) -> dict:
        result = job_events_ingest(text)
        return {"applied": result.applied, "duplicates": result.duplicates, "jobs": result.jobs}

    return batch_run(self, raw, apply)


@shared_task(name="vigil.jobs.warm_characterization", ignore_result=True)
def warm_characterization() -> dict:
    """Keep every cluster's characterization page (all its jobs, the page's default window)
    in the shared cache, computed when the cluster's jobs changed, kept alive otherwise; and
    merge a cluster's tally rows once job changes have added many (each is read by the page)."""
    clusters = merged = 0
    for cluster in Cluster.objects.order_by("name"):
        merged += job_tallies_compact_if_due(cluster.id)
        characterization_cached(Window(cluster), keep=True)
        clusters += 1
    return {"clusters": clusters, "tally_rows_merged": merged}
