"""Planning: a diagnosed failure in, one RecoveryPlan and its actions out.

`failure_recovery_plan(failure)` runs in the diagnosis transaction (signals.py). It gathers the
facts (the job, its nodes, earlier failures, restarts so far, what the same incident already
did), asks the policy (policy.py) and writes the plan and its actions with their exact
commands. The cluster's mode decides their first status: `ready` (auto, sent to the cluster's
recovery queue after commit), `awaiting_approval` or `dry_run`. Idempotent: a second diagnosis
with the same cause changes nothing; a new cause replaces the actions that have not acted.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from webapp.failures.choices import FailureKind
from webapp.failures.models import FailureEvent
from webapp.failures.services import failure_action_record
from webapp.failures.taxonomy import xid_info
from webapp.fleet.models import Node
from webapp.jobs.models import Job, JobAllocation
from webapp.recovery import policy
from webapp.recovery.actions import actions_create
from webapp.recovery.choices import (
    FINAL_STATES,
    ActionKind,
    ActionStatus,
    PlanKind,
)
from webapp.recovery.executors import executor_for
from webapp.recovery.executors.base import UnsupportedAction
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy
from webapp.recovery.services import recovery_policy

log = logging.getLogger("vigil.recovery")

RESTART_KINDS = (ActionKind.REQUEUE, ActionKind.RESUBMIT)
# Statuses of an action that did, or may still, take effect.
LIVE = (
    ActionStatus.AWAITING_APPROVAL,
    ActionStatus.READY,
    ActionStatus.RUNNING,
    ActionStatus.SUCCEEDED,
)
DRAIN_STATES = ("draining", "drained")
OUT_STATES = ("draining", "drained", "down")
# What follows a drain for NVIDIA's RESET_GPU and RESTART_BM / RESTART_VM, where the executor
# can do it.
AFTER_DRAIN = frozenset({ActionKind.RESET_GPU.value, ActionKind.REBOOT.value})
# A drain that succeeded this recently counts even before the scheduler watcher reports it.
DRAIN_REPORT_LAG = timedelta(minutes=5)


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
    # A resume Vigil ran after the drain, or after the scheduler's last report of the node,
    # returned it to service: the watcher may not have reported it since, and a new fault
    # there must drain it again.
    resumed = RecoveryAction.objects.filter(
        cluster_id=cluster_id, kind=ActionKind.RESUME, status=ActionStatus.SUCCEEDED
    )
    by_scheduler = Node.objects.filter(cluster_id=cluster_id, state__in=DRAIN_STATES).exclude(
        Exists(resumed.filter(host=OuterRef("hostname"), ended_at__gt=OuterRef("state_since")))
    )
    # A drain Vigil made counts until the scheduler has reported the node since (it may have
    # been returned to service meanwhile).
    unreported = Q(node__state_since__isnull=True) | Q(node__state_since__lt=F("ended_at"))
    by_vigil = (
        RecoveryAction.objects.filter(cluster_id=cluster_id, kind=ActionKind.DRAIN)
        .filter(
            Q(status__in=[ActionStatus.AWAITING_APPROVAL, ActionStatus.READY, ActionStatus.RUNNING])
            | (Q(status=ActionStatus.SUCCEEDED, ended_at__gte=now - DRAIN_REPORT_LAG) & unreported)
        )
        .exclude(Exists(resumed.filter(host=OuterRef("host"), ended_at__gt=OuterRef("ended_at"))))
    )
    return frozenset(by_scheduler.values_list("hostname", flat=True)) | frozenset(
        by_vigil.values_list("host", flat=True)
    )


def _hosts_held(cluster_id: int) -> frozenset[str]:
    """Nodes a person drained (the scheduler's reason for the drain is not Vigil's)."""
    drained = Node.objects.filter(cluster_id=cluster_id, state__in=DRAIN_STATES)
    people = drained.exclude(state_reason__startswith=policy.VIGIL_REASON_PREFIX)
    return frozenset(people.values_list("hostname", flat=True))


def _hosts_escalated(cluster_id: int) -> frozenset[str]:
    """Nodes Vigil drained for an escalation: they wait for a person, like a person's drain."""
    drained = Node.objects.filter(cluster_id=cluster_id, state__in=OUT_STATES)
    marked = drained.filter(
        state_reason__istartswith=policy.VIGIL_REASON_PREFIX,
        state_reason__contains=policy.ESCALATED_MARK,
    )
    return frozenset(marked.values_list("hostname", flat=True))


# "Xid 54: ..." (failures/diagnosis/events.py writes a kernel line's detail so).
XID_DETAIL = re.compile(r"^Xid (\d+)\b")


def _catalog_words(failure: FailureEvent) -> str:
    """The catalog's mnemonic, description and resolutions of the Xid behind the failure, as
    operators are told them; "" where no Xid is behind it."""
    code = failure.gpu_error.xid if failure.gpu_error_id else 0
    if not code:
        m = XID_DETAIL.match(failure.detail or "")
        code = int(m.group(1)) if m else 0
    if not code:
        return ""
    xid = xid_info(code)
    words = f"Xid {code}"
    if xid.mnemonic:
        words += f" {xid.mnemonic}"
    words += f": {xid.description or xid.meaning}"
    resolutions = [r for r in (xid.immediate, xid.investigatory) if r]
    if resolutions:
        words += f" (NVIDIA's resolution: {', then '.join(dict.fromkeys(resolutions))})"
    return words


