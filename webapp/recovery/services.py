"""Writes of the recovery app that people ask for: a cluster's policy, approving or
rejecting an action, returning a node to service; and the sweep that sends lost actions
again. Planning is in planning.py, execution in execution.py, the action rows in actions.py.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from webapp.fleet.models import Node
from webapp.recovery import policy
from webapp.recovery.actions import (
    action_blocked,
    action_dispatch,
    actions_cancel_after,
    actions_create,
)
from webapp.recovery.choices import (
    ActionStatus,
    ExecutorKind,
    Mode,
    PlanKind,
)
from webapp.recovery.execution import LEASE
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy

log = logging.getLogger("vigil.recovery")


class RecoveryError(ValueError):
    """A request about a recovery action that cannot be honoured, with the reason."""


def recovery_policy(cluster_id: int) -> RecoveryPolicy:
    """The cluster's policy; an unsaved dry_run one when none was set (fail closed)."""
    found = RecoveryPolicy.objects.filter(cluster_id=cluster_id).first()
    return found or RecoveryPolicy(cluster_id=cluster_id, mode=Mode.DRY_RUN)


def recovery_policy_set(
    cluster_id: int, *, mode: str, executor: str | None = None, user: str = ""
) -> RecoveryPolicy:
    if mode not in Mode.values:
        raise RecoveryError(f"mode {mode!r} is not one of {', '.join(Mode.values)}")
    if executor is not None and executor not in ExecutorKind.values:
        raise RecoveryError(f"executor {executor!r} is not one of {', '.join(ExecutorKind.values)}")
    defaults: dict = {"mode": mode, "updated_by": user[:150]}
    if executor is not None:
        defaults["executor"] = executor
    with transaction.atomic():
        found, _ = RecoveryPolicy.objects.update_or_create(cluster_id=cluster_id, defaults=defaults)
        if mode == Mode.DRY_RUN:
            recovery_actions_stop(cluster_id, user)
    return found


def recovery_actions_stop(cluster_id: int, user: str = "") -> int:
    """The kill switch, when a cluster is switched to dry_run (here, or in the admin): its
    actions that have not started (ready, retrying, approved, awaiting approval) are
    cancelled; a running one stops before its next command (execution.py). How many."""
    why = f"cancelled: the cluster was switched to dry_run by {user or 'an operator'}"
    return RecoveryAction.objects.filter(
        cluster_id=cluster_id,
        status__in=[ActionStatus.READY, ActionStatus.AWAITING_APPROVAL],
    ).update(status=ActionStatus.CANCELLED, result=why[:512], ended_at=timezone.now())


def action_approve(pk: int, user: str) -> RecoveryAction:
    """An operator approves one action awaiting approval; it then runs once."""
    with transaction.atomic():
        n = RecoveryAction.objects.filter(pk=pk, status=ActionStatus.AWAITING_APPROVAL).update(
            status=ActionStatus.READY, approved_by=user[:150], approved_at=timezone.now()
        )
        action = _action_or_error(pk)
        if not n:
            raise RecoveryError(
                f"action {pk} is {action.get_status_display().lower()}: only an action "
                "awaiting approval can be approved"
            )
        action_dispatch(action)
    return action


def action_reject(pk: int, user: str, why: str = "") -> RecoveryAction:
    """An operator rejects an action; the actions that would have followed it are cancelled."""
    with transaction.atomic():
        note = f"rejected by {user}" + (f": {why}" if why else "")
        n = RecoveryAction.objects.filter(pk=pk, status=ActionStatus.AWAITING_APPROVAL).update(
            status=ActionStatus.REJECTED,
            approved_by=user[:150],
            approved_at=timezone.now(),
            result=note[:512],
            ended_at=timezone.now(),
        )
        action = _action_or_error(pk)
        if not n:
            raise RecoveryError(
                f"action {pk} is {action.get_status_display().lower()}: only an action "
                "awaiting approval can be rejected"
            )
        actions_cancel_after(action, f"cancelled: action {pk} was rejected")
    return action


def _action_or_error(pk: int) -> RecoveryAction:
    action = RecoveryAction.objects.select_related("cluster", "plan").filter(pk=pk).first()
    if action is None:
        raise RecoveryError(f"no recovery action {pk}")
    return action


def node_return_to_service(node: Node, user: str, *, check: bool = True) -> RecoveryPlan:
    """Health-check a drained node, then resume it in the scheduler; audited like the rest."""
    policy_row = recovery_policy(node.cluster_id)
    node.refresh_from_db(fields=["state", "state_reason"])
    with transaction.atomic():
        plan = RecoveryPlan.objects.create(
            cluster_id=node.cluster_id,
            kind=PlanKind.RETURN_TO_SERVICE,
            node=node,
            mode=policy_row.mode,
            executor=policy_row.executor,
            action="resume",
            rule="return_to_service",
            reason=f"requested by {user}",
            requested_by=user[:150],
        )
        steps: list[policy.Step] = []
        resume_params: dict = {}
        if check and settings.VIGIL_HEALTHCHECK_SCRIPT:
            reservation = f"vigil-rts-{plan.pk}"
            resume_params = {"reservation": reservation}
            steps.append(
                policy.Step(
                    "health_check",
                    params={
                        "hosts": [node.hostname],
                        "reservation": reservation,
                        "drained_reason": node.state_reason,
                    },
                    reason="before resuming",
                )
            )
        steps.append(
            policy.Step(
                "resume", host=node.hostname, params=resume_params, reason=f"requested by {user}"
            )
        )
        # The operator asked: that is the approval (a dry-run cluster still only records).
        mode = plan.mode if plan.mode == Mode.DRY_RUN else Mode.AUTO
        plan.mode = mode
        plan.save(update_fields=["mode"])
        actions_create(plan, tuple(steps), {}, 1, approved_by=user)
    return plan


def actions_sweep(now: datetime | None = None) -> int:
    """Send again the ready actions that no worker has (a lost message, a broker restart) and
    the running ones whose worker's lease ran out (the worker died). Returns how many. Each
    goes out for its earliest start: the sweep never cuts a settle time or a backoff short."""
    now = now or timezone.now()
    # A ready action is lost once its message is overdue: 30 s past its earliest start.
    overdue = now - timedelta(seconds=30)
    ready_lost = Q(status=ActionStatus.READY) & (
        Q(not_before__isnull=True, created_at__lt=overdue) | Q(not_before__lt=overdue)
    )
    stale = RecoveryAction.objects.filter(ready_lost | LEASE.lost_q(now)).select_related(
        "cluster", "plan"
    )
    sent = 0
    with transaction.atomic():
        for action in stale:
            if action_blocked(action) is None:
                action_dispatch(action)
                sent += 1
    return sent
