"""A failed and requeued job with its whole incident on record, for the job page's tests (a
helpers module: imported by test modules, never defining tests).

Job 4242 (4 GPUs on gpu-i-01) ran, its GPU 2 fell off the bus (Xid 79), the job failed; the
diagnosis blamed that GPU; the GPU error's recovery drained the node and requeued the job,
which runs again on gpu-i-02.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.models import Job, JobAllocation, JobEvent
from webapp.recovery.models import RecoveryAction, RecoveryPlan


@dataclass
class Incident:
    job: Job
    job_failure: FailureEvent
    gpu_failure: FailureEvent
    drain: RecoveryAction
    requeue: RecoveryAction
    blamed_gpu: Gpu
    run2_at: datetime


def incident_job(cluster_name: str = "kestrel") -> Incident:
    now = timezone.now().replace(microsecond=0)
    cluster, _ = Cluster.objects.get_or_create(name=cluster_name)
    first, second = (
        Node.objects.create(cluster=cluster, hostname=h, token_hash=f"h-{h}")
        for h in ("gpu-i-01", "gpu-i-02")
    )
    gpus = {
        (n.hostname, i): Gpu.objects.create(
            node=n, index=i, uuid=f"GPU-{n.hostname}-{i}", pci_bus_id=f"0000:{0x18 + i:02X}:00.0"
        )
        for n in (first, second)
        for i in range(4)
    }
    t0, failed_at = now - timedelta(hours=3), now - timedelta(hours=1)
    requeued_at, run2_at = failed_at + timedelta(minutes=2), failed_at + timedelta(minutes=5)
    # Created running (no failure signal fires), the first run's end recorded as events.
    job = Job.objects.create(
        cluster=cluster,
        scheduler_id="4242",
        name="pretrain-7b",
        user="alice",
        job_type="pretrain",
        state="running",
        submit_at=t0 - timedelta(minutes=1),
        start_at=run2_at,
        gpus_requested=4,
        nodes_requested=1,
    )
    for node, lo, hi in ((first, t0, failed_at), (second, run2_at, None)):
        JobAllocation.objects.bulk_create(
            JobAllocation(
                job=job, node=node, gpu=gpus[node.hostname, i], gpu_index=i, start=lo, end=hi
            )
            for i in range(4)
        )
    JobEvent.objects.bulk_create(
        [
            JobEvent(job=job, kind="submitted", ts=t0 - timedelta(minutes=1), state="pending"),
            JobEvent(job=job, kind="started", ts=t0, state="running"),
            JobEvent(job=job, kind="ended", ts=failed_at, state="node_fail", exit_code=1),
            JobEvent(job=job, kind="requeued", ts=requeued_at, state="pending"),
            JobEvent(job=job, kind="started", ts=run2_at, state="running"),
        ]
    )
    blamed = gpus["gpu-i-01", 2]
    xid = GpuErrorEvent.objects.create(
        node=first,
        gpu=blamed,
        gpu_index=2,
        pci_bus_id=blamed.pci_bus_id,
        ts=failed_at - timedelta(seconds=30),
        last_ts=failed_at - timedelta(seconds=30),
        kind="xid",
        xid=79,
        message="GPU has fallen off the bus.",
    )
    gpu_failure = FailureEvent.objects.create(
        cluster=cluster,
        kind="gpu_error",
        node=first,
        gpu=blamed,
        gpu_error=xid,
        occurred_at=xid.ts,
        detected_at=xid.ts + timedelta(seconds=5),
        diagnosed_at=xid.ts + timedelta(seconds=6),
        source="rules",
        cause="gpu_off_bus",
        category="infrastructure",
        action="reboot",
        blamed_node=first,
        blamed_gpu=blamed,
    )
    job_failure = FailureEvent.objects.create(
        cluster=cluster,
        kind="job_failure",
        job=job,
        occurred_at=failed_at,
        detected_at=failed_at + timedelta(seconds=4),
        diagnosed_at=failed_at + timedelta(seconds=8),
        source="rules",
        cause="gpu_off_bus",
        category="infrastructure",
        action="reboot",
        detail="Xid 79 on gpu-i-01 GPU 2",
        blamed_node=first,
        blamed_gpu=blamed,
    )
    plan = RecoveryPlan.objects.create(
        cluster=cluster,
        failure=gpu_failure,
        node=first,
        mode="auto",
        executor="simulated",
        cause="gpu_off_bus",
        action="reboot",
    )
    common = {"plan": plan, "cluster": cluster, "mode": "auto", "executor": "simulated"}
    drain = RecoveryAction.objects.create(
        **common,
        seq=1,
        kind="drain",
        status="succeeded",
        node=first,
        host=first.hostname,
        reason="Xid 79 on GPU 2: reboot needed",
        result="node drained",
        started_at=failed_at + timedelta(seconds=10),
        ended_at=failed_at + timedelta(seconds=11),
    )
    requeue = RecoveryAction.objects.create(
        **common,
        seq=2,
        kind="requeue",
        status="succeeded",
        job=job,
        job_scheduler_id=job.scheduler_id,
        reason="restart elsewhere",
        result="job requeued",
        started_at=requeued_at - timedelta(seconds=1),
        ended_at=requeued_at,
    )
    return Incident(job, job_failure, gpu_failure, drain, requeue, blamed, run2_at)
