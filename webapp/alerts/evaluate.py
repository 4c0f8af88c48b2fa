"""Which alerts hold now: event rules (a diagnosed failure, a recovery action failed or waiting)
raised as the events are stored, and condition rules (temperature, node down, idle GPUs,
ingest) evaluated by beat (`alerts_evaluate`, every 15 s), which also flushes due groups and
hands lost notifications to a worker again."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from webapp.alerts import rules
from webapp.alerts.choices import (
    ACTIVE_STATES,
    EVENT_RULES,
    AlertState,
    RuleKind,
)
from webapp.alerts.delivery import alertmanager_refresh, group_flush, notifications_sweep
from webapp.alerts.lifecycle import (
    Raise,
    alert_raise,
    alert_resolve,
    alerts_resolve_missing,
    group_schedule,
    rule_of,
)
from webapp.alerts.models import (
    Alert,
    AlertGroup,
    AlertRule,
)
from webapp.failures import taxonomy
from webapp.failures.choices import FailureKind, GpuErrorKind
from webapp.failures.models import FailureEvent
from webapp.fleet.choices import SCHEDULER_OUT_OF_SERVICE
from webapp.fleet.models import Cluster, Node
from webapp.jobs.models import Job
from webapp.recovery.choices import ActionKind, ActionStatus
from webapp.recovery.models import RecoveryAction

log = logging.getLogger("vigil.alerts")

# A drain that waits for approval, is ready or runs: its node is on its way out of service.
DRAIN_LIVE = (ActionStatus.AWAITING_APPROVAL, ActionStatus.READY, ActionStatus.RUNNING)

# --- event rules -----------------------------------------------------------------------------


def _gpu_hardware_hit(rule: AlertRule, failure: FailureEvent) -> str | None:
    """What makes this GPU error critical (None: it is not)."""
    event = failure.gpu_error
    if event is None:
        return None
    if event.kind in (rule.params.get("error_kinds") or ()):
        return GpuErrorKind(event.kind).label
    if event.kind == GpuErrorKind.XID:
        info = taxonomy.xid_info(event.xid)
        if info.page or event.xid in (rule.params.get("extra_xids") or ()):
            return f"Xid {event.xid} ({info.meaning})"
    return None


def _failure_alert(
    rule: AlertRule, failure: FailureEvent, summary: str, labels: dict, now: datetime, **found: Any
) -> Alert:
    """The one alert a failure raises under `rule` (the failure is its identity)."""
    return alert_raise(
        rule,
        Raise(
            identity={"failure": failure.pk},
            summary=summary,
            labels=labels,
            cluster=failure.cluster,
            cause=failure.cause,
            failure_id=failure.pk,
            **found,
        ),
        now,
    )


def failure_alerts(failure_id: int, now: datetime | None = None) -> list[Alert]:
    """Raise the alert of a diagnosed failure (a failed job, a critical GPU error), and of its
    recovery actions waiting for approval."""
    now = now or timezone.now()
    failure = (
        FailureEvent.objects.select_related("cluster", "job", "node", "gpu", "gpu_error")
        .filter(pk=failure_id)
        .first()
    )
    if failure is None or not failure.cause:
        return []
    raised: list[Alert] = []
    node_id = failure.blamed_node_id or failure.node_id
    labels = {
        "cluster": failure.cluster.name,
        "cause": failure.cause,
        "category": failure.category,
    }
    if failure.blamed_host or failure.node_id:
        labels["node"] = failure.blamed_host or failure.node.hostname
    if failure.blamed_gpu_label:
        labels["gpu"] = failure.blamed_gpu_label
    if failure.kind == FailureKind.GPU_ERROR:
        rule = rule_of(RuleKind.GPU_HARDWARE)
        what = _gpu_hardware_hit(rule, failure) if rule else None
        if rule and what:
            index = failure.gpu_error.gpu_index
            if index is not None:
                labels.setdefault("gpu", str(index))
            host = failure.node.hostname if failure.node else "?"
            raised.append(
                _failure_alert(
                    rule,
                    failure,
                    f"{host} GPU {index if index is not None else '?'}: {what}",
                    labels,
                    now,
                    severity=rule.severity,
                    node_id=failure.node_id,
                    gpu_id=failure.gpu_id,
                )
            )
    elif failure.kind == FailureKind.JOB_FAILURE and failure.job is not None:
        rule = rule_of(RuleKind.JOB_FAILED)
        job = failure.job
        severity = None
        if rule:
            severity = rules.job_failure_severity(
                rule.params,
                rule.severity,
                job_type=job.job_type,
                gpus=job.gpus_requested,
                cause=failure.cause,
            )
        fp = rules.fingerprint(rule.name, {"failure": failure.pk}) if rule else ""
        if rule and severity is None:
            for old in Alert.objects.filter(fingerprint=fp, state__in=ACTIVE_STATES):
                alert_resolve(old, now)
        elif rule and severity:
            labels["job"] = job.scheduler_id
            labels["job_type"] = job.job_type
            raised.append(
                _failure_alert(
                    rule,
                    failure,
                    f"Job {job.scheduler_id} ({job.name or 'unnamed'}) failed: "
                    f"{failure.cause.replace('_', ' ')}",
                    labels,
                    now,
                    severity=severity,
                    node_id=node_id,
                    gpu_id=failure.blamed_gpu_id,
                    job=job,
                    value=failure.gpu_hours_lost,
                )
            )
    waiting = RecoveryAction.objects.filter(
        plan__failure=failure, status=ActionStatus.AWAITING_APPROVAL
    )
    for action in waiting.values_list("pk", flat=True):
        raised += recovery_action_alerts(action, now)
    return raised


def recovery_action_alerts(action_id: int, now: datetime | None = None) -> list[Alert]:
    """A recovery action that failed, or that waits for approval, is an alert."""
    now = now or timezone.now()
    action = (
        RecoveryAction.objects.select_related("cluster", "plan", "job", "node")
        .filter(pk=action_id)
        .first()
    )
    if action is None or action.kind == ActionKind.NOTIFY:
        return []
    kind = {
        ActionStatus.FAILED: RuleKind.RECOVERY_FAILED,
        ActionStatus.AWAITING_APPROVAL: RuleKind.RECOVERY_APPROVAL,
    }.get(action.status)
    rule = rule_of(kind) if kind else None
    if rule is None:
        return []
    target = action.host or action.job_scheduler_id
    verb = "failed" if kind == RuleKind.RECOVERY_FAILED else "waits for approval"
    labels = {"cluster": action.cluster.name, "action": action.kind, "cause": action.plan.cause}
    if action.host:
        labels["node"] = action.host
    if action.job_scheduler_id:
        labels["job"] = action.job_scheduler_id
    summary = f"Recovery action {action.get_kind_display().lower()} {target} {verb}"
    if action.status == ActionStatus.FAILED and action.result:
        summary += f": {action.result.removeprefix('failed: ')}"
    found = Raise(
        identity={"action": action.pk},
        labels=labels,
        summary=summary,
        severity=rule.severity,
        cluster=action.cluster,
        cause=action.plan.cause,
        node_id=action.node_id,
        job=action.job,
        failure_id=action.plan.failure_id,
        action_id=action.pk,
    )
    return [alert_raise(rule, found, now)]


# --- condition rules (beat) ------------------------------------------------------------------


def _raised(rule: AlertRule, found: Raise, now: datetime) -> str:
    """Raise (or refresh) a condition's alert, pending until it has held: its fingerprint,
    for the set of alerts the evaluation keeps."""
    return alert_raise(rule, found, now, pending=True).fingerprint


def _eval_node_down(rule: AlertRule, now: datetime) -> set[str]:
    keep = set()
    since = now - timedelta(seconds=rule.for_s)
    # Silent: neither a recent sample nor a recent batch (replayed history is not silence).
    heard = Node.objects.annotate(heard=Greatest("last_seen", "last_contact_at"))
    for node in heard.filter(heard__lt=since).select_related("cluster"):
        silent_min = (now - node.heard).total_seconds() / 60
        a = alert_raise(
            rule,
            Raise(
                identity={"node": node.pk},
                labels={"cluster": node.cluster.name, "node": node.hostname},
                summary=f"{node.hostname} has not reported for {silent_min:.0f} min",
                severity=rule.severity,
                cluster=node.cluster,
                node_id=node.pk,
                value=(now - node.heard).total_seconds(),
            ),
            now,
        )
        keep.add(a.fingerprint)
    return keep


def _eval_gpu_thermal(rule: AlertRule, now: datetime) -> set[str]:
    from webapp.telemetry.choices import THERMAL_CLOCK_EVENTS
    from webapp.telemetry.selectors import gpus_latest

    keep = set()
    limit = rule.threshold if rule.threshold is not None else float("inf")
    clusters = {c.pk: c for c in Cluster.objects.all()}
    for g in gpus_latest():
        if g.ts is None:
            continue
        temp = g.values.get("gpu_temp_c")
        reasons = g.values.get("clocks_event_reasons")
        hot = temp is not None and temp > limit
        throttled = reasons is not None and bool(int(reasons) & THERMAL_CLOCK_EVENTS)
        if not (hot or throttled):
            continue
        why = f"{temp:.0f} C" if hot else "thermally throttled"
        found = Raise(
            identity={"gpu": g.uuid},
            labels={"cluster": g.cluster, "node": g.hostname, "gpu": str(g.index)},
            summary=f"{g.hostname} GPU {g.index} {why}",
            severity=rule.severity,
            cluster=clusters.get(g.cluster_id),
            node_id=g.node_id,
            gpu_id=g.gpu_id,
            value=temp,
        )
        keep.add(_raised(rule, found, now))
    return keep


# Idle GPUs: how long an idle job's alert stays active after its GPUs look busy again, so that
# a job whose utilization hovers about the threshold between samples keeps one pending alert
# instead of raising and resolving one every evaluation (15 s): Alertmanager's keep_firing_for,
# applied to pending too. A tenth of the rule's default for_s (1,800 s).
IDLE_CLEAR_S = 180.0
# The idle GPU-time that fires the alert before for_s has passed: a 112-GPU job idle for two
# minutes has wasted what a 4-GPU job wastes in an hour. GPU-hours.
IDLE_FIRE_GPU_HOURS = 4.0
# A run's first minutes: its GPUs idle while it loads the model and its checkpoint (a job that
# recovery requeued does so on every restart). Idle then is the run starting, not GPUs wasted;
# idle past it counts from the run's start, so a run that never computes still fires. Seconds;
# params.startup_s overrides.
IDLE_STARTUP_S = 600.0
# Severity by the number of GPUs idle: at least this many GPUs raise this severity (the
# rule's own below the first): a node's worth is a warning, a pretraining job's a page.
IDLE_SEVERITY_GPUS = {"warning": 8, "critical": 64}


def idle_severity(params: dict, base: str, idle_gpus: int) -> str:
    """The idle alert's severity for `idle_gpus` GPUs: the highest of params.severity_gpus
    (default IDLE_SEVERITY_GPUS) whose count it reaches, else the rule's."""
    levels = params.get("severity_gpus") or IDLE_SEVERITY_GPUS
    reached = [(int(n), sev) for sev, n in levels.items() if idle_gpus >= int(n)]
    return max(reached)[1] if reached else base


