"""Node-event ingest against real PostgreSQL: GPU errors and job log windows stored once, bursts
of critical Xids opening one gpu_error failure, bad batches refused whole."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone

from collectors.schema import NODE_EVENTS_TASK, BatchError
from tests.failures.conftest import nccl_window, xid_event
from tests.helpers import send_signed, wait_for
from webapp.core.refusals import AuthError
from webapp.failures.models import FailureEvent, GpuErrorEvent, JobLogWindow
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet.models import Gpu
from webapp.jobs.models import Job
from webapp.jobs.services import job_events_ingest
from webapp.telemetry.models import GpuLatest

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


def test_a_burst_of_xids_on_one_gpu_is_one_incident_row_set_and_one_failure(fleet):
    t = _now() - 900
    # Xid 48 then its cleanup Xid 45, repeated every 20 s on GPU 2, in two batches.
    lines = [xid_event(t + i * 20, 48 if i % 2 == 0 else 45, index=2, node_no=1) for i in range(8)]
    for part in (lines[:4], lines[4:]):
        node_events_ingest(fleet.node_batch("gpu-node-01", gpu_events=part))
    rows = {e.xid: e for e in GpuErrorEvent.objects.all()}
    assert sorted(rows) == [45, 48]
    assert (rows[48].count, rows[45].count) == (4, 4)
    assert (rows[48].ts.timestamp(), rows[48].last_ts.timestamp()) == (t, t + 120)
    failure = FailureEvent.objects.get(kind="gpu_error")
    assert failure.gpu_error == rows[48]  # the root Xid of the incident
    burst = failure.gpu_error.burst()
    assert (burst.lines, burst.xids, burst.last.timestamp()) == (8, [45, 48], t + 140)
    # After 3 min of silence the GPU's next Xid 48 is a new incident.
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01", gpu_events=[xid_event(t + 140 + 181, 48, index=2, node_no=1)]
        )
    )
    assert FailureEvent.objects.filter(kind="gpu_error").count() == 2
    assert GpuErrorEvent.objects.filter(xid=48).count() == 2


def test_two_gpus_failing_in_one_burst_are_two_incidents(fleet):
    t = _now() - 600
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01",
            gpu_events=[xid_event(t + i * 20, 79, index=i % 2, node_no=1) for i in range(6)],
        )
    )
    assert GpuErrorEvent.objects.count() == 2
    failures = FailureEvent.objects.filter(kind="gpu_error")
    assert sorted(f.gpu_error.gpu_index for f in failures) == [0, 1]


def test_an_xid_48_on_a_gpu_whose_remap_failed_escalates(fleet):
    t = _now() - 60  # detected as it happens (a late one is only told)
    gpu = Gpu.objects.get(node__hostname="gpu-node-01", index=2)
    GpuLatest.objects.create(gpu=gpu, ts=timezone.now(), remap_failure=1, remap_pending=0)
    node_events_ingest(
        fleet.node_batch("gpu-node-01", gpu_events=[xid_event(t, 48, index=2, node_no=1)])
    )
    failure = failure_diagnose(FailureEvent.objects.get(kind="gpu_error").pk)
    assert (failure.cause, failure.action) == ("gpu_ecc", "escalate")
    assert any("row remap failure" in e["text"] for e in failure.evidence)


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


def test_a_flood_of_1000_xid_lines_through_the_worker_is_one_row_and_one_failure(
    committed_fleet, worker_factory
):
    """NVSentinel's users saw one repeated Xid become hundreds of fatal events: here 1,000
    lines of one burst on one GPU, in four batches through a real worker, are one row (count
    1,000) and one gpu_error failure, diagnosed once to one action."""
    worker_factory()
    t = _now() - 500  # detected as it happens (a late one is only told)
    lines = [xid_event(t + i / 2, 79, index=5, node_no=1) for i in range(1000)]
    for n in range(4):
        batch = committed_fleet.node_batch("gpu-node-01", gpu_events=lines[n * 250 : (n + 1) * 250])
        send_signed(NODE_EVENTS_TASK, args=[batch])
    row = wait_for(lambda: GpuErrorEvent.objects.filter(xid=79, count=1000).first(), timeout=60)
    failure = wait_for(
        lambda: FailureEvent.objects.filter(kind="gpu_error", diagnosed_at__isnull=False).first(),
        timeout=60,
    )
    assert GpuErrorEvent.objects.count() == 1
    assert (row.ts.timestamp(), row.last_ts.timestamp()) == (t, t + 499.5)
    assert FailureEvent.objects.count() == 1
    assert (failure.gpu_error_id, failure.cause, failure.action) == (
        row.pk,
        "gpu_off_bus",
        "reboot",
    )
    # The evidence is one kernel line with the count, not 1,000.
    assert [e["text"].endswith("[x1000]") for e in failure.evidence] == [True]


def test_the_failure_page_shows_the_incidents_burst(fleet, operator_client):
    t = _now() - 900
    lines = [xid_event(t + i * 20, 48 if i % 2 == 0 else 45, index=2, node_no=1) for i in range(8)]
    node_events_ingest(fleet.node_batch("gpu-node-01", gpu_events=lines))
    failure = FailureEvent.objects.get(kind="gpu_error")
    body = operator_client.get(f"/failures/{failure.pk}/").content.decode()
    incident = body.split('id="incident">', 1)[1].split("</td>", 1)[0]
    gpu = failure.gpu_error.gpu
    link = f'<a class="gpu-link" href="/gpus/{gpu.pk}/">GPU 2 (00000000:12:00.0)</a>'
    assert incident.startswith(f"root Xid 48 on {link} · 8 lines from ")
    assert incident.endswith("UTC · Xids 45, 48")
    # The GPU history: one row per Xid and burst, its first and last line and count.
    table = body.split('id="xid-table"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr><td>") == 2 and '<td class="num">4</td>' in table


def test_an_xid_154_naming_a_reboot_opens_an_incident_that_reboots(fleet):
    t = _now() - 600
    changed = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    back = "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)"
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01", gpu_events=[xid_event(t, 154, index=4, node_no=1, message=back)]
        )
    )
    assert not FailureEvent.objects.exists()  # back to none: nothing to do
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01", gpu_events=[xid_event(t + 600, 154, index=4, node_no=1, message=changed)]
        )
    )
    failure = failure_diagnose(FailureEvent.objects.get(kind="gpu_error").pk)
    assert (failure.action, failure.blamed_node.hostname) == ("reboot", "gpu-node-01")
