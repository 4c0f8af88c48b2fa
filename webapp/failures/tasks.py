"""Celery tasks of the failures app: thin wrappers over services."""

from __future__ import annotations

from celery import shared_task

from collectors.schema import NODE_EVENTS_TASK
from webapp.core.ingest import DB_DOWN, DURABLE_TASK, batch_run, db_down
from webapp.failures.dispatch import DIAGNOSE_TASK
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose, failure_inputs_prune
from webapp.failures.stragglers import stragglers_detect


@shared_task(name=NODE_EVENTS_TASK, **DURABLE_TASK)
def ingest_node_events(self, raw: str) -> dict:
    """Store one node-event batch (GPU errors, job log windows); refuse it whole if invalid."""

    def store(text: str) -> dict:
        result = node_events_ingest(text)
        return {
            "gpu_events": result.gpu_events_stored,
            "log_windows": result.log_windows_stored,
            "failures": result.failures_opened,
        }

    return batch_run(self, raw, store)


@shared_task(name=DIAGNOSE_TASK, **DURABLE_TASK)
def diagnose(self, failure_id: int) -> dict:
    """Diagnose one failure event (idempotent: the same evidence gives the same answer)."""
    try:
        failure = failure_diagnose(failure_id)
    except DB_DOWN:
        db_down(self)
        raise
    if failure is None:
        return {"missing": failure_id}
    return {"cause": failure.cause, "action": failure.action}


@shared_task(name="vigil.failures.detect_stragglers", ignore_result=True)
def detect_stragglers() -> dict:
    """Look for straggling GPUs of running jobs (every minute, from the beat schedule)."""
    return {"opened": stragglers_detect()}


@shared_task(name="vigil.failures.prune_inputs", ignore_result=True)
def prune_inputs() -> dict:
    """Delete the engine's inputs past their retention (daily, from the beat schedule)."""
    return {"pruned": failure_inputs_prune()}