def idle_hold_s(params: dict, for_s: float, idle_gpus: int) -> float:
    """How long the idle condition must hold before it fires: the rule's for_s, or less when
    the idle GPU-time reaches params.fire_gpu_hours (default IDLE_FIRE_GPU_HOURS) first."""
    gpu_hours = float(params.get("fire_gpu_hours") or IDLE_FIRE_GPU_HOURS)
    return min(float(for_s), gpu_hours * 3600 / max(idle_gpus, 1))


def _eval_gpus_idle(rule: AlertRule, now: datetime) -> set[str]:
    from webapp.jobs.choices import JobState
    from webapp.jobs.models import JobAllocation
    from webapp.telemetry.selectors import gpus_latest

    limit = rule.threshold if rule.threshold is not None else 0.0
    util = {
        (g.node_id, g.index): g.values.get("gpu_util") for g in gpus_latest() if g.ts is not None
    }
    idle: dict[int, int] = {}
    allocations = JobAllocation.objects.filter(end__isnull=True, job__state=JobState.RUNNING)
    startup_s = float(rule.params.get("startup_s") or IDLE_STARTUP_S)
    started = allocations.filter(start__lte=now - timedelta(seconds=startup_s))
    for job_id, node_id, index in started.values_list("job_id", "node_id", "gpu_index"):
        value = util.get((node_id, index))
        if value is not None and value <= limit:
            idle[job_id] = idle.get(job_id, 0) + 1
    keep = set()
    for job in Job.objects.filter(pk__in=idle).select_related("cluster"):
        n = idle[job.pk]
        found = Raise(
            identity={"job": job.pk},
            labels={"cluster": job.cluster.name, "job": job.scheduler_id},
            summary=f"Job {job.scheduler_id} ({job.name or 'unnamed'}): "
            f"{n} of its {max(job.gpus_requested, n)} allocated GPU(s) idle",
            severity=idle_severity(rule.params, rule.severity, n),
            cluster=job.cluster,
            job=job,
            value=n,
            for_s=idle_hold_s(rule.params, rule.for_s, n),
        )
        keep.add(_raised(rule, found, now))
    # Hysteresis: a job seen idle within the clear time keeps its alert, while it still runs
    # (an ended job's GPUs are no longer its to waste: its alert resolves at once).
    clear_s = float(rule.params.get("clear_s") or IDLE_CLEAR_S)
    recent = Alert.objects.filter(
        rule=rule,
        state__in=ACTIVE_STATES,
        last_seen_at__gte=now - timedelta(seconds=clear_s),
        job__state=JobState.RUNNING,
        job__in=allocations.values("job_id"),
    )
    keep.update(recent.values_list("fingerprint", flat=True))
    return keep


