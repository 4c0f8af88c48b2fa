"""`vigil_alerts_firing{rule,severity}` on /metrics (key-protected, as the rest)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from webapp.alerts import evaluate
from webapp.fleet.models import Node

pytestmark = pytest.mark.django_db


def test_a_firing_alert_is_counted_and_metrics_without_the_key_is_refused(fleet, settings, broker):
    settings.VIGIL_METRICS_KEY = "k3y"
    Node.objects.filter(hostname="gpu-node-02").update(
        last_seen=timezone.now() - timedelta(minutes=20)
    )
    evaluate.alerts_evaluate(timezone.now())
    client = Client()
    assert client.get("/metrics").status_code in (401, 403)
    body = client.get("/metrics", headers={"Authorization": "Bearer k3y"}).content.decode()
    assert 'vigil_alerts_firing{rule="node-down",severity="warning"} 1.0' in body
