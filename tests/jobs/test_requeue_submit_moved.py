"""Slurm moves a requeued job's submit time to the requeue (sacct(1): Submit); the event that
says so is stored, not refused as a job that started before it was submitted."""

from __future__ import annotations

from tests.jobs.conftest import event
from webapp.core.models import RejectedBatch
from webapp.jobs.models import Job
from webapp.jobs.services import job_events_ingest


def test_a_requeue_that_moves_the_submit_time_is_stored_and_the_job_runs_again(sender, t0):
    alloc = [{"node": "gpu-node-01", "gpu_indices": [0, 1]}]
    job_events_ingest(
        sender.raw(
            event("7001", "submitted", t0, submit_ts=t0, user="alice"),
            event("7001", "started", t0 + 30, submit_ts=t0, start_ts=t0 + 30, allocation=alloc),
        )
    )
    # The recovery requeues it: Slurm's submit time is now the requeue's.
    job_events_ingest(sender.raw(event("7001", "requeued", t0 + 600, submit_ts=t0 + 600)))
    assert not RejectedBatch.objects.exists()
    job = Job.objects.get(scheduler_id="7001")
    assert job.state == "pending" and job.start_at is None

    job_events_ingest(
        sender.raw(
            event("7001", "started", t0 + 605, submit_ts=t0 + 600, start_ts=t0 + 605,
                  allocation=alloc)
        )
    )  # fmt: skip
    job.refresh_from_db()
    assert job.state == "running"
    assert job.start_at.timestamp() == t0 + 605 and job.submit_at.timestamp() == t0 + 600
