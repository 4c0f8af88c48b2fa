"""Writes of the recovery app: plan a diagnosed failure, approve / reject, execute, and return
a node to service.

- `failure_recovery_plan(failure)`: runs in the diagnosis transaction (signals.py). Gathers
  the facts (job, its nodes, earlier failures, restarts so far, what the same incident already
  did), asks the policy (policy.py) and writes one RecoveryPlan and its RecoveryActions, with
  their exact commands. The cluster's mode decides their first status: `ready` (auto, sent to
  the cluster's recovery queue after commit), `awaiting_approval` or `dry_run`.
- `action_execute(pk, worker)`: claims the action by a conditional UPDATE (two workers never
  run one action), then runs its commands one by one, each recorded before it starts and when
  it ends. A started-but-unfinished command (the worker died) is checked against the
  scheduler before it is run again. Transient scheduler errors come back for a retry with
  backoff; permanent ones end the action as failed, with the reason, and cancel what followed.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from collectors.schema import NodeStateIn
from webapp.celery import app
from webapp.failures.choices import FailureKind
from webapp.failures.models import FailureEvent
from webapp.failures.services import failure_action_record
from webapp.fleet.models import Node
from webapp.fleet.services import node_states_apply
from webapp.jobs.models import Job, JobAllocation
from webapp.recovery import policy
from webapp.recovery.choices import (
    FINAL_STATES,
    ActionKind,
    ActionStatus,
    ExecutorKind,
    Mode,
    PlanKind,
)
from webapp.recovery.dispatch import action_failed
from webapp.recovery.executors import Target, executor_for
from webapp.recovery.executors.base import CommandResult, UnsupportedAction
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy

log = logging.getLogger("vigil.recovery")

EXECUTE_TASK = "vigil.recovery.execute"
RESTART_KINDS = (ActionKind.REQUEUE, ActionKind.RESUBMIT)
# Statuses of an action that did, or may still, take effect.
LIVE = (
    ActionStatus.AWAITING_APPROVAL,
    ActionStatus.READY,
    ActionStatus.RUNNING,
    ActionStatus.SUCCEEDED,
)
DRAIN_STATES = ("draining", "drained")
# A drain that succeeded this recently counts even before the scheduler watcher reports it.
DRAIN_REPORT_LAG = timedelta(minutes=5)


class RecoveryError(ValueError):
    """A request about a recovery action that cannot be honoured, with the reason."""


def recovery_queue(cluster_name: str) -> str:
    """The Celery queue of one cluster's recovery worker (a host with the scheduler's CLI)."""
    return f"recovery.{cluster_name}"


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
    found, _ = RecoveryPolicy.objects.update_or_create(cluster_id=cluster_id, defaults=defaults)
    return found


# --- planning --------------------------------------------------------------------------------


def _restarts(job: Job, cause: str | None = None) -> int:
    """Automatic restarts of this job so far (a Slurm requeue keeps the job id)."""
    qs = RecoveryAction.objects.filter(job=job, kind__in=RESTART_KINDS, status__in=LIVE)
    if cause:
        qs = qs.filter(plan__cause=cause)
    return qs.count()


# "iteration 1200/ 5000 | ... lm loss: 6.44E+00" (Megatron), "step 1200 loss nan", "'step':
# 1200" (Hugging Face): the step a loss spike was seen at.
STEP = re.compile(r"\b(?:iteration|step|global_step)['\"]?\s*[:=]?\s*(\d+)", re.IGNORECASE)


def _spike_step(failure: FailureEvent | None) -> int | None:
    """The last training step the loss_nan evidence names, if any."""
    if failure is None or failure.cause != "loss_nan":
        return None
    steps = [int(m) for e in failure.evidence for m in STEP.findall(e.get("text", ""))]
    return max(steps) if steps else None


def _job_facts(job: Job, cause: str, failure: FailureEvent | None = None) -> policy.JobFacts:
    hosts = (
        JobAllocation.objects.filter(job=job)
        .order_by("node__hostname")
        .values_list("node__hostname", flat=True)
        .distinct()
    )
    return policy.JobFacts(
        scheduler_id=job.scheduler_id,
        user=job.user,
        hosts=tuple(hosts),
        restarts_in_a_row=_restarts(job),
        restarts_for_cause=_restarts(job, cause),
        spike_step=_spike_step(failure),
    )


def _jobs_on_node(node_id: int, at: datetime) -> list[Job]:
    """Jobs that held GPUs on the node when a GPU error happened there."""
    ids = (
        JobAllocation.objects.filter(node_id=node_id, start__lte=at)
        .filter(Q(end__isnull=True) | Q(end__gte=at))
        .values_list("job_id", flat=True)
        .distinct()
    )
    return list(Job.objects.filter(pk__in=ids).order_by("pk"))


def _hosts_drained(cluster_id: int, now: datetime) -> frozenset[str]:
    by_scheduler = Node.objects.filter(cluster_id=cluster_id, state__in=DRAIN_STATES)
    # A drain Vigil made counts until the scheduler has reported the node since (it may have
    # been returned to service meanwhile).
    unreported = Q(node__state_since__isnull=True) | Q(node__state_since__lt=F("ended_at"))
    by_vigil = RecoveryAction.objects.filter(cluster_id=cluster_id, kind=ActionKind.DRAIN).filter(
        Q(status__in=[ActionStatus.AWAITING_APPROVAL, ActionStatus.READY, ActionStatus.RUNNING])
        | (Q(status=ActionStatus.SUCCEEDED, ended_at__gte=now - DRAIN_REPORT_LAG) & unreported)
    )
    return frozenset(by_scheduler.values_list("hostname", flat=True)) | frozenset(
        by_vigil.values_list("host", flat=True)
    )


def _jobs_requeued(jobs: list[Job]) -> frozenset[str]:
    """Jobs whose current run another failure of the same incident already restarted."""
    out = set()
    for job in jobs:
        qs = RecoveryAction.objects.filter(job=job, kind__in=RESTART_KINDS, status__in=LIVE)
        if job.start_at is not None:
            qs = qs.filter(created_at__gte=job.start_at)
        if qs.exists():
            out.add(job.scheduler_id)
    return frozenset(out)


def _host_of(failure: FailureEvent) -> str | None:
    """The node a failure points at: the one blamed, the one a GPU error came from, or the
    only node of a single-node job (every rank's error is on that node)."""
    if failure.blamed_host:
        return failure.blamed_host
    if failure.node_id:
        return failure.node.hostname
    if failure.job_id:
        hosts = list(
            JobAllocation.objects.filter(job_id=failure.job_id)
            .values_list("node__hostname", flat=True)
            .distinct()[:2]
        )
        if len(hosts) == 1:
            return hosts[0]
    return None


def _facts(failure: FailureEvent, max_restarts: int) -> tuple[policy.Facts, dict[str, Job]]:
    since = failure.occurred_at - timedelta(hours=policy.BREAKER_WINDOW_H)
    earlier = (
        FailureEvent.objects.filter(
            cluster_id=failure.cluster_id,
            cause=failure.cause,
            kind=failure.kind,  # a job failure and the GPU error behind it are one incident
            occurred_at__gte=since,
            occurred_at__lt=failure.occurred_at,
        )
        .exclude(pk=failure.pk)
        .select_related("node")
    )
    same_cause = tuple(_host_of(f) for f in earlier)
    jobs: list[Job] = []
    job_facts = None
    on_host: tuple[policy.JobFacts, ...] = ()
    if failure.job is not None:
        jobs = [failure.job]
        job_facts = _job_facts(failure.job, failure.cause, failure)
    elif failure.kind == FailureKind.GPU_ERROR and failure.node_id:
        jobs = _jobs_on_node(failure.node_id, failure.occurred_at)
        on_host = tuple(_job_facts(j, failure.cause) for j in jobs)
    facts = policy.Facts(
        cause=failure.cause,
        action=failure.default_action or failure.action,
        category=failure.category,
        blamed_host=_host_of(failure),
        error_host=failure.node.hostname if failure.node else None,
        job=job_facts,
        jobs_on_host=on_host,
        same_cause_hosts=same_cause,
        max_restarts=max_restarts,
        hosts_drained=_hosts_drained(failure.cluster_id, timezone.now()),
        jobs_requeued=_jobs_requeued(jobs),
        retry_base_s=settings.VIGIL_RECOVERY_RETRY_BASE_S,
    )
    return facts, {j.scheduler_id: j for j in jobs}


def _started(plan: RecoveryPlan) -> bool:
    """Whether the plan already touched the scheduler (a notification does not)."""
    acting = plan.actions.exclude(kind=ActionKind.NOTIFY)
    untouched = [ActionStatus.AWAITING_APPROVAL, ActionStatus.READY, ActionStatus.DRY_RUN]
    return acting.exclude(status__in=untouched).exists() or acting.filter(attempts__gt=0).exists()


def failure_recovery_plan(failure: FailureEvent) -> RecoveryPlan | None:
    """Plan the recovery of a diagnosed failure (idempotent: a second diagnosis with the same
    cause changes nothing; a new cause replaces the actions that have not started yet)."""
    if not failure.cause or failure.kind == FailureKind.PERFORMANCE:
        return None
    plan = RecoveryPlan.objects.select_for_update().filter(failure=failure).first()
    if plan is not None:
        if plan.cause == failure.cause or _started(plan):
            return plan
        superseded = plan.actions.exclude(status__in=FINAL_STATES) | plan.actions.filter(
            kind=ActionKind.NOTIFY, delivered_at__isnull=True
        )
        superseded.update(
            status=ActionStatus.CANCELLED,
            result=f"superseded: re-diagnosed as {failure.cause}"[:512],
            ended_at=timezone.now(),
        )
        plan.actions.filter(status=ActionStatus.DRY_RUN).update(
            result=f"superseded: re-diagnosed as {failure.cause}"[:512]
        )
    settings_row = recovery_policy(failure.cluster_id)
    max_restarts = settings_row.max_auto_restarts
    if max_restarts is None:
        max_restarts = settings.VIGIL_MAX_AUTO_RESTARTS
    facts, jobs = _facts(failure, max_restarts)
    decision = policy.decide(facts)
    fields = {
        "cluster_id": failure.cluster_id,
        "kind": PlanKind.FAILURE,
        "node_id": failure.blamed_node_id or failure.node_id,
        "job": failure.job,
        "mode": settings_row.mode,
        "executor": settings_row.executor,
        "cause": failure.cause,
        "proposed_action": facts.action,
        "action": decision.action,
        "rule": decision.rule[:64],
        "reason": decision.reason[:512],
    }
    if plan is None:
        plan = RecoveryPlan.objects.create(failure=failure, **fields)
        first_seq = 1
    else:
        for key, value in fields.items():
            setattr(plan, key, value)
        plan.save()
        first_seq = (plan.actions.order_by("-seq").values_list("seq", flat=True).first() or 0) + 1
    _actions_create(plan, decision.steps, jobs, first_seq)
    changed = decision.rule and not decision.rule.startswith("default_")
    failure_action_record(failure, decision.action, decision.reason if changed else "")
    return plan


def _seqs(steps: tuple[policy.Step, ...], first: int) -> list[int]:
    """Order: health check, then drains, then restarts; notifications with the first step."""
    rank = {"health_check": 0, "drain": 1, "requeue": 2, "resubmit": 2, "resume": 3}
    kinds = sorted({rank[s.kind] for s in steps if s.kind in rank})
    return [first + kinds.index(rank[s.kind]) if s.kind in rank else first for s in steps]


def _actions_create(
    plan: RecoveryPlan,
    steps: tuple[policy.Step, ...],
    jobs: dict[str, Job],
    first_seq: int,
    *,
    approved_by: str = "",
) -> list[RecoveryAction]:
    nodes = {
        n.hostname: n
        for n in Node.objects.filter(
            cluster_id=plan.cluster_id, hostname__in=[s.host for s in steps]
        )
    }
    created = []
    for step, seq in zip(steps, _seqs(steps, first_seq), strict=True):
        job = jobs.get(step.job)
        params = dict(step.params)
        if step.kind == ActionKind.RESUBMIT and job is not None:
            params["sbatch_args"] = _sbatch_args(job)
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
        action.status = _first_status(plan.mode, step.kind)
        action.save()
        _commands_build(action)
        created.append(action)
    settle = 0.0
    if plan.failure_id and plan.failure.kind == FailureKind.JOB_FAILURE:
        # A job's end can reach Vigil before its nodes' agents send the log lines that
        # explain it: act once they have had time to arrive (a new diagnosis meanwhile
        # replaces these actions, failure_recovery_plan).
        settle = settings.VIGIL_RECOVERY_SETTLE_S
    for action in created:
        if action.status == ActionStatus.READY:
            delay = max(settle, action.params.get("delay_s") or 0.0)
            action_dispatch(action, countdown=delay or None)
    return created


def _first_status(mode: str, kind: str) -> str:
    if mode == Mode.DRY_RUN:
        return ActionStatus.DRY_RUN
    if kind == ActionKind.NOTIFY:
        # Telling people changes nothing in the scheduler: it needs no approval. The alerts
        # app delivers it (delivered_at); the action itself is done once recorded.
        return ActionStatus.SUCCEEDED
    return ActionStatus.READY if mode == Mode.AUTO else ActionStatus.AWAITING_APPROVAL


def _sbatch_args(job: Job) -> list[str]:
    """What a resubmission keeps of the job: its name, size and partition."""
    args = [f"--job-name={job.name or job.scheduler_id}"]
    if job.nodes_requested:
        args.append(f"--nodes={job.nodes_requested}")
        if job.gpus_requested:
            args.append(f"--gres=gpu:{max(1, job.gpus_requested // job.nodes_requested)}")
    elif job.gpus_requested:
        args.append(f"--gres=gpu:{job.gpus_requested}")
    if job.partition:
        args.append(f"--partition={job.partition}")
    return args


def _target(action: RecoveryAction) -> Target:
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
        action.commands = executor_for(action.executor).commands(_target(action))
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


def action_dispatch(action: RecoveryAction, countdown: float | None = None) -> None:
    """Send the action to its cluster's recovery queue once the transaction commits."""
    queue = recovery_queue(action.cluster.name)
    pk = action.pk
    transaction.on_commit(
        lambda: app.send_task(EXECUTE_TASK, args=[pk], queue=queue, countdown=countdown),
        robust=True,  # the sweep (actions_sweep) sends it again if the broker was away
    )


# --- approval --------------------------------------------------------------------------------


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
        _cancel_after(action, f"cancelled: action {pk} was rejected")
    return action


def _action_or_error(pk: int) -> RecoveryAction:
    action = RecoveryAction.objects.select_related("cluster", "plan").filter(pk=pk).first()
    if action is None:
        raise RecoveryError(f"no recovery action {pk}")
    return action


def _cancel_after(action: RecoveryAction, why: str) -> None:
    RecoveryAction.objects.filter(plan_id=action.plan_id, seq__gt=action.seq).exclude(
        status__in=FINAL_STATES
    ).update(status=ActionStatus.CANCELLED, result=why[:512], ended_at=timezone.now())


# --- execution -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    status: str
    retry_in_s: float | None = None
    note: str = ""


def _lease_s(action: RecoveryAction) -> float:
    try:
        command_s = executor_for(action.executor).timeout_s(_target(action))
    except UnsupportedAction:
        command_s = 0.0
    return command_s + settings.VIGIL_RECOVERY_LEASE_GRACE_S


def _blocked(action: RecoveryAction) -> str | None:
    """'wait' while an earlier action of the plan is unfinished, 'cancel' if one failed."""
    earlier = RecoveryAction.objects.filter(plan_id=action.plan_id, seq__lt=action.seq).exclude(
        status=ActionStatus.CANCELLED
    )
    if earlier.filter(status__in=[ActionStatus.FAILED, ActionStatus.REJECTED]).exists():
        return "cancel"
    if earlier.exclude(status__in=FINAL_STATES).exists():
        return "wait"
    return None


def _claim(action: RecoveryAction, worker: str) -> bool:
    now = timezone.now()
    return bool(
        RecoveryAction.objects.filter(pk=action.pk)
        .filter(Q(status=ActionStatus.READY) | Q(status=ActionStatus.RUNNING, lease_until__lt=now))
        .update(
            status=ActionStatus.RUNNING,
            claimed_by=worker[:128],
            lease_until=now + timedelta(seconds=_lease_s(action)),
            attempts=F("attempts") + 1,
            started_at=Coalesce(F("started_at"), now),
        )
    )


def action_execute(pk: int, worker: str) -> Outcome:
    """Claim and run one action (from the cluster's recovery queue)."""
    action = RecoveryAction.objects.select_related("plan", "cluster").filter(pk=pk).first()
    if action is None:
        return Outcome("missing")
    if action.status in FINAL_STATES or action.status == ActionStatus.AWAITING_APPROVAL:
        return Outcome(action.status)
    blocked = _blocked(action)
    if blocked == "cancel":
        with transaction.atomic():
            RecoveryAction.objects.filter(pk=pk).exclude(status__in=FINAL_STATES).update(
                status=ActionStatus.CANCELLED,
                result="cancelled: an earlier action of the plan did not succeed",
                ended_at=timezone.now(),
            )
            _cancel_after(action, "cancelled: an earlier action of the plan did not succeed")
        return Outcome(ActionStatus.CANCELLED)
    if blocked == "wait":
        return Outcome("waiting", note="an earlier action of the plan has not finished")
    if not _claim(action, worker):
        action.refresh_from_db()
        if action.status == ActionStatus.RUNNING and action.lease_until:
            # Another worker holds it (or held it and died): look again when its lease ends.
            left = (action.lease_until - timezone.now()).total_seconds()
            return Outcome("held", retry_in_s=max(1.0, left + 1))
        return Outcome(action.status)
    action.refresh_from_db()
    return _run(action)


def _now_iso() -> str:
    return timezone.now().isoformat()


def _last_step(steps: list[dict], i: int) -> dict | None:
    found = [s for s in steps if s.get("i") == i]
    return found[-1] if found else None


def _save_steps(action: RecoveryAction) -> None:
    lease = timezone.now() + timedelta(seconds=_lease_s(action))
    RecoveryAction.objects.filter(pk=action.pk).update(steps=action.steps, lease_until=lease)


def _run(action: RecoveryAction) -> Outcome:
    executor = executor_for(action.executor)
    target = _target(action)
    results: list[CommandResult] = []
    for i, argv in enumerate(action.commands):
        last = _last_step(action.steps, i)
        if last and last.get("ended_at") and (last.get("exit") == 0 or last.get("optional")):
            results.append(CommandResult(tuple(argv), 0, last.get("stdout", "")))
            continue
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
        RecoveryAction.objects.filter(pk=action.pk, status=ActionStatus.RUNNING).update(
            status=ActionStatus.READY, error=detail[:4000], lease_until=None
        )
        # Exponential backoff: 2, 4, 8, ... s, capped at 5 minutes.
        return Outcome("retry", retry_in_s=min(300.0, 2.0**action.attempts), note=first)
    with transaction.atomic():
        RecoveryAction.objects.filter(pk=action.pk).update(
            status=ActionStatus.FAILED,
            error=detail[:4000],
            result=f"failed: {first}"[:512],
            ended_at=timezone.now(),
            lease_until=None,
        )
        _cancel_after(action, f"cancelled: action {action.pk} failed")
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
        return f"job {action.job_scheduler_id} resubmitted from checkpoint"
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
        n = RecoveryAction.objects.filter(pk=action.pk, status=ActionStatus.RUNNING).update(
            status=ActionStatus.SUCCEEDED,
            params=params,
            result=_result_text(action, found)[:512],
            error="",
            ended_at=timezone.now(),
            lease_until=None,
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
    return [a for a in pending if _blocked(a) is None]


def _after_health_check(action: RecoveryAction, failed: list[str]) -> None:
    plan = action.plan
    later = RecoveryAction.objects.filter(plan=plan, seq__gt=action.seq)
    if plan.kind == PlanKind.RETURN_TO_SERVICE:
        if failed:
            # The node is still bad: drained again (ending the check's reservation), with the
            # reason it had before, not resumed.
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
                            "reservation": action.params.get("reservation", "")},
                    reason="failed the health check",
                )
                for h in failed
            )  # fmt: skip
            _actions_create(plan, steps, {}, action.seq + 2, approved_by=action.approved_by)
        return
    if not failed:
        return
    # Make room: the drains run before the restart that was planned after the check.
    later.update(seq=F("seq") + 1)
    steps = tuple(
        policy.Step("drain", host=h, reason=f"failed the health check (action {action.pk})")
        for h in failed
    )
    _actions_create(plan, steps, {}, action.seq + 1, approved_by=action.approved_by)


