"""Core's periodic work: pruning the ingest refusal log."""

from celery import shared_task

from webapp.core.refusals import refusals_prune


@shared_task(name="vigil.core.prune_refusals")
def prune_refusals() -> int:
    return refusals_prune()
