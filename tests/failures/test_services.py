"""Failures services against real PostgreSQL: node-event ingest, job failures diagnosed from
log windows plus kernel Xids, the circuit breaker and GPU-hours lost."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from collectors.schema import GPU_FIELD_NAMES, BatchError
from tests.failures.conftest import nccl_window, xid_event
from webapp.core.refusals import AuthError
from webapp.failures.models import FailureEvent, GpuErrorEvent, JobLogWindow
from webapp.failures.services import (
    breaker_apply,
    failure_diagnose,
    node_events_ingest,
)
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db


def _now() -> float:
    return float(int(time.time()))


# --- Ingest ----------------------------------------------------------------------------------


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


# --- Job failures ----------------------------------------------------------------------------


def test_nccl_timeout_with_an_xid_79_on_one_node_is_gpu_off_bus_blaming_that_node(fleet):
    end = _now() - 300
    start = end - 6 * 3600
    fleet.run_job("200", start, None, last_checkpoint_ts=end - 1800)
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-02",
            gpu_events=[xid_event(end - 700, 79, index=3, message="GPU has fallen off the bus.")],
        )
    )
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=[nccl_window("200", end - 60)]))
    fleet.run_job("200", start, end)  # the scheduler reports the end
    failure = FailureEvent.objects.get(kind="job_failure")
    assert failure.source == "pending"
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    assert failure.cause == "gpu_off_bus"
    assert failure.category == "infrastructure"
    assert failure.action == "cordon_restart"
    assert failure.blamed_node.hostname == "gpu-node-02"
    assert failure.blamed_gpu.index == 3
    assert failure.alias == "NodeFailure"
    assert failure.source == "rules"
    assert any("Xid (PCI:00000000:23:00.0): 79" in e["text"] for e in failure.evidence)
    assert any("Watchdog caught collective" in e["text"] for e in failure.evidence)
    # 16 GPUs x 30 min since the last checkpoint.
    assert failure.gpu_hours_lost == pytest.approx(8.0)


def test_failed_job_without_checkpoint_loses_its_whole_run(fleet):
    end = _now() - 300
    fleet.run_job("201", end - 2 * 3600, end, nodes=("gpu-node-01",))
    failure = FailureEvent.objects.get(job__scheduler_id="201")
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    assert failure.gpu_hours_lost == pytest.approx(16.0)  # 8 GPUs x 2 h
    assert failure.cause == "unknown"  # nothing but the exit code: no rule explains it


def test_node_fail_and_timeout_states_are_diagnosed_from_the_scheduler_line(fleet):
    end = _now() - 300
    fleet.run_job("300", end - 3600, end, state="NODE_FAIL", nodes=("gpu-node-01",))
    fleet.run_job("301", end - 3600, end, state="TIMEOUT", nodes=("gpu-node-02",))
    fleet.run_job("302", end - 3600, end, state="COMPLETED", nodes=("gpu-node-02",))
    causes = {}
    for f in FailureEvent.objects.all():
        failure_diagnose(f.pk)
        f.refresh_from_db()
        causes[f.job.scheduler_id] = (f.cause, f.category, f.blamed_host)
    assert causes == {
        "300": ("node_lost", "infrastructure", "gpu-node-01"),
        "301": ("timeout", "outcome", ""),
    }


def test_late_log_window_triggers_a_new_diagnosis(fleet, django_capture_on_commit_callbacks):
    end = _now() - 300
    fleet.run_job("400", end - 3600, end, nodes=("gpu-node-01",))
    failure = FailureEvent.objects.get()
    failure_diagnose(failure.pk)
    with django_capture_on_commit_callbacks() as callbacks:
        node_events_ingest(
            fleet.node_batch(
                "gpu-node-01",
                log_windows=[
                    {
                        "job_id": "400",
                        "ts": end - 10,
                        "path": "/logs/400.err",
                        "first_line_no": 1,
                        "lines": [
                            "Traceback (most recent call last):",
                            '  File "/home/alice/train.py", line 12, in <module>',
                            "    main(cfg['lr'])",
                            "KeyError: 'lr'",
                        ],
                    }
                ],
            )
        )
    assert len(callbacks) == 1  # the diagnosis task is enqueued again, after commit
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    assert (failure.cause, failure.category, failure.alias) == (
        "user_exception",
        "script",
        "KeyError",
    )


# --- Circuit breaker -------------------------------------------------------------------------


def test_breaker_rules_over_plain_data():
    assert breaker_apply("restart", "n1", []) == ("restart", "")
    assert breaker_apply("restart", "n1", ["n1"])[0] == "cordon_restart"
    assert breaker_apply("retry", "n1", ["n2", "n3"])[0] == "notify"
    # Hardware faults on different nodes are independent: no change.
    assert breaker_apply("cordon_restart", "n1", ["n2"]) == ("cordon_restart", "")
    assert breaker_apply("restart", "n1", [], restarts_in_a_row=3)[0] == "notify"


def _cuda_fault_job(fleet, job_id: str, node: str, end: float) -> FailureEvent:
    fleet.run_job(job_id, end - 3600, None, nodes=(node,))
    node_events_ingest(
        fleet.node_batch(
            node,
            log_windows=[
                {
                    "job_id": job_id,
                    "ts": end - 5,
                    "path": f"/logs/{job_id}.err",
                    "first_line_no": 10,
                    "lines": [
                        f"{node}: RuntimeError: CUDA error: an illegal memory access was "
                        "encountered"
                    ],
                }
            ],
        )
    )
    fleet.run_job(job_id, end - 3600, end, nodes=(node,))
    failure = FailureEvent.objects.get(job__scheduler_id=job_id)
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    return failure


def test_circuit_breaker_same_node_twice_cordons_and_other_nodes_notify(fleet):
    now = _now()
    first = _cuda_fault_job(fleet, "500", "gpu-node-01", now - 5 * 3600)
    assert (first.cause, first.action, first.breaker) == ("cuda_fault", "restart", "")
    second = _cuda_fault_job(fleet, "501", "gpu-node-01", now - 3 * 3600)
    assert second.action == "cordon_restart"
    assert second.default_action == "restart"
    assert "gpu-node-01 twice within 24 h" in second.breaker
    third = _cuda_fault_job(fleet, "502", "gpu-node-02", now - 1 * 3600)
    assert third.action == "notify"
    assert "other nodes" in third.breaker


def test_breaker_forgets_after_24_hours(fleet):
    now = _now()
    _cuda_fault_job(fleet, "600", "gpu-node-01", now - 30 * 3600)
    later = _cuda_fault_job(fleet, "601", "gpu-node-01", now - 3600)
    assert later.action == "restart"


def test_occurred_at_is_the_job_end(fleet):
    end = _now() - 100
    fleet.run_job("700", end - 60, end, nodes=("gpu-node-01",))
    failure = FailureEvent.objects.get()
    assert failure.occurred_at == datetime.fromtimestamp(end, UTC)
    assert failure.cluster.name == "testcluster"


# --- Stragglers ------------------------------------------------------------------------------


def test_straggler_rule_over_plain_data():
    from datetime import timedelta

    from webapp.failures.services import stragglers_find

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    minutes = [t0 + timedelta(minutes=k) for k in range(3)]

    def series(slow: list[float]) -> dict:
        return {
            g: {m: {"sm_active": (slow[k] if g == 2 else 0.8)} for k, m in enumerate(minutes)}
            for g in range(4)
        }

    found = stragglers_find(series([0.3, 0.3, 0.3]), minutes)
    assert set(found) == {2} and found[2]["sm_active"][0] == (0.3, 0.8)
    assert stragglers_find(series([0.3, 0.79, 0.3]), minutes) == {}  # recovered one minute


def test_straggling_gpu_of_a_running_job_is_a_performance_event(fleet, operator_client):
    from tests.helpers import make_batch
    from webapp.telemetry.services import rollups_refresh, samples_ingest

    now = _now()
    t0 = (now // 60) * 60 - 15 * 60
    fleet.run_job("800", t0 - 60, None, nodes=("gpu-node-01",))
    batch = make_batch(
        "testcluster",
        "gpu-node-01",
        fleet.tokens["gpu-node-01"],
        t0=t0,
        intervals=15 * 4,
        step_s=15,
        uuid_prefix="GPU-gpu-node-01",
    )
    sm = 2 + GPU_FIELD_NAMES.index("sm_active")  # wire row: index, ts, then the fields
    for row in batch["samples"]:
        row[sm] = 0.2 if row[0] == 5 else 0.7
    samples_ingest(json.dumps(batch))
    rollups_refresh()
    from webapp.failures.services import stragglers_detect

    assert stragglers_detect() == 1
    assert stragglers_detect() == 0  # once per job run and GPU
    event = FailureEvent.objects.get(kind="performance")
    assert (event.job.scheduler_id, event.gpu.index, event.blamed_node.hostname) == (
        "800",
        5,
        "gpu-node-01",
    )
    assert "sm_active" in event.detail
    assert event.evidence[0]["text"].endswith("vs job median 0.7")
    page = operator_client.get(f"/failures/{event.pk}/").content.decode()
    assert "straggler" in page and "vs job median 0.7" in page
    timeline = operator_client.get("/failures/").context["figures"]["timeline"]
    assert [t["name"] for t in timeline["data"]] == ["performance"]
    # Not a failure: reliability does not count it.
    assert operator_client.get("/failures/reliability/").context["r"].failures == 0


def test_node_fail_of_a_multi_node_job_blames_the_down_node_or_none(fleet):
    from webapp.fleet.models import Node

    end = _now() - 300
    fleet.run_job("310", end - 3600, end, state="NODE_FAIL")
    failure = FailureEvent.objects.get()
    Node.objects.filter(hostname="gpu-node-02").update(state="down")
    assert failure_diagnose(failure.pk).blamed_host == "gpu-node-02"
    # Both nodes down: which one failed is not known, so none is blamed (never a wrong one).
    Node.objects.filter(hostname="gpu-node-01").update(state="down")
    again = failure_diagnose(failure.pk)
    assert (again.cause, again.blamed_host, again.blamed_node) == ("node_lost", "", None)


def test_xid_just_before_the_start_explains_a_job_that_died_at_once(fleet):
    end = _now() - 300
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(end - 120, 79, index=3)])
    )
    fleet.run_job("210", end - 60, end)
    failure = failure_diagnose(FailureEvent.objects.get(kind="job_failure").pk)
    assert (failure.cause, failure.blamed_host) == ("gpu_off_bus", "gpu-node-02")