def _eval_ingest_lag(rule: AlertRule, now: datetime) -> set[str]:
    from django.db.models import Max

    keep = set()
    limit = rule.threshold if rule.threshold is not None else float("inf")
    newest = Cluster.objects.annotate(seen=Max("nodes__last_seen")).filter(seen__isnull=False)
    for cluster in newest:
        lag = (now - cluster.seen).total_seconds()
        if lag <= limit:
            continue
        found = Raise(
            identity={"cluster": cluster.name},
            labels={"cluster": cluster.name},
            summary=f"{cluster.name}: newest stored data is {lag:.0f} s old",
            severity=rule.severity,
            cluster=cluster,
            value=lag,
        )
        keep.add(_raised(rule, found, now))
    return keep


def _eval_ingest_refused(rule: AlertRule, now: datetime) -> set[str]:
    from django.db.models import Count

    from webapp.core.models import RejectedBatch

    window_s = float(rule.params.get("window_s") or 600)
    limit = rule.threshold if rule.threshold is not None else 0.0
    rows = (
        RejectedBatch.objects.filter(received_at__gte=now - timedelta(seconds=window_s))
        .values("cluster")
        .annotate(n=Count("id"))
        .order_by()
    )
    clusters = {c.name: c for c in Cluster.objects.all()}
    keep = set()
    for row in rows:
        if row["n"] <= limit:
            continue
        name = row["cluster"] or "-"
        found = Raise(
            identity={"cluster": name},
            labels={"cluster": name},
            summary=f"{row['n']} batches refused from {name} in {window_s / 60:.0f} min",
            severity=rule.severity,
            cluster=clusters.get(row["cluster"]),
            value=row["n"],
        )
        keep.add(_raised(rule, found, now))
    return keep


