"""An idle-GPU alert ends with its job: the hysteresis that keeps a job's alert through a busy
sample does not hold it once the job has ended, pending or firing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.alerts.helpers import idle_allocate, idle_job_on, idle_samples
from webapp.alerts import evaluate
from webapp.alerts.choices import AlertState
from webapp.alerts.models import Alert
from webapp.jobs.models import Job, JobAllocation


def _end(job: Job, at: datetime) -> None:
    Job.objects.filter(pk=job.pk).update(state="completed", end_at=at)
    JobAllocation.objects.filter(job=job).update(end=at)


@pytest.mark.parametrize("fire", [False, True], ids=["pending", "firing"])
def test_an_idle_alert_resolves_once_its_job_has_completed(fleet, fire):
    job, token = idle_job_on("idle-end-01", 1, "701")
    idle_samples("idle-end-01", token, 1, 0.0, 40)
    idle_allocate(job, "idle-end-01", 1)
    now = datetime.now(UTC)
    evaluate.alerts_evaluate(now)
    if fire:  # idle past the rule's hold: firing
        evaluate.alerts_evaluate(now + timedelta(hours=2))
        now += timedelta(hours=2)
    [alert] = Alert.objects.filter(rule__name="gpus-idle", job=job)
    assert alert.state == (AlertState.FIRING if fire else AlertState.PENDING)
    _end(job, now + timedelta(seconds=5))
    # The next round, well within the idle clear time: the job is gone, so is its alert.
    evaluate.alerts_evaluate(now + timedelta(seconds=15))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED
    assert not Alert.objects.filter(
        rule__name="gpus-idle", job=job, state__in=["pending", "firing"]
    )
