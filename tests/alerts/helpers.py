"""Helpers shared by the tests of this package (imported, never defined, by test modules)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

from django.utils import timezone

from tests.failures.conftest import nccl_window, xid_event
from tests.helpers import make_batch
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Node
from webapp.jobs.models import Job, JobAllocation
from webapp.telemetry.services import samples_ingest


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


# --- Jobs whose GPUs idle (the idle-GPU rule's tests) ------------------------------------


def idle_job_on(hostname: str, gpus: int, scheduler_id: str) -> tuple[Job, str]:
    token = fleet_services.node_token_issue("idlecluster", hostname)
    node = Node.objects.get(hostname=hostname)
    start = timezone.now() - timedelta(hours=1)
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id=scheduler_id,
        name="pretrain-70b",
        state="running",
        start_at=start,
        gpus_requested=gpus,
    )
    return job, token


def idle_samples(hostname: str, token: str, gpus: int, util: float, ago_s: float) -> None:
    batch = make_batch(
        "idlecluster", hostname, token, t0=time.time() - ago_s, gpus=gpus,
        uuid_prefix=f"GPU-{hostname}-",
    )  # fmt: skip
    for row in batch["samples"]:
        row[2] = util  # gpu_util, first of the wire's GPU fields
    samples_ingest(json.dumps(batch))


def idle_allocate(job: Job, hostname: str, gpus: int) -> None:
    node = Node.objects.get(hostname=hostname)
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, node=node, gpu_index=i, start=job.start_at) for i in range(gpus)
    )
