"""The reliability page's 'Job running again' counts a replayed failure whose job ran again
(as the recovery page and the failure page do); only its time is left out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests import factory
from webapp.core.windows import Window
from webapp.failures.models import FailureEvent
from webapp.failures.reliability import reliability
from webapp.jobs.models import JobEvent


def test_a_replayed_failure_whose_job_ran_again_counts_as_running_again(db):
    factory.cluster_make("replay", nodes=["replay-01"], gpus=1)
    now = datetime.now(UTC).replace(microsecond=0)
    failed = now - timedelta(hours=1)
    job = factory.job_make("replay", "r1", [("replay-01", 0)], failed - timedelta(minutes=5))
    FailureEvent.objects.create(
        cluster=job.cluster,
        kind="job_failure",
        job=job,
        occurred_at=failed,
        detected_at=failed + timedelta(minutes=35),  # replayed history, heard of late
        diagnosed_at=failed + timedelta(minutes=35),
        source="rules",
        cause="aux_connection",
        category="infrastructure",
        action="retry",
    )
    JobEvent.objects.create(job=job, kind="started", ts=failed + timedelta(minutes=36))

    result = reliability(Window(job.cluster, now - timedelta(days=1), now))
    row = next(r for r in result.recovery if r.category == "infrastructure")
    assert (row.failures, row.running_again) == (1, 1)
    assert row.median_s is None  # its time holds the delay before Vigil heard of it
