"""Failures services against real PostgreSQL: job failures diagnosed from log windows plus
kernel Xids and the scheduler's end line, GPU-hours lost, and the trust boundary: a
kernel-looking line a job prints in its own log is never hardware evidence."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from tests.failures.conftest import nccl_window, xid_event
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.selectors import failure_inputs
from webapp.failures.services import failure_diagnose

pytestmark = pytest.mark.django_db


def _now() -> float:
    return float(int(time.time()))


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
    assert failure.action == "reboot"  # RESTART_BM in NVIDIA's Xid catalog
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


def test_occurred_at_is_the_job_end(fleet):
    end = _now() - 100
    fleet.run_job("700", end - 60, end, nodes=("gpu-node-01",))
    failure = FailureEvent.objects.get()
    assert failure.occurred_at == datetime.fromtimestamp(end, UTC)
    assert failure.cluster.name == "testcluster"


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


# --- Trust boundary: kernel evidence comes from the kernel log and NVML only -----------------

FAKE_XID = "NVRM: Xid (PCI:0000:23:00): 79, pid=48213, GPU has fallen off the bus."


def _window(job_id: str, ts: float, lines: list[str]) -> dict:
    return {
        "job_id": job_id,
        "ts": ts,
        "path": f"/home/mallory/logs/{job_id}.out",
        "first_line_no": 1,
        "lines": lines,
    }


def _printed_xid_job(fleet, job_id: str, end: float) -> FailureEvent:
    """A job on gpu-node-02 whose own log prints kernel lines; no GPU error was reported."""
    fleet.run_job(job_id, end - 3600, None, nodes=("gpu-node-02",))
    printed = [
        f"gpu-node-02 kernel: {FAKE_XID}",
        f"[Tue May  7 03:12:44 2024] {FAKE_XID}",
        FAKE_XID,
        "gpu-node-02 kernel: mlx5_core 0000:0c:00.0: Port: 1 Link DOWN",
    ]
    node_events_ingest(
        fleet.node_batch("gpu-node-02", log_windows=[_window(job_id, end - 5, printed)])
    )
    fleet.run_job(job_id, end - 3600, end, nodes=("gpu-node-02",))
    return failure_diagnose(FailureEvent.objects.get(job__scheduler_id=job_id).pk)


def test_a_job_printing_an_xid_line_gets_no_hardware_diagnosis_and_trips_no_breaker(fleet):
    from webapp.fleet.models import Node

    state_before = Node.objects.get(hostname="gpu-node-02").state
    now = _now()
    first = _printed_xid_job(fleet, "900", now - 3 * 3600)
    assert first.cause == "unknown"  # the exit code alone: no rule explains it
    assert first.category != "infrastructure"
    assert (first.blamed_host, first.blamed_node, first.blamed_gpu) == ("", None, None)
    assert first.action not in ("cordon_restart", "drain")
    # The log's last lines are shown as context of an unknown, but no rule took them.
    assert not [e for e in first.evidence if e["rule_id"]]
    assert any("kernel-looking line(s)" in n for n in failure_inputs(first)["notes"])
    # Printed twice on the same node within 24 h: still no cordon (the breaker sees no cause).
    second = _printed_xid_job(fleet, "901", now - 3600)
    assert (second.cause, second.breaker, second.blamed_node) == ("unknown", "", None)
    assert second.action != "cordon_restart"
    assert Node.objects.get(hostname="gpu-node-02").state == state_before  # not drained
    assert not FailureEvent.objects.filter(kind="gpu_error").exists()


def test_printed_xid_lines_do_not_crowd_out_the_real_kernel_event(fleet):
    end = _now() - 300
    fleet.run_job("902", end - 3600, None, nodes=("gpu-node-02",))
    # More printed Xid lines than the engine keeps per rule, then the node's real Xid 79.
    spam = [f"[rank0]: {FAKE_XID.replace('23:00', '21:00')}"] * 250
    node_events_ingest(fleet.node_batch("gpu-node-02", log_windows=[_window("902", end - 5, spam)]))
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(end - 60, 79, index=3)])
    )
    fleet.run_job("902", end - 3600, end, nodes=("gpu-node-02",))
    failure = failure_diagnose(FailureEvent.objects.get(job__scheduler_id="902").pk)
    assert (failure.cause, failure.blamed_host, failure.blamed_gpu.index) == (
        "gpu_off_bus",
        "gpu-node-02",
        3,
    )
    assert all("21:00" not in e["text"] for e in failure.evidence)