CONDITIONS = {
    RuleKind.NODE_DOWN: _eval_node_down,
    RuleKind.GPU_THERMAL: _eval_gpu_thermal,
    RuleKind.GPUS_IDLE: _eval_gpus_idle,
    RuleKind.INGEST_LAG: _eval_ingest_lag,
    RuleKind.INGEST_REFUSED: _eval_ingest_refused,
}


def node_back_in_service(node: Node | None, since: datetime) -> bool:
    """Whether a node is in service again after a hardware error at `since`: the scheduler
    reports it in service, no drain of it waits or runs, and any drain Vigil made of it since
    the error has been followed by the scheduler reporting it again (a node Vigil drained is
    out of service until an operator returns it, even before the scheduler says so)."""
    if node is None:
        return True
    if node.state in SCHEDULER_OUT_OF_SERVICE:
        return False
    drains = RecoveryAction.objects.filter(node_id=node.pk, kind=ActionKind.DRAIN)
    if drains.filter(status__in=DRAIN_LIVE).exists():
        return False
    done = drains.filter(status=ActionStatus.SUCCEEDED, ended_at__gte=since)
    if node.state_since is not None:
        done = done.filter(ended_at__gt=node.state_since)
    return not done.exists()


def _events_expire(now: datetime) -> int:
    """Event alerts end resolve_after_s after their last event; an approval alert ends when
    its action no longer waits; a hardware alert not before its node is back in service (a
    drained node has not been repaired)."""
    n = 0
    active = Alert.objects.filter(state__in=ACTIVE_STATES, rule__kind__in=EVENT_RULES)
    for alert in active.select_related("rule", "recovery_action", "node"):
        over = now - alert.last_seen_at >= timedelta(seconds=alert.rule.resolve_after_s)
        if alert.rule.kind == RuleKind.RECOVERY_APPROVAL:
            action = alert.recovery_action
            over = action is None or action.status != ActionStatus.AWAITING_APPROVAL
        elif over and alert.rule.kind == RuleKind.GPU_HARDWARE:
            over = node_back_in_service(alert.node, alert.starts_at)
        if over:
            alert_resolve(alert, now)
            n += 1
    return n


