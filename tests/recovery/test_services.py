"""Recovery planning over the failures on record (real PostgreSQL; failures diagnosed through
the failures services, which hand them to the recovery policy in the same transaction)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import transaction

from tests.failures.conftest import NODES, xid_event
from tests.recovery.conftest import policy
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.recovery import execution, services
from webapp.recovery import policy as policy_module
from webapp.recovery.actions import actions_create
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy
from webapp.recovery.planning import failure_recovery_plan


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


def _xid_job(fleet, job_id: str, node: str, end: float, xid: int = 13) -> FailureEvent:
    """A job that died of a GPU fault its node's agent reported (kernel log, NVML)."""
    fleet.run_job(job_id, end - 3600, None, nodes=(node,))
    node_no = NODES.index(node) + 1
    node_events_ingest(
        fleet.node_batch(node, gpu_events=[xid_event(end - 5, xid, node_no=node_no)])
    )
    fleet.run_job(job_id, end - 3600, end, nodes=(node,))
    failure = FailureEvent.objects.get(job__scheduler_id=job_id)
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    return failure


@pytest.mark.django_db
def test_circuit_breaker_same_node_twice_cordons_and_other_nodes_notify(fleet):
    policy("auto")
    now = _now()
    # Minutes apart, each detected as it happened (a late one is only told: test_late_failures).
    first = _xid_job(fleet, "500", "gpu-node-01", now - 500)
    assert (first.cause, first.action, first.breaker) == ("cuda_fault", "restart", "")
    assert first.evidence[0]["file"] == "kernel"
    second = _xid_job(fleet, "501", "gpu-node-01", now - 300)
    assert second.action == "cordon_restart"
    assert second.default_action == "restart"
    assert "gpu-node-01 twice within 24 h" in second.breaker
    actions = second.recovery_plan.actions.order_by("seq")
    kinds = list(actions.values_list("kind", "host", "job_scheduler_id", "status"))
    # Node-agent evidence: the drain runs without waiting for anyone.
    assert kinds == [("drain", "gpu-node-01", "", "ready"), ("requeue", "", "501", "ready")]
    third = _xid_job(fleet, "502", "gpu-node-02", now - 100)
    assert third.action == "notify"
    assert "other nodes" in third.breaker


@pytest.mark.django_db
def test_a_jobs_own_log_never_trips_the_breaker(fleet):
    # Two jobs print a CUDA fault on the same node: text a user's code can print, so the
    # node is not drained for it; each job is only restarted.
    now = _now()
    first = _cuda_fault_job(fleet, "510", "gpu-node-01", now - 300)
    second = _cuda_fault_job(fleet, "511", "gpu-node-01", now - 100)
    assert (first.action, second.action, second.breaker) == ("restart", "restart", "")
    assert list(second.recovery_plan.actions.values_list("kind", flat=True)) == ["requeue"]


@pytest.mark.django_db
def test_breaker_forgets_after_24_hours(fleet):
    now = _now()
    _cuda_fault_job(fleet, "600", "gpu-node-01", now - 30 * 3600)
    later = _cuda_fault_job(fleet, "601", "gpu-node-01", now - 60)
    assert later.action == "restart"


@pytest.mark.django_db
def test_a_new_cluster_only_records_what_it_would_do(fleet):
    failure = _cuda_fault_job(fleet, "700", "gpu-node-01", _now() - 60)
    (action,) = failure.recovery_plan.actions.all()
    assert failure.recovery_plan.mode == "dry_run"
    assert action.status == "dry_run"
    assert action.commands == [
        ["scontrol", "requeue", "--", "700"],
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
    _xid_job(fleet, "730", "gpu-node-01", now - 3 * 3600)
    second = _xid_job(fleet, "731", "gpu-node-01", now - 60)
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


IB_FROM_ELSEWHERE = (
    "{host}:81234:81301 [2] NCCL INFO NET/IB : Got completion from peer 10.0.0.12<41839> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.11"
)


def _blamed_from_the_log(fleet, job_id: str, blamed: str) -> FailureEvent:
    """A job on gpu-node-01 whose own log blames `blamed` for a link failure."""
    end = _now() - 60
    fleet.run_job(job_id, end - 3600, None, nodes=("gpu-node-01",))
    window = {
        "job_id": job_id,
        "ts": end - 5,
        "path": f"/logs/{job_id}.out",
        "first_line_no": 1,
        "lines": [IB_FROM_ELSEWHERE.format(host=blamed)],
    }
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=[window]))
    fleet.run_job(job_id, end - 3600, end, nodes=("gpu-node-01",))
    failure = FailureEvent.objects.get(job__scheduler_id=job_id)
    failure_diagnose(failure.pk)
    # Whatever the diagnosis made of the line, recovery is planned as if it blamed that host
    # for a cordon (as the diagnosis did before it kept blame inside the job's nodes).
    RecoveryPlan.objects.filter(failure=failure).delete()
    FailureEvent.objects.filter(pk=failure.pk).update(
        cause="ib_link", category="infrastructure", default_action="cordon_restart",
        action="cordon_restart", blamed_host=blamed,
        evidence=[{"file": f"gpu-node-01:/logs/{job_id}.out:1", "line": 1, "text": "", "rule_id": ""}],
    )  # fmt: skip
    failure.refresh_from_db()
    with transaction.atomic():
        failure_recovery_plan(failure)
    return failure


