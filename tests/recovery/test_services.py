"""Recovery planning over the failures on record (real PostgreSQL; failures diagnosed through
the failures services, which hand them to the recovery policy in the same transaction)."""

from __future__ import annotations

import time

import pytest

from tests.recovery.conftest import policy
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.recovery import services
from webapp.recovery.models import RecoveryAction, RecoveryPlan


def _now() -> float:
    return float(int(time.time()))


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


@pytest.mark.django_db
def test_circuit_breaker_same_node_twice_cordons_and_other_nodes_notify(fleet):
    now = _now()
    first = _cuda_fault_job(fleet, "500", "gpu-node-01", now - 5 * 3600)
    assert (first.cause, first.action, first.breaker) == ("cuda_fault", "restart", "")
    second = _cuda_fault_job(fleet, "501", "gpu-node-01", now - 3 * 3600)
    assert second.action == "cordon_restart"
    assert second.default_action == "restart"
    assert "gpu-node-01 twice within 24 h" in second.breaker
    kinds = list(second.recovery_plan.actions.values_list("kind", "host", "job_scheduler_id"))
    assert kinds == [("drain", "gpu-node-01", ""), ("requeue", "", "501")]
    third = _cuda_fault_job(fleet, "502", "gpu-node-02", now - 1 * 3600)
    assert third.action == "notify"
    assert "other nodes" in third.breaker


@pytest.mark.django_db
def test_breaker_forgets_after_24_hours(fleet):
    now = _now()
    _cuda_fault_job(fleet, "600", "gpu-node-01", now - 30 * 3600)
    later = _cuda_fault_job(fleet, "601", "gpu-node-01", now - 3600)
    assert later.action == "restart"


@pytest.mark.django_db
def test_a_new_cluster_only_records_what_it_would_do(fleet):
    failure = _cuda_fault_job(fleet, "700", "gpu-node-01", _now() - 60)
    (action,) = failure.recovery_plan.actions.all()
    assert failure.recovery_plan.mode == "dry_run"
    assert action.status == "dry_run"
    assert action.commands == [
        ["scontrol", "requeue", "700"],
        ["scontrol", "update", "JobId=700", "StartTime=now"],
    ]
    assert action.result == "dry run: would run 2 command(s)"
    assert not action.steps  # nothing ran


@pytest.mark.django_db
def test_diagnosing_again_with_the_same_cause_plans_nothing_new(fleet):
    policy("approve")
    failure = _cuda_fault_job(fleet, "710", "gpu-node-01", _now() - 60)
    failure_diagnose(failure.pk)
    failure_diagnose(failure.pk)
    assert RecoveryPlan.objects.count() == 1
    (action,) = RecoveryAction.objects.all()
    assert (action.kind, action.status) == ("requeue", "awaiting_approval")


@pytest.mark.django_db
def test_approving_twice_is_refused_with_the_reason_and_changes_nothing(fleet):
    policy("approve")
    failure = _cuda_fault_job(fleet, "720", "gpu-node-01", _now() - 60)
    (action,) = failure.recovery_plan.actions.all()
    services.action_approve(action.pk, "olivia")
    with pytest.raises(services.RecoveryError, match="only an action awaiting approval"):
        services.action_approve(action.pk, "mallory")
    action.refresh_from_db()
    assert (action.status, action.approved_by) == ("ready", "olivia")
    with pytest.raises(services.RecoveryError, match="no recovery action 999999"):
        services.action_approve(999999, "olivia")


@pytest.mark.django_db
def test_rejecting_the_drain_cancels_the_requeue_after_it(fleet):
    policy("approve")
    now = _now()
    _cuda_fault_job(fleet, "730", "gpu-node-01", now - 3 * 3600)
    second = _cuda_fault_job(fleet, "731", "gpu-node-01", now - 60)
    drain, requeue = second.recovery_plan.actions.order_by("seq")
    services.action_reject(drain.pk, "olivia", "node under maintenance")
    requeue.refresh_from_db()
    drain.refresh_from_db()
    assert drain.status == "rejected" and "node under maintenance" in drain.result
    assert requeue.status == "cancelled"


@pytest.mark.django_db
def test_a_new_diagnosis_replaces_the_plan_until_it_has_acted(fleet):
    # The job's end arrives before its log lines: first "unknown" (notify), then the
    # traceback comes and the same failure is diagnosed again as the user's own error.
    policy("auto")
    end = _now() - 60
    fleet.run_job("740", end - 3600, end, nodes=("gpu-node-01",))
    failure = FailureEvent.objects.get(job__scheduler_id="740")
    failure_diagnose(failure.pk)
    assert failure.recovery_plan.cause == "unknown"
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01",
            log_windows=[
                {
                    "job_id": "740",
                    "ts": end - 5,
                    "path": "/logs/740.err",
                    "first_line_no": 1,
                    "lines": [
                        "Traceback (most recent call last):",
                        '  File "/home/alice/train.py", line 3, in <module>',
                        "    step(1)",
                        "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
                    ],
                }
            ],
        )
    )
    again = failure_diagnose(failure.pk)
    assert again.cause == "user_exception"
    plan = RecoveryPlan.objects.get(failure=failure)
    assert (plan.cause, plan.rule) == ("user_exception", "script_error")
    statuses = sorted(plan.actions.values_list("kind", "status", "result"))
    assert statuses[0][:2] == ("notify", "cancelled") and "superseded" in statuses[0][2]
    assert statuses[1][:2] == ("notify", "succeeded")
