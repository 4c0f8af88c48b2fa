"""A requeued job's page counts its GPUs, not its allocation rows: each run of a 1-GPU job
holds the same GPU again, and the page still says 1 GPU (over 2 runs)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from tests.jobs.helpers import allocate, ingest
from webapp.jobs.models import Job, JobEvent


def _requeued_one_gpu_job() -> Job:
    t0 = float(int(time.time()) - 30 * 60)
    base = datetime.fromtimestamp(t0, UTC)
    node = ingest("acme", "gpu-r-01", t0=t0, intervals=31, step_s=60, gpus=1, util=lambda i, k: 80)
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id="5150",
        name="finetune",
        user="erin",
        job_type="finetune",
        state="running",
        submit_at=base,
        start_at=base + timedelta(minutes=15),
        gpus_requested=1,
        nodes_requested=1,
    )
    # Run 1 on GPU 0, requeued after 10 minutes; run 2 on the same GPU, still running.
    allocate(job, node, [0], base, base + timedelta(minutes=10))
    allocate(job, node, [0], base + timedelta(minutes=15), None)
    JobEvent.objects.bulk_create(
        [
            JobEvent(job=job, kind="started", ts=base, state="running"),
            JobEvent(job=job, kind="requeued", ts=base + timedelta(minutes=10), state="pending"),
            JobEvent(job=job, kind="started", ts=base + timedelta(minutes=15), state="running"),
        ]
    )
    return job


def test_a_requeued_one_gpu_job_page_says_1_gpu_and_2_runs(operator_client, db):
    job = _requeued_one_gpu_job()
    response = operator_client.get(f"/jobs/{job.id}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Allocation: 1 GPU on 1 node, 2 runs" in page
    verdict = response.context["verdict"]
    assert verdict.lines[0] == "Mean GPU utilization 80% over 1 GPU, 2 runs."
    assert "2 GPUs" not in page