@pytest.mark.django_db
def test_a_job_log_naming_another_node_never_acts_on_that_node(fleet):
    policy("auto")
    failure = _blamed_from_the_log(fleet, "800", "gpu-node-02")
    plan = failure.recovery_plan
    assert (plan.action, plan.rule) == ("locate_restart", "blamed_outside_job")
    actions = list(plan.actions.order_by("seq"))
    assert [(a.kind, a.status) for a in actions] == [
        ("health_check", "ready"),
        ("requeue", "ready"),
    ]
    assert actions[0].params["hosts"] == ["gpu-node-01"]  # the job's own node, located first
    assert "gpu-node-02" not in str([a.commands for a in actions])


@pytest.mark.django_db
def test_a_drain_on_the_jobs_log_alone_is_only_proposed(fleet):
    policy("auto")
    failure = _blamed_from_the_log(fleet, "810", "gpu-node-01")
    drain, requeue = failure.recovery_plan.actions.order_by("seq")
    assert (drain.kind, drain.host, drain.status) == ("drain", "gpu-node-01", "awaiting_approval")
    assert "from the job's log only: proposed for approval" in drain.reason
    assert requeue.status == "ready"  # it waits for the drain: approved, or rejected and cancelled


@pytest.mark.django_db
def test_no_command_is_built_for_a_host_that_is_not_a_node_of_the_cluster(fleet):
    policy("auto")
    failure = _xid_job(fleet, "820", "gpu-node-01", _now() - 60)
    plan = failure.recovery_plan
    steps = (policy_module.Step("drain", host="db-server-01", reason="test"),)
    with transaction.atomic():
        (drain,) = actions_create(plan, steps, {}, 10)
    assert (drain.status, drain.commands) == ("failed", [])
    assert drain.result == "failed: db-server-01: not a registered node of this cluster"


@pytest.mark.django_db
def test_switching_a_cluster_to_dry_run_cancels_what_has_not_started(fleet):
    policy("auto")
    now = _now()
    _xid_job(fleet, "900", "gpu-node-01", now - 3 * 3600)
    second = _xid_job(fleet, "901", "gpu-node-01", now - 60)
    drain, requeue = second.recovery_plan.actions.order_by("seq")
    assert (drain.status, requeue.status) == ("ready", "ready")
    services.recovery_policy_set(second.cluster_id, mode="dry_run", user="olivia")
    for action in (drain, requeue):
        action.refresh_from_db()
        assert action.status == "cancelled"
        assert action.result == "cancelled: the cluster was switched to dry_run by olivia"
        # A message already on its way changes nothing.
        assert execution.action_execute(action.pk, "worker-1").status == "cancelled"
        action.refresh_from_db()
        assert (action.status, action.steps, action.attempts) == ("cancelled", [], 0)


@pytest.mark.django_db
def test_the_mode_is_read_again_when_an_action_runs(fleet):
    policy("auto")
    failure = _xid_job(fleet, "910", "gpu-node-01", _now() - 60)
    (requeue,) = failure.recovery_plan.actions.all()
    RecoveryAction.objects.filter(pk=requeue.pk).update(not_before=None)
    # Switched behind the services' back (another process, a restore): the run sees it.
    RecoveryPolicy.objects.filter(cluster_id=failure.cluster_id).update(mode="dry_run")
    assert execution.action_execute(requeue.pk, "worker-1").status == "cancelled"
    requeue.refresh_from_db()
    assert requeue.status == "cancelled" and requeue.steps == []
    assert "switched to dry_run before it started" in requeue.result


@pytest.mark.django_db
def test_an_action_waits_for_its_earliest_start_in_the_task_and_the_sweep(fleet, settings):
    settings.VIGIL_RECOVERY_SETTLE_S = 12
    policy("auto")
    failure = _xid_job(fleet, "920", "gpu-node-01", _now() - 60)
    (requeue,) = failure.recovery_plan.actions.all()
    assert requeue.not_before == requeue.created_at + timedelta(seconds=12)
    outcome = execution.action_execute(requeue.pk, "worker-1")
    assert outcome.status == "early" and 0 < outcome.retry_in_s <= 12
    requeue.refresh_from_db()
    assert (requeue.status, requeue.attempts, requeue.steps) == ("ready", 0, [])
    # The sweep sends it again only once it is overdue, never before its time.
    assert services.actions_sweep(now=requeue.not_before + timedelta(seconds=10)) == 0
    assert services.actions_sweep(now=requeue.not_before + timedelta(seconds=31)) == 1
