"""Helpers shared by the tests of this package (imported, never defined, by test modules)."""

from __future__ import annotations

import time

from tests.failures.conftest import nccl_window, xid_event
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose


def failed_job(fleet, job_id: str, *, with_logs: bool = True, **kw) -> FailureEvent:
    """A job that failed and was diagnosed, through the real ingest and diagnosis."""
    end = _now() - 300
    start = end - 6 * 3600
    if with_logs:
        fleet.run_job(job_id, start, None, last_checkpoint_ts=end - 1800, **kw)
        node_events_ingest(
            fleet.node_batch(
                "gpu-node-02",
                gpu_events=[
                    xid_event(end - 700, 79, index=3, message="GPU has fallen off the bus.")
                ],
            )
        )
        node_events_ingest(
            fleet.node_batch("gpu-node-01", log_windows=[nccl_window(job_id, end - 60)])
        )
    fleet.run_job(job_id, start, end, **kw)
    failure = FailureEvent.objects.get(kind="job_failure", job__scheduler_id=job_id)
    return failure_diagnose(failure.pk)


def _now() -> float:
    return float(int(time.time()))