def _groups_due(now: datetime) -> int:
    """Groups whose flush is due (its task was lost), and groups with news nobody planned:
    firing alerts never sent (they were silenced or inhibited) or due for a repeat."""
    flushed = 0
    for pk in AlertGroup.objects.filter(flush_at__lte=now).values_list("pk", flat=True):
        flushed += bool(group_flush(pk, now))
    unplanned = Alert.objects.filter(state=AlertState.FIRING, group__flush_at__isnull=True).filter(
        Q(notified_at__isnull=True)
        | Q(last_notified_at__lte=now - timedelta(seconds=1) * F("rule__repeat_interval_s"))
    )
    for alert in unplanned.select_related("rule").order_by("group_id").distinct("group_id"):
        with transaction.atomic():
            group_schedule(alert.group_id, alert.rule, now)
    return flushed


def alerts_evaluate(now: datetime | None = None) -> dict:
    """The beat task's round: condition rules, event expiry, due groups, stale deliveries."""
    now = now or timezone.now()
    out: dict = {}
    for rule in AlertRule.objects.filter(enabled=True, kind__in=list(CONDITIONS)):
        keep = CONDITIONS[rule.kind](rule, now)
        out[rule.name] = len(keep)
        alerts_resolve_missing(rule, keep, now)
    for rule in AlertRule.objects.filter(enabled=False):
        alerts_resolve_missing(rule, set(), now)
    waiting = RecoveryAction.objects.filter(status=ActionStatus.AWAITING_APPROVAL)
    for pk in waiting.exclude(alerts__state__in=ACTIVE_STATES).values_list("pk", flat=True):
        recovery_action_alerts(pk, now)
    out["expired"] = _events_expire(now)
    out["flushed"] = _groups_due(now)
    out["resent"] = notifications_sweep(now)
    out["alertmanager"] = alertmanager_refresh(now)
    return out