def _guard_facts(cluster_id: int, now: datetime) -> dict:
    """Where the cluster stands against its guard rails: drains Vigil made in the last hour
    (those that acted or will; a drain inside a GPU reset's reservation keeps a node out that
    is out already), nodes out of service now, nodes in all."""
    drains = (
        RecoveryAction.objects.filter(
            cluster_id=cluster_id,
            kind=ActionKind.DRAIN,
            created_at__gte=now - timedelta(hours=1),
            status__in=[ActionStatus.READY, ActionStatus.RUNNING, ActionStatus.SUCCEEDED],
        )
        .exclude(params__contains={"reserved": True})
        .count()
    )
    nodes = Node.objects.filter(cluster_id=cluster_id)
    return {
        "drains_last_hour": drains,
        "nodes_out": nodes.filter(state__in=OUT_STATES).count(),
        "nodes_total": nodes.count(),
    }


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


# Evidence streams the job's user cannot write (webapp/failures/evidence.py): the node agent's
# kernel log and NVML events, and the scheduler's own record of the job's end.
NODE_AGENT_STREAMS = ("kernel", "scheduler")


def _node_evidence(failure: FailureEvent) -> bool:
    """Whether the failure was blamed on node-agent evidence: a GPU error (kernel log, NVML,
    counters), or a job failure whose deciding line (the first of its evidence) came from
    the kernel or the scheduler stream rather than the job's own log."""
    if failure.kind == FailureKind.GPU_ERROR:
        return True
    first = failure.evidence[0] if failure.evidence else {}
    return isinstance(first, dict) and first.get("file") in NODE_AGENT_STREAMS


def _by_node_evidence() -> Q:
    """`_node_evidence` as a filter over the failures on record."""
    return Q(kind=FailureKind.GPU_ERROR) | Q(evidence__0__file__in=NODE_AGENT_STREAMS)


def _detected_late_s(failure: FailureEvent) -> float | None:
    """Seconds from the failure to its detection when more than VIGIL_RECOVERY_ACT_WITHIN_S
    (the policy then only tells), else None."""
    if failure.detected_at is None or failure.occurred_at is None:
        return None
    lag = (failure.detected_at - failure.occurred_at).total_seconds()
    return lag if lag > settings.VIGIL_RECOVERY_ACT_WITHIN_S else None


def _facts(
    failure: FailureEvent, max_restarts: int, rails: RecoveryPolicy | None = None
) -> tuple[policy.Facts, dict[str, Job]]:
    since = failure.occurred_at - timedelta(hours=policy.BREAKER_WINDOW_H)
    earlier = (
        FailureEvent.objects.filter(
            cluster_id=failure.cluster_id,
            cause=failure.cause,
            kind=failure.kind,  # a job failure and the GPU error behind it are one incident
            occurred_at__gte=since,
            occurred_at__lt=failure.occurred_at,
        )
        .filter(_by_node_evidence())  # a job's own log cannot trip the breaker
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
        node_evidence=_node_evidence(failure),
        error_host=failure.node.hostname if failure.node else None,
        job=job_facts,
        jobs_on_host=on_host,
        same_cause_hosts=same_cause,
        max_restarts=max_restarts,
        hosts_drained=_hosts_drained(failure.cluster_id, timezone.now()),
        jobs_requeued=_jobs_requeued(jobs),
        retry_base_s=settings.VIGIL_RECOVERY_RETRY_BASE_S,
        hosts_held=_hosts_held(failure.cluster_id),
        hosts_escalated=_hosts_escalated(failure.cluster_id),
        catalog_words=_catalog_words(failure),
        gpu_bus_id=failure.gpu.pci_bus_id if failure.gpu_id else "",
        health_check=bool(settings.VIGIL_HEALTHCHECK_SCRIPT),
        **_guard_facts(failure.cluster_id, timezone.now()),
        detected_late_s=_detected_late_s(failure),
        act_within_s=settings.VIGIL_RECOVERY_ACT_WITHIN_S,
    )
    if rails is not None:
        try:
            executor = executor_for(rails.executor)
            unsupported = frozenset(k for k in AFTER_DRAIN if not executor.supports(k))
        except UnsupportedAction:
            unsupported = AFTER_DRAIN
        facts = replace(
            facts,
            max_drains_per_hour=rails.max_drains_per_hour,
            max_out_share=rails.max_out_percent / 100,
            unsupported=unsupported,
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
    facts, jobs = _facts(failure, max_restarts, settings_row)
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
    actions_create(plan, decision.steps, jobs, first_seq)
    changed = decision.rule and not decision.rule.startswith("default_")
    failure_action_record(failure, decision.action, decision.reason if changed else "")
    return plan
