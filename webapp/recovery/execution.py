"""Execution: claim one action and run its commands, recorded step by step.

`action_execute(pk, worker)` claims the action with a lease (core/workrows.py: two workers
never run one action), then runs its commands one by one, each recorded before it starts and
when it ends. A started-but-unfinished command (the worker died) is checked against the scheduler
before it is run again. Transient scheduler errors come back for a retry with backoff;
permanent ones end the action as failed, with the reason, and cancel what followed. A health
check's verdicts become drains of the nodes that failed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from collectors.backends.siminbox import INBOX_ENV, scheduler_commands_send
from collectors.schema import NodeStateIn
from webapp.core import workrows
from webapp.core.units import iso_utc
from webapp.core.workrows import Outcome
from webapp.fleet.choices import NodeState
from webapp.fleet.models import Gpu, Node
from webapp.fleet.selectors import node_state_now
from webapp.fleet.services import node_states_apply
from webapp.jobs.selectors import GpuHolder, gpu_holders
from webapp.recovery import policy
from webapp.recovery.actions import (
    action_blocked,
    action_dispatch,
    action_target,
    actions_cancel_after,
    actions_create,
)
from webapp.recovery.choices import (
    FINAL_STATES,
    ActionKind,
    ActionStatus,
    ExecutorKind,
    Mode,
    PlanKind,
)
from webapp.recovery.dispatch import action_failed
from webapp.recovery.executors import executor_for
from webapp.recovery.executors.base import CommandResult, UnsupportedAction
from webapp.recovery.executors.slurm import drain_reason
from webapp.recovery.models import RecoveryAction, RecoveryPolicy

log = logging.getLogger("vigil.recovery")


# A ready action is claimed; a running one whose worker's lease ran out is claimed again.
# A transient failure waits its backoff as ready, not before `not_before`.
LEASE = workrows.LeaseSpec(
    RecoveryAction,
    claimable=(ActionStatus.READY,),
    running=ActionStatus.RUNNING,
    due_field="not_before",
    started="started_at",
)


def _lease_s(action: RecoveryAction) -> float:
    try:
        command_s = executor_for(action.executor).timeout_s(action_target(action))
    except UnsupportedAction:
        command_s = 0.0
    return command_s + settings.VIGIL_RECOVERY_LEASE_GRACE_S


def action_execute(pk: int, worker: str) -> Outcome:
    """Claim and run one action (from the cluster's recovery queue)."""
    action = RecoveryAction.objects.select_related("plan", "cluster").filter(pk=pk).first()
    if action is None:
        return Outcome("missing")
    if action.status in FINAL_STATES or action.status == ActionStatus.AWAITING_APPROVAL:
        return Outcome(action.status)
    blocked = action_blocked(action)
    if blocked == "cancel":
        with transaction.atomic():
            workrows.finish(
                LEASE,
                pk,
                ActionStatus.CANCELLED,
                unless=FINAL_STATES,
                result="cancelled: an earlier action of the plan did not succeed",
                ended_at=timezone.now(),
            )
            actions_cancel_after(action, "cancelled: an earlier action of the plan did not succeed")
        return Outcome(ActionStatus.CANCELLED)
    if blocked == "wait":
        return Outcome("waiting", note="an earlier action of the plan has not finished")
    if _dry_run(action):
        _stop(action, "cancelled: the cluster was switched to dry_run before it started")
        return Outcome(ActionStatus.CANCELLED)
    early = (action.not_before - timezone.now()).total_seconds() if action.not_before else 0
    if early > 0 and action.status == ActionStatus.READY:
        # Sent before its time (a settle time, a retry's backoff): come back then.
        return Outcome("early", retry_in_s=early, note="not before its earliest start")
    if not workrows.claim(LEASE, action.pk, worker, _lease_s(action)):
        # Another worker holds it (or held it and died): look again when its lease ends.
        return workrows.not_claimed(LEASE, RecoveryAction.objects.filter(pk=pk).first())
    action.refresh_from_db()
    return _run(action)


def _dry_run(action: RecoveryAction) -> bool:
    """Whether the cluster is in dry_run now (a cluster without a policy is: fail closed).
    Checked when an action starts and before each of its commands: the kill switch."""
    mode = (
        RecoveryPolicy.objects.filter(cluster_id=action.cluster_id)
        .values_list("mode", flat=True)
        .first()
    )
    return mode in (None, Mode.DRY_RUN)


def _stop(action: RecoveryAction, why: str) -> None:
    """End an action that has not finished as cancelled, and what would follow it."""
    with transaction.atomic():
        workrows.finish(
            LEASE, action.pk, ActionStatus.CANCELLED, unless=FINAL_STATES,
            result=why[:512], ended_at=timezone.now(),
        )  # fmt: skip
        actions_cancel_after(action, why)
    log.warning("recovery action %s (%s) %s", action.pk, action.kind, why)


def _now_iso() -> str:
    return iso_utc(timezone.now())


def _last_step(steps: list[dict], i: int) -> dict | None:
    found = [s for s in steps if s.get("i") == i]
    return found[-1] if found else None


def _save_steps(action: RecoveryAction) -> None:
    workrows.lease_extend(LEASE, action.pk, _lease_s(action), steps=action.steps)


def _run(action: RecoveryAction) -> Outcome:
    executor = executor_for(action.executor)
    target = action_target(action)
    results: list[CommandResult] = []
    for i, argv in enumerate(action.commands):
        last = _last_step(action.steps, i)
        if last and last.get("ended_at") and (last.get("exit") == 0 or last.get("optional")):
            results.append(CommandResult(tuple(argv), 0, last.get("stdout", "")))
            continue
        if _dry_run(action):
            _stop(action, f"stopped: the cluster was switched to dry_run after {i} command(s)")
            return Outcome(ActionStatus.CANCELLED)
        if last and not last.get("ended_at"):
            # The worker died while this command ran: ask the scheduler before running it again.
            if executor.done(argv, target, last.get("before", {})):
                last.update(
                    ended_at=_now_iso(),
                    exit=0,
                    verified=True,
                    stdout="already done: the scheduler shows its effect (worker was lost)",
                )
                _save_steps(action)
                results.append(CommandResult(tuple(argv), 0))
                continue
            last.update(ended_at=_now_iso(), exit=None, interrupted=True)
        step = {
            "i": i,
            "argv": list(argv),
            "attempt": action.attempts,
            "worker": action.claimed_by,
            "before": executor.before(argv, target),
            "started_at": _now_iso(),
        }
        action.steps.append(step)
        _save_steps(action)  # on record before the command runs
        result = executor.run(argv, target)
        step.update(result.as_dict(), ended_at=_now_iso())
        if list(result.argv[1:]) != list(argv[1:]):
            step["ran"] = list(result.argv)  # what the executor added (e.g. the workdir)
        _save_steps(action)
        if not result.ok and executor.tolerated(argv, target, result):
            step["optional"] = True
        elif not result.ok:
            return _failed(action, executor.transient(result), result)
        results.append(result)
    return _succeeded(action, executor.followups(target, results))


def _failed(action: RecoveryAction, transient: bool, result: CommandResult) -> Outcome:
    detail = result.stderr.strip() or f"exit status {result.returncode}"
    if result.stdout.strip() and not result.stderr.strip():
        detail += f" (output: {result.stdout.strip()[-300:]})"
    first = detail.splitlines()[0] if detail else ""
    if transient and action.attempts < settings.VIGIL_RECOVERY_MAX_ATTEMPTS:
        backoff = workrows.backoff_s(action.attempts)
        workrows.retry_later(LEASE, action.pk, backoff, error=detail[:4000])
        return Outcome("retry", retry_in_s=backoff, note=first)
    with transaction.atomic():
        workrows.finish(
            LEASE,
            action.pk,
            ActionStatus.FAILED,
            error=detail[:4000],
            result=f"failed: {first}"[:512],
            ended_at=timezone.now(),
        )
        actions_cancel_after(action, f"cancelled: action {action.pk} failed")
        action_failed.send(sender=RecoveryAction, action=action)
    log.warning("recovery action %s (%s) failed: %s", action.pk, action.kind, first)
    return Outcome(ActionStatus.FAILED, note=first)


def _result_text(action: RecoveryAction, found: dict) -> str:
    if action.kind == ActionKind.DRAIN:
        return f"node {action.host} drained"
    if action.kind == ActionKind.RESUME:
        return f"node {action.host} returned to service"
    if action.kind == ActionKind.REQUEUE:
        return f"job {action.job_scheduler_id} requeued"
    if action.kind == ActionKind.RESUBMIT:
        return f"job {action.job_scheduler_id} requeued from its checkpoint"
    if action.kind == ActionKind.RESET_GPU:
        return f"GPU {action.params.get('bus_id', '')} reset on {action.host}"
    if action.kind == ActionKind.REBOOT:
        return f"reboot of {action.host} requested: the scheduler reboots it once idle"
    if action.kind == ActionKind.HEALTH_CHECK:
        hosts = action.params.get("hosts", [])
        failed = found.get("failed", [])
        if not failed:
            return f"{len(hosts)} node(s) checked: all passed"
        return f"{len(hosts)} node(s) checked, {len(failed)} failed: {', '.join(failed)}"
    return "done"


def _succeeded(action: RecoveryAction, found: dict) -> Outcome:
    with transaction.atomic():
        params = dict(action.params)
        if found:
            params["found"] = found
        n = workrows.finish(
            LEASE,
            action.pk,
            ActionStatus.SUCCEEDED,
            if_running=True,
            params=params,
            result=_result_text(action, found)[:512],
            error="",
            ended_at=timezone.now(),
        )
        if not n:
            return Outcome(ActionStatus.SUCCEEDED, note="finished by another worker")
        if action.kind == ActionKind.HEALTH_CHECK:
            _after_health_check(action, found.get("failed", []))
        _simulated_effects(action)
        for later in _next_ready(action):
            action_dispatch(later)
    return Outcome(ActionStatus.SUCCEEDED)


def _next_ready(action: RecoveryAction) -> list[RecoveryAction]:
    """The plan's next actions that may run now (every earlier one has succeeded)."""
    pending = RecoveryAction.objects.filter(
        plan_id=action.plan_id, status=ActionStatus.READY
    ).select_related("cluster", "plan")
    return [a for a in pending if action_blocked(a) is None]


def _after_health_check(action: RecoveryAction, failed: list[str]) -> None:
    plan = action.plan
    later = RecoveryAction.objects.filter(plan=plan, seq__gt=action.seq)
    if plan.kind == PlanKind.RETURN_TO_SERVICE or action.params.get("reserved"):
        if failed:
            # The node is still bad (after a return to service asked for, or a GPU reset):
            # drained again (ending the check's reservation), with the reason it had before,
            # not resumed.
            later.exclude(status__in=FINAL_STATES).update(
                status=ActionStatus.CANCELLED,
                result=f"cancelled: health check failed on {', '.join(failed)}"[:512],
                ended_at=timezone.now(),
            )
            reason = action.params.get("drained_reason") or "drained"
            steps = tuple(
                policy.Step(
                    "drain",
                    host=h,
                    params={"reason": f"{reason} (failed the health check, action {action.pk})",
                            "reservation": action.params.get("reservation", ""),
                            # Out already: not a drain the guard rails count.
                            **({"reserved": True} if action.params.get("reserved") else {})},
                    reason="failed the health check",
                )
                for h in failed
            )  # fmt: skip
            actions_create(plan, steps, {}, action.seq + 2, approved_by=action.approved_by)
        return
    if not failed:
        return
    # Make room: the drains run before the restart that was planned after the check.
    later.update(seq=F("seq") + 1)
    steps = tuple(
        policy.Step("drain", host=h, reason=f"failed the health check (action {action.pk})")
        for h in failed
    )
    actions_create(plan, steps, {}, action.seq + 1, approved_by=action.approved_by)


RESTARTS = (ActionKind.REQUEUE, ActionKind.RESUBMIT)


def _simulated_effects(action: RecoveryAction) -> None:
    """The demo's simulated executor: what Slurm's watcher would report, recorded at once, and
    the action's commands handed to the simulated scheduler, which carries out what a real
    Slurm would (a requeued job runs again) once the action has committed.

    A drained node reads as Slurm names it: draining while a job still holds GPUs on it,
    drained once none does (the overview's test, `node_state_now`: a GPU of the node held by
    a job's allocation now), with the reason the drain command gave; a requeue that takes the
    last job off a draining node makes it drained. The simulated scheduler reports the same
    changes itself (a job ending on its own included) when it carries the commands out."""
    if action.executor != ExecutorKind.SIMULATED:
        return
    inbox = os.environ.get(INBOX_ENV)
    if inbox and action.commands:
        cluster, commands = action.cluster.name, list(action.commands)
        transaction.on_commit(lambda: scheduler_commands_send(Path(inbox), cluster, commands))
    if action.kind not in (ActionKind.DRAIN, ActionKind.RESUME, *RESTARTS):
        return
    now = timezone.now()
    at = now.timestamp()
    holders = gpu_holders(now)
    states: list[NodeStateIn] = []
    if action.kind == ActionKind.DRAIN and action.host:
        busy = bool(_jobs_holding(holders, action.cluster_id, action.host))
        state = node_state_now(NodeState.DRAINED, None, now, runs_jobs=busy)
        reason = drain_reason(action_target(action))[:256]
        states.append(NodeStateIn(node=action.host, state=state, reason=reason, since=at))
    elif action.kind == ActionKind.RESUME and action.host:
        states.append(NodeStateIn(node=action.host, state="up", since=at))
    elif action.kind in RESTARTS and action.job_id:
        draining = Node.objects.filter(
            cluster_id=action.cluster_id,
            state=NodeState.DRAINING,
            gpus__id__in=[g for g, h in holders.items() if h.job_id == action.job_id],
        ).distinct()
        for node in draining:
            held = _jobs_holding(holders, action.cluster_id, node.hostname)
            if held <= {action.job_id}:  # the requeued job was the last on it
                states.append(
                    NodeStateIn(
                        node=node.hostname, state="drained", reason=node.state_reason, since=at
                    )
                )
    if states:
        node_states_apply(action.cluster_id, states)


def _jobs_holding(holders: dict[int, GpuHolder], cluster_id: int, host: str) -> set[int]:
    """Ids of the jobs holding GPUs of the node (`holders`: jobs.selectors.gpu_holders)."""
    gpus = Gpu.objects.filter(node__cluster_id=cluster_id, node__hostname=host)
    return {holders[pk].job_id for pk in gpus.values_list("pk", flat=True) if pk in holders}
