"""A requeued job carries the GPU time of its runs before its current one
(Job.earlier_runs_gpu_time_s), recorded as the scheduler's requeue and next start are applied, in
order or late, and filled for jobs stored before the column by its migration: the
characterization sums that column instead of joining a cluster's allocations."""

from __future__ import annotations

from importlib import import_module

from django.db import connection

from tests.jobs.conftest import event
from webapp.jobs.models import Job
from webapp.jobs.services import job_events_ingest

ALLOC = [{"node": "gpu-node-01", "gpu_indices": list(range(8))}]
COMMON = {"job_type": "pretrain", "gpus_requested": 8}


def _earlier_h(scheduler_id: str) -> float:
    return Job.objects.get(scheduler_id=scheduler_id).earlier_runs_gpu_time_s / 3600


def test_the_requeue_records_the_earlier_runs_gpu_time(sender, t0):
    start = t0 - 7200
    job_events_ingest(
        sender.raw(
            event("9101", "submitted", start, submit_ts=start, **COMMON),
            event("9101", "started", start, submit_ts=start, start_ts=start, allocation=ALLOC),
        )
    )
    assert _earlier_h("9101") == 0.0
    job_events_ingest(sender.raw(event("9101", "requeued", start + 3600, submit_ts=start + 3600)))
    assert _earlier_h("9101") == 8.0  # an hour on 8 GPUs, while it waits
    job_events_ingest(
        sender.raw(
            event("9101", "started", start + 3660, submit_ts=start + 3600,
                  start_ts=start + 3660, allocation=ALLOC),
            event("9101", "ended", start + 5460, state="COMPLETED", exit_code=0,
                  end_ts=start + 5460),
        )
    )  # fmt: skip
    assert _earlier_h("9101") == 8.0  # the last run is the tally's, not counted twice


def test_a_requeue_reported_after_the_next_start_counts_the_run_it_ended(sender, t0):
    start = t0 - 7200
    job_events_ingest(
        sender.raw(
            event("9102", "started", start, submit_ts=start, start_ts=start, allocation=ALLOC,
                  **COMMON),
            event("9102", "started", start + 3660, submit_ts=start + 3600,
                  start_ts=start + 3660, allocation=ALLOC),
        )
    )  # fmt: skip
    # A late watcher: the requeue between the two runs arrives last.
    job_events_ingest(sender.raw(event("9102", "requeued", start + 3600, submit_ts=start + 3600)))
    assert _earlier_h("9102") == 8.0


def test_a_second_start_with_no_requeue_seen_still_counts_the_first_run(sender, t0):
    """A watcher that missed the requeue: the new start ends the old run (its allocations
    closed then), and that run's GPU time counts all the same."""
    start = t0 - 7200
    job_events_ingest(
        sender.raw(
            event("9104", "started", start, submit_ts=start, start_ts=start, allocation=ALLOC,
                  **COMMON),
        )
    )  # fmt: skip
    job_events_ingest(
        sender.raw(
            event("9104", "started", start + 1800, submit_ts=start, start_ts=start + 1800,
                  allocation=ALLOC),
        )
    )  # fmt: skip
    assert _earlier_h("9104") == 4.0


def test_the_migration_fills_jobs_requeued_before_the_column(sender, t0):
    start = t0 - 7200
    job_events_ingest(
        sender.raw(
            event("9103", "started", start, submit_ts=start, start_ts=start, allocation=ALLOC,
                  **COMMON),
            event("9103", "requeued", start + 1800, submit_ts=start + 1800),
        )
    )  # fmt: skip
    Job.objects.update(earlier_runs_gpu_time_s=0.0)  # as stored before the column
    migration = import_module("webapp.jobs.migrations.0007_job_earlier_runs_gpu_time")
    with connection.cursor() as cur:
        migration.earlier_runs_fill(cur)
    assert _earlier_h("9103") == 4.0
