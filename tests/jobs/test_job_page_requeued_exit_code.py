"""A requeued job back in the queue keeps its last run's exit code on record (the scheduler
watcher clears it at the next start): its page says that code is the previous run's, not the
pending job's own."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from tests.factory import cluster_make
from webapp.fleet.models import Cluster
from webapp.jobs.models import Job, JobEvent


def _exit_code_shown(html: str) -> str:
    found = re.search(r"<dt>Exit code</dt><dd>(.*?)</dd>", html, re.S)
    assert found, "no exit code on the page"
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_a_pending_requeued_job_shows_its_exit_code_as_the_previous_runs(operator_client, db):
    cluster_make("acme", {"gpu-q-01": 1})
    now = timezone.now()
    job = Job.objects.create(
        cluster=Cluster.objects.get(name="acme"),
        scheduler_id="6006",
        name="pretrain",
        job_type="pretrain",
        state="pending",
        submit_at=now - timedelta(minutes=5),
        exit_code=-6,
        gpus_requested=1,
        nodes_requested=1,
    )
    JobEvent.objects.bulk_create(
        [
            JobEvent(job=job, kind="started", ts=now - timedelta(minutes=30), state="running"),
            JobEvent(
                job=job, kind="ended", ts=now - timedelta(minutes=6), state="failed", exit_code=-6
            ),
            JobEvent(job=job, kind="requeued", ts=now - timedelta(minutes=5), state="pending"),
        ]
    )
    response = operator_client.get(f"/jobs/{job.id}/")
    assert response.status_code == 200
    assert _exit_code_shown(response.content.decode()) == "– (previous run: -6)"
