"""The characterization page states one window and every figure on it covers that window: the
job counts and the telemetry alike, and the date fields hold no example dates that read as if
they were filled in."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.cache import cache

from tests.jobs.helpers import make_jobs
from webapp.fleet.models import Cluster


def test_no_dates_means_all_time_for_jobs_and_telemetry_alike(operator_client, db):
    cache.clear()
    cluster = Cluster.objects.create(name="kestrel")
    jobs = make_jobs(cluster, 40, start=datetime(2026, 3, 1, tzinfo=UTC))
    response = operator_client.get("/jobs/characterization/?cluster=kestrel")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Window: all time" in page
    # The telemetry reaches back as far as the jobs counted (before: the last 7 days only).
    first_submit = min(j.submit_at for j in jobs if j.submit_at)
    assert response.context["telemetry"].since <= first_submit
    assert 'placeholder="2026-' not in page
    cache.clear()
