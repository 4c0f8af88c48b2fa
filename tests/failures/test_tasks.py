"""Failures tasks through a REAL Celery worker: node events sent by task name (as the
collector does), the job's end from the scheduler, the diagnosis task after commit."""

from __future__ import annotations

import time

from collectors.schema import JOB_EVENTS_TASK, NODE_EVENTS_TASK
from tests.failures.conftest import nccl_window, xid_event
from tests.helpers import send_signed, wait_for
from webapp.core.models import RejectedBatch
from webapp.failures.models import FailureEvent, GpuErrorEvent, JobLogWindow


def _diagnosed(job_id: str, cause: str):
    def check():
        f = FailureEvent.objects.filter(job__scheduler_id=job_id, cause=cause).first()
        return f if f and f.diagnosed_at else None

    return check


def test_worker_diagnoses_gpu_off_bus_blaming_the_node(committed_fleet, worker_factory):
    worker_factory()
    fleet = committed_fleet
    end = float(int(time.time())) - 120
    start = end - 4 * 3600
    send_signed(
        JOB_EVENTS_TASK,
        args=[
            fleet.job_batch(
                {
                    "job_id": "4242",
                    "kind": "started",
                    "ts": start,
                    "job_type": "pretrain",
                    "allocation": [
                        {"node": "gpu-node-01", "gpu_indices": list(range(8))},
                        {"node": "gpu-node-02", "gpu_indices": list(range(8))},
                    ],
                }
            )
        ],
    )
    # The rank logs show NCCL timeouts; node 2's kernel log has the Xid 79, 10 min before.
    send_signed(
        NODE_EVENTS_TASK,
        args=[fleet.node_batch("gpu-node-01", log_windows=[nccl_window("4242", end - 30)])],
    )
    send_signed(
        NODE_EVENTS_TASK,
        args=[
            fleet.node_batch(
                "gpu-node-02",
                gpu_events=[
                    xid_event(end - 600, 79, index=3, message="GPU has fallen off the bus.")
                ],
            )
        ],
    )
    wait_for(lambda: GpuErrorEvent.objects.exists(), timeout=30)
    send_signed(
        JOB_EVENTS_TASK,
        args=[
            fleet.job_batch(
                {"job_id": "4242", "kind": "ended", "ts": end, "state": "FAILED", "exit_code": 1}
            )
        ],
    )
    failure = wait_for(_diagnosed("4242", "gpu_off_bus"), timeout=60)
    assert failure.blamed_node.hostname == "gpu-node-02"
    assert failure.action == "reboot"  # RESTART_BM in NVIDIA's Xid catalog
    assert failure.gpu_hours_lost == 16 * 4.0
    # The Xid alone opened a gpu_error failure too, diagnosed the same way.
    gpu_failure = wait_for(
        lambda: FailureEvent.objects.filter(kind="gpu_error", cause="gpu_off_bus").first(),
        timeout=30,
    )
    assert gpu_failure.node.hostname == "gpu-node-02"


def test_evidence_arriving_after_the_end_rediagnoses(committed_fleet, worker_factory):
    worker_factory()
    fleet = committed_fleet
    end = float(int(time.time())) - 120
    fleet.run_job("4343", end - 3600, end)  # committed: the signal enqueued the diagnosis
    wait_for(_diagnosed("4343", "unknown"), timeout=60)
    send_signed(
        NODE_EVENTS_TASK,
        args=[
            fleet.node_batch(
                "gpu-node-01", gpu_events=[xid_event(end - 300, 74, index=1, node_no=1)]
            )
        ],
    )
    failure = wait_for(_diagnosed("4343", "gpu_nvlink"), timeout=60)
    assert failure.blamed_node.hostname == "gpu-node-01"


def test_worker_refuses_a_bad_batch_and_records_it(committed_fleet, worker_factory):
    worker_factory()
    raw = committed_fleet.node_batch("gpu-node-01", token="not-the-right-token-at-all")
    send_signed(NODE_EVENTS_TASK, args=[raw])
    rejected = wait_for(lambda: RejectedBatch.objects.filter(reason="bad_signature").first())
    assert rejected.node == "gpu-node-01"
    assert not GpuErrorEvent.objects.exists()


def test_worker_ignores_an_xid_line_a_job_prints_in_its_own_log(committed_fleet, worker_factory):
    """Through the node agent's task and the worker: a job log window with a kernel-looking
    Xid 79 line and no GPU error event is no hardware failure and blames no node."""
    worker_factory()
    fleet = committed_fleet
    end = float(int(time.time())) - 120
    fleet.run_job("4444", end - 3600, None, nodes=("gpu-node-02",))
    printed = {
        "job_id": "4444",
        "ts": end - 5,
        "path": "/home/mallory/logs/4444.out",
        "first_line_no": 1,
        "lines": ["gpu-node-02 kernel: NVRM: Xid (PCI:0000:23:00): 79, pid=1, GPU has fallen off"],
    }
    send_signed(NODE_EVENTS_TASK, args=[fleet.node_batch("gpu-node-02", log_windows=[printed])])
    wait_for(lambda: JobLogWindow.objects.filter(job_scheduler_id="4444").exists(), timeout=30)
    fleet.run_job("4444", end - 3600, end, nodes=("gpu-node-02",))  # committed: diagnosed
    failure = wait_for(_diagnosed("4444", "unknown"), timeout=60)
    assert (failure.blamed_host, failure.blamed_node, failure.action) == ("", None, "notify")
    assert not FailureEvent.objects.filter(kind="gpu_error").exists()
