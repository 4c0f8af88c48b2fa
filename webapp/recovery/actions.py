"""Recovery action rows: created with their exact commands (data first), sent to the cluster's
recovery queue, and cancelled when an action before them did not succeed. Shared by planning
(planning.py), execution (execution.py) and the operators' requests (services.py)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.celery import app
from webapp.core.scheduler import scheduler_queue
from webapp.failures.choices import FailureKind
from webapp.fleet.models import Node
from webapp.jobs.models import Job
from webapp.recovery import policy
from webapp.recovery.choices import (
    FINAL_STATES,
    ActionKind,
    ActionStatus,
    Mode,
)
from webapp.recovery.executors import Target, executor_for
from webapp.recovery.executors.base import UnsupportedAction
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy

log = logging.getLogger("vigil.recovery")

EXECUTE_TASK = "vigil.recovery.execute"


def recovery_queue(cluster_name: str) -> str:
    """The Celery queue of one cluster's recovery worker (a host with the scheduler's CLI): the
    scheduler worker's, which evaluation shares."""
    return scheduler_queue(cluster_name)


# Order of a plan's steps: health check (locating the bad node), drains, restarts, the GPU
# reset or reboot, what runs in the reset's reservation (its health check), the resume.
RANK = {
    "health_check": 0, "drain": 1, "requeue": 2, "resubmit": 2, "reset_gpu": 3, "reboot": 3,
    "resume": 5,
}  # fmt: skip


def _rank(step: policy.Step) -> int | None:
    if step.params.get("reserved") and step.kind != "resume":
        return 4
    return RANK.get(step.kind)


def _seqs(steps: tuple[policy.Step, ...], first: int) -> list[int]:
    """Each step's seq by its rank (RANK); notifications with the first step."""
    ranks = [_rank(s) for s in steps]
    kinds = sorted({r for r in ranks if r is not None})
    return [first + kinds.index(r) if r is not None else first for r in ranks]


def actions_create(
    plan: RecoveryPlan,
    steps: tuple[policy.Step, ...],
    jobs: dict[str, Job],
    first_seq: int,
    *,
    approved_by: str = "",
) -> list[RecoveryAction]:
    named = {h for s in steps for h in [s.host, *s.params.get("hosts", [])] if h}
    nodes = {
        n.hostname: n for n in Node.objects.filter(cluster_id=plan.cluster_id, hostname__in=named)
    }
    rollback_auto = RecoveryPolicy.objects.filter(
        cluster_id=plan.cluster_id, rollback_auto=True
    ).exists()
    created = []
    for step, seq in zip(steps, _seqs(steps, first_seq), strict=True):
        job = jobs.get(step.job)
        params = dict(step.params)
        if "{plan}" in str(params.get("reservation", "")):
            # A reservation of the plan's own (policy.py cannot know the plan's id).
            params["reservation"] = params["reservation"].format(plan=plan.pk)
        action = RecoveryAction(
            plan=plan,
            cluster_id=plan.cluster_id,
            seq=seq,
            kind=step.kind,
            mode=plan.mode,
            executor=plan.executor,
            rule=plan.rule,
            reason=step.reason[:512],
            node=nodes.get(step.host),
            host=step.host,
            job=job,
            job_scheduler_id=step.job,
            audience=step.audience,
            params=params,
            approved_by=approved_by,
            approved_at=timezone.now() if approved_by else None,
        )
        action.status = _first_status(plan.mode, step.kind, rollback_auto)
        if step.needs_approval and action.status == ActionStatus.READY:
            action.status = ActionStatus.AWAITING_APPROVAL
        action.save()
        strangers = _unregistered(step, nodes)
        if strangers:
            _refuse(action, f"{', '.join(strangers)}: not a registered node of this cluster")
        else:
            _commands_build(action)
        created.append(action)
    settle = 0.0
    if plan.failure_id and plan.failure.kind == FailureKind.JOB_FAILURE:
        # A job's end can reach Vigil before its nodes' agents send the log lines that
        # explain it: act once they have had time to arrive (a new diagnosis meanwhile
        # replaces these actions, failure_recovery_plan).
        settle = settings.VIGIL_RECOVERY_SETTLE_S
    for action in created:
        delay = max(settle, action.params.get("delay_s") or 0.0)
        if delay and action.status not in FINAL_STATES:
            action.not_before = action.created_at + timedelta(seconds=delay)
            action.save(update_fields=["not_before"])
        if action.status == ActionStatus.READY:
            action_dispatch(action)
    return created


