"""Node-event ingest against real PostgreSQL: GPU errors and job log windows stored once, bursts
of critical Xids opening one gpu_error failure, bad batches refused whole."""

from __future__ import annotations

import json
import time

import pytest

from collectors.schema import BatchError
from tests.failures.conftest import nccl_window, xid_event
from webapp.core.refusals import AuthError
from webapp.failures.models import FailureEvent, GpuErrorEvent, JobLogWindow
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.jobs.models import Job
from webapp.jobs.services import job_events_ingest

pytestmark = pytest.mark.django_db


def _now() -> float:
    return float(int(time.time()))


def test_ingest_stores_gpu_errors_and_windows_and_a_redelivery_adds_nothing(fleet):
    t = _now() - 600
    fleet.run_job("100", t - 3600, None)
    raw = fleet.node_batch(
        "gpu-node-02",
        gpu_events=[
            xid_event(t, 79, index=3, message="GPU has fallen off the bus."),
            {
                "ts": t + 1,
                "kind": "ecc_sbe",
                "source": "counter",
                "gpu_uuid": "GPU-gpu-node-02-05",
                "delta": 3,
            },
        ],
        log_windows=[nccl_window("100", t + 5), nccl_window("999", t + 5)],
    )
    first = node_events_ingest(raw)
    assert (first.gpu_events_stored, first.log_windows_stored) == (2, 2)
    again = node_events_ingest(raw)
    assert (again.gpu_events_stored, again.log_windows_stored, again.failures_opened) == (0, 0, 0)
    assert GpuErrorEvent.objects.count() == 2
    xid = GpuErrorEvent.objects.get(xid=79)
    # Resolved to the node's GPU by PCI bus id / index; the counter event by UUID.
    assert (xid.node.hostname, xid.gpu.index, xid.gpu.uuid) == (
        "gpu-node-02",
        3,
        "GPU-gpu-node-02-03",
    )
    sbe = GpuErrorEvent.objects.get(kind="ecc_sbe")
    assert sbe.gpu.index == 5
    windows = {w.job_scheduler_id: w for w in JobLogWindow.objects.all()}
    assert windows["100"].job == Job.objects.get(scheduler_id="100")
    assert windows["999"].job is None  # not known yet: kept with its scheduler id
    # The Xid 79 is page-worthy: one gpu_error failure, diagnosed gpu_off_bus on that node.
    failure = FailureEvent.objects.get(kind="gpu_error")
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    assert (failure.cause, failure.blamed_node.hostname, failure.blamed_gpu.index) == (
        "gpu_off_bus",
        "gpu-node-02",
        3,
    )


def test_a_burst_of_xids_is_one_gpu_error_failure(fleet):
    t = _now() - 600
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01",
            gpu_events=[xid_event(t + i * 20, 48, index=i, node_no=1) for i in range(4)],
        )
    )
    assert GpuErrorEvent.objects.count() == 4
    assert FailureEvent.objects.filter(kind="gpu_error").count() == 1


def test_non_critical_xids_open_no_failure(fleet):
    t = _now() - 600
    node_events_ingest(fleet.node_batch("gpu-node-01", gpu_events=[xid_event(t, 13, node_no=1)]))
    assert GpuErrorEvent.objects.count() == 1
    assert not FailureEvent.objects.exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"token": "x" * 32}, "bad_token"),
        ({"node": "nope-01"}, "unknown_node"),
        ({"gpu_events": [{"ts": 1.0, "kind": "xid", "source": "kmsg"}]}, "malformed"),
        (
            {
                "log_windows": [
                    {
                        "job_id": "1",
                        "ts": time.time() + 3600,
                        "path": "/x",
                        "first_line_no": 1,
                        "lines": [],
                    }
                ]
            },
            "future_timestamp",
        ),
    ],
)
def test_bad_batches_are_refused_whole(fleet, change, reason):
    batch = json.loads(fleet.node_batch("gpu-node-01", gpu_events=[xid_event(_now(), 79)]))
    batch.update(change)
    with pytest.raises((BatchError, AuthError)) as exc:
        node_events_ingest(json.dumps(batch))
    assert exc.value.reason == reason
    assert not GpuErrorEvent.objects.exists()


def test_a_node_cannot_send_log_windows_for_a_job_it_does_not_run(fleet):
    """A user on one node must not plant log lines in another node's job (and so steer its
    diagnosis): the window is dropped, the node's own job's window is kept."""
    t = _now() - 600
    fleet.run_job("300", t - 3600, None, nodes=("gpu-node-01",))
    fleet.run_job("301", t - 3600, None, nodes=("gpu-node-02",))
    result = node_events_ingest(
        fleet.node_batch(
            "gpu-node-02", log_windows=[nccl_window("300", t + 5), nccl_window("301", t + 5)]
        )
    )
    assert result.log_windows_stored == 1
    assert list(JobLogWindow.objects.values_list("job_scheduler_id", flat=True)) == ["301"]


def test_early_windows_attach_to_their_job_only_from_the_nodes_it_held(fleet):
    """Windows of a job not known yet are kept; once it is, only those sent by a node the job
    held GPUs on become its evidence."""
    t = _now() - 600
    for node in ("gpu-node-01", "gpu-node-02"):
        node_events_ingest(fleet.node_batch(node, log_windows=[nccl_window("400", t + 5)]))
    assert JobLogWindow.objects.filter(job__isnull=True).count() == 2

    fleet.run_job("400", t - 3600, t + 60, nodes=("gpu-node-01",))
    failure = FailureEvent.objects.get(job__scheduler_id="400")
    failure_diagnose(failure.pk)

    attached = JobLogWindow.objects.filter(job__scheduler_id="400")
    assert list(attached.values_list("node__hostname", flat=True)) == ["gpu-node-01"]
    assert JobLogWindow.objects.filter(job__isnull=True, node__hostname="gpu-node-02").exists()


def test_a_node_cannot_attach_windows_to_a_job_that_has_not_started(fleet):
    """A job known (submitted) but not placed yet: another node's window stays unattached and
    is not its evidence once the job runs elsewhere and fails."""
    t = _now() - 600
    job_events_ingest(
        fleet.job_batch({"job_id": "500", "kind": "submitted", "ts": t - 7200, "user": "alice"})
    )
    node_events_ingest(fleet.node_batch("gpu-node-02", log_windows=[nccl_window("500", t + 5)]))
    assert JobLogWindow.objects.get(job_scheduler_id="500").job is None

    fleet.run_job("500", t - 3600, t + 60, nodes=("gpu-node-01",))
    failure_diagnose(FailureEvent.objects.get(job__scheduler_id="500").pk)
    assert not JobLogWindow.objects.filter(job__scheduler_id="500").exists()


def test_corrected_ecc_errors_counted_by_a_gpu_open_no_failure(fleet):
    # A healthy GPU's single-bit (corrected) ECC counter rises now and then: recording it is
    # right, paging someone and draining the node for it is not.
    t = _now() - 600
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-02",
            gpu_events=[
                {"ts": t, "kind": "ecc_sbe", "source": "counter",
                 "gpu_uuid": "GPU-gpu-node-02-05", "delta": 2},
            ],
        )
    )  # fmt: skip
    assert GpuErrorEvent.objects.filter(kind="ecc_sbe").count() == 1
    assert not FailureEvent.objects.exists()
    # An uncorrectable (double-bit) error on the same GPU does.
    node_events_ingest(fleet.node_batch("gpu-node-02", gpu_events=[xid_event(t + 60, 48)]))
    assert FailureEvent.objects.filter(kind="gpu_error").count() == 1
