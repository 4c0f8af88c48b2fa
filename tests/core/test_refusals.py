"""The ingest refusal log is pruned past its retention, and /metrics keeps counting what was
pruned (a Prometheus counter that went down would read as a reset)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from webapp.celery import app
from webapp.core.models import RejectedBatch
from webapp.core.refusals import AuthError, batch_reject, refusals_prune
from webapp.core.tasks import prune_refusals

KEY = "scrape-key-123"


def _rejected_counter(client) -> dict[str, float]:
    text = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {KEY}").content.decode()
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vigil_ingest_rejected_batches_total"
    }


def test_old_refusals_are_pruned_and_the_counter_does_not_go_down(client, db, settings):
    settings.VIGIL_METRICS_KEY = KEY
    settings.VIGIL_REFUSALS_RETENTION_DAYS = 30
    for i in range(5):
        batch_reject(b"{}", AuthError("bad_token", f"try {i}"))
    for i in range(3):
        batch_reject(b"{}", AuthError("unknown_node", f"try {i}"))
    now = timezone.now()
    old = RejectedBatch.objects.order_by("id").values_list("id", flat=True)[:6]
    RejectedBatch.objects.filter(id__in=list(old)).update(received_at=now - timedelta(days=31))
    before = _rejected_counter(client)
    assert before == {"bad_token": 5, "unknown_node": 3}

    assert refusals_prune(now) == 6
    assert RejectedBatch.objects.count() == 2  # the recent ones stay for the admin
    assert _rejected_counter(client) == before
    assert refusals_prune(now) == 0  # nothing left past the retention; counts unchanged
    assert _rejected_counter(client) == before

    batch_reject(b"{}", AuthError("bad_token", "again"))
    assert _rejected_counter(client) == {"bad_token": 6, "unknown_node": 3}


def test_the_prune_runs_daily_from_beat():
    entries = {e["task"] for e in app.conf.beat_schedule.values()}
    assert "vigil.core.prune_refusals" in entries
    assert prune_refusals.name == "vigil.core.prune_refusals"