def _simulated_effects(action: RecoveryAction) -> None:
    """The demo's simulated executor: what Slurm's watcher would report, recorded at once."""
    if action.executor != ExecutorKind.SIMULATED or not action.host:
        return
    if action.kind not in (ActionKind.DRAIN, ActionKind.RESUME):
        return
    drained = action.kind == ActionKind.DRAIN
    reason = f"vigil (simulated): {action.plan.cause} failure {action.plan.failure_id}"
    node_states_apply(
        action.cluster_id,
        [
            NodeStateIn(
                node=action.host,
                state="drained" if drained else "up",
                reason=reason if drained else "",
                since=time.time(),
            )
        ],
    )


# --- return to service and the sweep ---------------------------------------------------------


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
        _actions_create(plan, tuple(steps), {}, 1, approved_by=user)
    return plan


def actions_sweep(now: datetime | None = None) -> int:
    """Send again the ready actions that no worker has (a lost message, a broker restart) and
    the running ones whose worker's lease ran out (the worker died). Returns how many."""
    now = now or timezone.now()
    stale = RecoveryAction.objects.filter(
        Q(status=ActionStatus.READY, created_at__lt=now - timedelta(seconds=30))
        | Q(status=ActionStatus.RUNNING, lease_until__lt=now)
    ).select_related("cluster", "plan")
    sent = 0
    with transaction.atomic():
        for action in stale:
            if _blocked(action) is None:
                action_dispatch(action)
                sent += 1
    return sent
