from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from webapp.fleet.services import nodes_mark_stale


@shared_task(name="vigil.fleet.mark_stale_nodes", ignore_result=True)
def mark_stale_nodes() -> int:
    return nodes_mark_stale(timezone.now() - timedelta(seconds=settings.VIGIL_STALE_AFTER_S))