def _first_status(mode: str, kind: str, rollback_auto: bool = False) -> str:
    if mode == Mode.DRY_RUN:
        return ActionStatus.DRY_RUN
    if kind == ActionKind.NOTIFY:
        # Telling people changes nothing in the scheduler: it needs no approval. The alerts
        # app delivers it (delivered_at); the action itself is done once recorded.
        return ActionStatus.SUCCEEDED
    if kind == ActionKind.RESUBMIT and not rollback_auto:
        return ActionStatus.AWAITING_APPROVAL  # RecoveryPolicy.rollback_auto
    return ActionStatus.READY if mode == Mode.AUTO else ActionStatus.AWAITING_APPROVAL


def _unregistered(step: policy.Step, nodes: dict[str, Node]) -> list[str]:
    """The hosts a step names that are not nodes of the plan's cluster in the fleet."""
    named = [step.host, *step.params.get("hosts", [])]
    return sorted({h for h in named if h and h not in nodes})


def _refuse(action: RecoveryAction, why: str) -> None:
    """No command is built: the action fails with the reason (what follows is cancelled)."""
    action.status = ActionStatus.FAILED
    action.error = why
    action.result = f"failed: {why}"[:512]
    action.ended_at = timezone.now()
    action.save(update_fields=["status", "error", "result", "ended_at"])


def action_target(action: RecoveryAction) -> Target:
    plan = action.plan
    return Target(
        action_id=action.pk,
        kind=action.kind,
        host=action.host,
        job=action.job_scheduler_id,
        cause=plan.cause,
        failure_id=plan.failure_id,
        params=action.params,
    )


def _commands_build(action: RecoveryAction) -> None:
    now = timezone.now()
    if action.kind == ActionKind.NOTIFY:
        action.result = f"notify {action.audience}: queued for the alerts app"
        if action.status == ActionStatus.DRY_RUN:
            action.result = f"dry run: would notify {action.audience}"
        action.ended_at = now if action.status in FINAL_STATES else None
        action.save(update_fields=["result", "ended_at"])
        return
    try:
        action.commands = executor_for(action.executor).commands(action_target(action))
    except UnsupportedAction as exc:
        action.status = ActionStatus.FAILED
        action.error = str(exc)
        action.result = f"failed: {exc}"[:512]
        action.ended_at = now
    else:
        if action.status == ActionStatus.DRY_RUN:
            action.result = f"dry run: would run {len(action.commands)} command(s)"
            action.ended_at = now
    action.save(update_fields=["commands", "status", "error", "result", "ended_at"])


def action_dispatch(action: RecoveryAction) -> None:
    """Send the action to its cluster's recovery queue once the transaction commits, to run
    at its earliest start (`not_before`)."""
    queue = recovery_queue(action.cluster.name)
    pk = action.pk
    countdown = None
    if action.not_before is not None:
        countdown = max(0.0, (action.not_before - timezone.now()).total_seconds()) or None
    transaction.on_commit(
        lambda: app.send_task(EXECUTE_TASK, args=[pk], queue=queue, countdown=countdown),
        robust=True,  # the sweep (actions_sweep) sends it again if the broker was away
    )


def action_blocked(action: RecoveryAction) -> str | None:
    """'wait' while an earlier action of the plan is unfinished, 'cancel' if one failed."""
    earlier = RecoveryAction.objects.filter(plan_id=action.plan_id, seq__lt=action.seq).exclude(
        status=ActionStatus.CANCELLED
    )
    if earlier.filter(status__in=[ActionStatus.FAILED, ActionStatus.REJECTED]).exists():
        return "cancel"
    if earlier.exclude(status__in=FINAL_STATES).exists():
        return "wait"
    return None


def actions_cancel_after(action: RecoveryAction, why: str) -> None:
    RecoveryAction.objects.filter(plan_id=action.plan_id, seq__gt=action.seq).exclude(
        status__in=FINAL_STATES
    ).update(status=ActionStatus.CANCELLED, result=why[:512], ended_at=timezone.now())
