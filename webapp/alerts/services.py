"""Writes of the alerts app: alerts raised and resolved, groups flushed into notifications,
notifications delivered, subscriptions and silences managed.

The path of a failure (issue 13 section 7: nothing waits on a poll):
`failure_diagnosed` (inside the diagnosis transaction) -> on commit, task `vigil.alerts.failure`
-> `failure_alerts` raises the alert and plans its group's flush (group_wait, 1 s by default)
-> task `vigil.alerts.flush` -> `group_flush` writes one Notification per recipient, each with
its message rendered, and on commit sends task `vigil.alerts.send` for each
-> `notification_send` claims the row by a conditional UPDATE, sends, records `sent_at`.

Condition rules (temperature, node down, idle GPUs, ingest) are evaluated by the beat task
(`alerts_evaluate`, every 15 s), which also flushes due groups and hands lost or stale
notifications to a worker again (`notifications_sweep`).

Crash safety: a Notification is on record (committed) before it is sent. A worker killed after
claiming it and before sending leaves it `sending` with a lease; when the lease runs out the
row is claimed again and sent once. The one window left is between the server accepting the
message and the UPDATE that records `sent_at` (a single statement in autocommit, right after
the SMTP reply): a crash there sends it again, with the same Message-ID, derived from the row.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core import signing
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.alerts import emails, rules
from webapp.alerts import selectors as sel
from webapp.alerts.choices import (
    ACTIVE_STATES,
    EVENT_RULES,
    AlertState,
    ChannelKind,
    NotificationKind,
    NotificationStatus,
    RuleKind,
    Severity,
    SubscriptionScope,
)
from webapp.alerts.models import (
    Alert,
    AlertGroup,
    AlertRule,
    Channel,
    Notification,
    Silence,
    Subscription,
)
from webapp.alerts.transports import PermanentError, TransientError, transport_for
from webapp.celery import app
from webapp.failures import taxonomy
from webapp.failures.choices import FailureKind, GpuErrorKind
from webapp.failures.models import FailureEvent
from webapp.fleet.models import Cluster, Node
from webapp.jobs.models import Job
from webapp.recovery.choices import ActionKind, ActionStatus, Audience
from webapp.recovery.models import RecoveryAction
from webapp.teams.selectors import job_team_id

log = logging.getLogger("vigil.alerts")

FAILURE_TASK = "vigil.alerts.failure"
ACTION_TASK = "vigil.alerts.recovery_action"
FLUSH_TASK = "vigil.alerts.flush"
SEND_TASK = "vigil.alerts.send"

# The unsubscribe page's path (the pages' urls.py, "alerts:unsubscribe"): fixed here so the
# link in an email never depends on a page being deployed.
UNSUBSCRIBE_PATH = "/alerts/unsubscribe/{token}/"
UNSUBSCRIBE_SALT = "vigil.alerts.unsubscribe"

# Alertmanager forgets a posted alert after its resolve_timeout (5 minutes by default) unless
# it is posted again: firing alerts are re-posted this often (as Prometheus does).
ALERTMANAGER_REFRESH_S = 60


class AlertsError(ValueError):
    """A request about alerts that cannot be honoured, with the reason."""


# --- raising and resolving -------------------------------------------------------------------


def _rule(kind: str) -> AlertRule | None:
    return AlertRule.objects.filter(kind=kind, enabled=True).order_by("pk").first()


def _group(cluster: Cluster | None, cause: str) -> AlertGroup:
    key = f"{cluster.name if cluster else '-'}:{cause}"
    group, _ = AlertGroup.objects.get_or_create(
        key=key, defaults={"cluster": cluster, "cause": cause}
    )
    return group


def group_schedule(group_id: int, rule: AlertRule, now: datetime) -> None:
    """Plan the group's next notification (Alertmanager timers); sent after commit."""
    group = AlertGroup.objects.select_for_update().get(pk=group_id)
    due = rules.group_flush_at(
        now,
        pending_flush_at=group.flush_at,
        last_notified_at=group.last_notified_at,
        group_wait_s=rule.group_wait_s,
        group_interval_s=rule.group_interval_s,
    )
    if group.flush_at == due:
        return
    group.flush_at = due
    group.save(update_fields=["flush_at"])
    countdown = max(0.0, (due - now).total_seconds())
    transaction.on_commit(
        lambda: app.send_task(FLUSH_TASK, args=[group_id], countdown=countdown),
        robust=True,  # the beat task flushes due groups if the broker was away
    )


@dataclass(frozen=True)
class Raise:
    """One alert as an evaluation found it."""

    identity: dict
    labels: dict
    summary: str
    severity: str
    cluster: Cluster | None
    cause: str = ""
    node_id: int | None = None
    gpu_id: int | None = None
    job: Job | None = None
    failure_id: int | None = None
    action_id: int | None = None
    value: float | None = None


def alert_raise(rule: AlertRule, found: Raise, now: datetime, *, pending: bool = False) -> Alert:
    """Create or refresh the active alert of this fingerprint. `pending`: a condition that
    fires only once it has held for the rule's for_s."""
    fp = rules.fingerprint(rule.name, found.identity)
    group = _group(found.cluster, found.cause or rule.name)
    labels = {"alertname": rule.name, "severity": found.severity, **found.labels}
    with transaction.atomic():
        alert = (
            Alert.objects.select_for_update()
            .filter(fingerprint=fp, state__in=ACTIVE_STATES)
            .first()
        )
        if alert is None:
            team_id = job_team_id(found.job) if found.job is not None else None
            state = AlertState.PENDING if pending and rule.for_s > 0 else AlertState.FIRING
            try:
                with transaction.atomic():
                    alert = Alert.objects.create(
                        rule=rule,
                        group=group,
                        fingerprint=fp,
                        labels=labels,
                        summary=found.summary[:512],
                        severity=found.severity,
                        state=state,
                        cluster=found.cluster,
                        node_id=found.node_id,
                        gpu_id=found.gpu_id,
                        job=found.job,
                        failure_id=found.failure_id,
                        recovery_action_id=found.action_id,
                        cause=found.cause,
                        team_id=team_id,
                        value=found.value,
                        starts_at=now,
                        last_seen_at=now,
                    )
            except IntegrityError:  # another worker raised it a moment ago
                return alert_raise(rule, found, now, pending=pending)
            if state == AlertState.FIRING:
                group_schedule(group.pk, rule, now)
            return alert
        changed_group = alert.group_id != group.pk
        alert.labels = labels
        alert.summary = found.summary[:512]
        alert.severity = found.severity
        alert.value = found.value
        alert.cause = found.cause
        alert.last_seen_at = now
        fields = ["labels", "summary", "severity", "value", "cause", "last_seen_at"]
        became_firing = alert.state == AlertState.PENDING and (
            not pending or now - alert.starts_at >= timedelta(seconds=rule.for_s)
        )
        if became_firing:
            alert.state = AlertState.FIRING
            fields.append("state")
        if changed_group:
            # Re-diagnosed as another cause: it belongs with that incident, told again.
            alert.group = group
            alert.notified_at = None
            fields += ["group", "notified_at"]
        alert.save(update_fields=fields)
        if became_firing or (changed_group and alert.state == AlertState.FIRING):
            group_schedule(group.pk, rule, now)
        return alert


def alert_resolve(alert: Alert, now: datetime) -> None:
    with transaction.atomic():
        n = Alert.objects.filter(pk=alert.pk, state__in=ACTIVE_STATES).update(
            state=AlertState.RESOLVED, ends_at=now
        )
        if (
            n
            and alert.state == AlertState.FIRING
            and alert.notified_at
            and alert.rule.send_resolved
        ):
            group_schedule(alert.group_id, alert.rule, now)


def _resolve_missing(rule: AlertRule, keep: set[str], now: datetime) -> int:
    gone = Alert.objects.filter(rule=rule, state__in=ACTIVE_STATES).exclude(fingerprint__in=keep)
    n = 0
    for alert in gone.select_related("rule"):
        alert_resolve(alert, now)
        n += 1
    return n


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
        rule = _rule(RuleKind.GPU_HARDWARE)
        what = _gpu_hardware_hit(rule, failure) if rule else None
        if rule and what:
            index = failure.gpu_error.gpu_index
            if index is not None:
                labels.setdefault("gpu", str(index))
            host = failure.node.hostname if failure.node else "?"
            raised.append(
                alert_raise(
                    rule,
                    Raise(
                        identity={"failure": failure.pk},
                        labels=labels,
                        summary=f"{host} GPU {index if index is not None else '?'}: {what}",
                        severity=rule.severity,
                        cluster=failure.cluster,
                        cause=failure.cause,
                        node_id=failure.node_id,
                        gpu_id=failure.gpu_id,
                        failure_id=failure.pk,
                    ),
                    now,
                )
            )
    elif failure.kind == FailureKind.JOB_FAILURE and failure.job is not None:
        rule = _rule(RuleKind.JOB_FAILED)
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
                alert_raise(
                    rule,
                    Raise(
                        identity={"failure": failure.pk},
                        labels=labels,
                        summary=f"Job {job.scheduler_id} ({job.name or 'unnamed'}) failed: "
                        f"{failure.cause.replace('_', ' ')}",
                        severity=severity,
                        cluster=failure.cluster,
                        cause=failure.cause,
                        node_id=node_id,
                        gpu_id=failure.blamed_gpu_id,
                        job=job,
                        failure_id=failure.pk,
                        value=failure.gpu_hours_lost,
                    ),
                    now,
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
    rule = _rule(kind) if kind else None
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


def _eval_node_down(rule: AlertRule, now: datetime) -> set[str]:
    keep = set()
    since = now - timedelta(seconds=rule.for_s)
    for node in Node.objects.filter(last_seen__lt=since).select_related("cluster"):
        silent_min = (now - node.last_seen).total_seconds() / 60
        a = alert_raise(
            rule,
            Raise(
                identity={"node": node.pk},
                labels={"cluster": node.cluster.name, "node": node.hostname},
                summary=f"{node.hostname} has not reported for {silent_min:.0f} min",
                severity=rule.severity,
                cluster=node.cluster,
                node_id=node.pk,
                value=(now - node.last_seen).total_seconds(),
            ),
            now,
        )
        keep.add(a.fingerprint)
    return keep


def _eval_gpu_thermal(rule: AlertRule, now: datetime) -> set[str]:
    from webapp.telemetry.metrics import THERMAL_CLOCK_EVENTS
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
        a = alert_raise(
            rule,
            Raise(
                identity={"gpu": g.uuid},
                labels={"cluster": g.cluster, "node": g.hostname, "gpu": str(g.index)},
                summary=f"{g.hostname} GPU {g.index} {why}",
                severity=rule.severity,
                cluster=clusters.get(g.cluster_id),
                node_id=g.node_id,
                gpu_id=g.gpu_id,
                value=temp,
            ),
            now,
            pending=True,
        )
        keep.add(a.fingerprint)
    return keep


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
    for job_id, node_id, index in allocations.values_list("job_id", "node_id", "gpu_index"):
        value = util.get((node_id, index))
        if value is not None and value <= limit:
            idle[job_id] = idle.get(job_id, 0) + 1
    keep = set()
    for job in Job.objects.filter(pk__in=idle).select_related("cluster"):
        a = alert_raise(
            rule,
            Raise(
                identity={"job": job.pk},
                labels={"cluster": job.cluster.name, "job": job.scheduler_id},
                summary=f"Job {job.scheduler_id} ({job.name or 'unnamed'}): "
                f"{idle[job.pk]} allocated GPU(s) idle",
                severity=rule.severity,
                cluster=job.cluster,
                job=job,
                value=idle[job.pk],
            ),
            now,
            pending=True,
        )
        keep.add(a.fingerprint)
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
        a = alert_raise(
            rule,
            Raise(
                identity={"cluster": cluster.name},
                labels={"cluster": cluster.name},
                summary=f"{cluster.name}: newest stored data is {lag:.0f} s old",
                severity=rule.severity,
                cluster=cluster,
                value=lag,
            ),
            now,
            pending=True,
        )
        keep.add(a.fingerprint)
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
        a = alert_raise(
            rule,
            Raise(
                identity={"cluster": name},
                labels={"cluster": name},
                summary=f"{row['n']} batches refused from {name} in {window_s / 60:.0f} min",
                severity=rule.severity,
                cluster=clusters.get(row["cluster"]),
                value=row["n"],
            ),
            now,
            pending=True,
        )
        keep.add(a.fingerprint)
    return keep


CONDITIONS = {
    RuleKind.NODE_DOWN: _eval_node_down,
    RuleKind.GPU_THERMAL: _eval_gpu_thermal,
    RuleKind.GPUS_IDLE: _eval_gpus_idle,
    RuleKind.INGEST_LAG: _eval_ingest_lag,
    RuleKind.INGEST_REFUSED: _eval_ingest_refused,
}


def _events_expire(now: datetime) -> int:
    """Event alerts end resolve_after_s after their last event; an approval alert ends when
    its action no longer waits."""
    n = 0
    active = Alert.objects.filter(state__in=ACTIVE_STATES, rule__kind__in=EVENT_RULES)
    for alert in active.select_related("rule", "recovery_action"):
        over = now - alert.last_seen_at >= timedelta(seconds=alert.rule.resolve_after_s)
        if alert.rule.kind == RuleKind.RECOVERY_APPROVAL:
            action = alert.recovery_action
            over = action is None or action.status != ActionStatus.AWAITING_APPROVAL
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
        _resolve_missing(rule, keep, now)
    for rule in AlertRule.objects.filter(enabled=False):
        _resolve_missing(rule, set(), now)
    waiting = RecoveryAction.objects.filter(status=ActionStatus.AWAITING_APPROVAL)
    for pk in waiting.exclude(alerts__state__in=ACTIVE_STATES).values_list("pk", flat=True):
        recovery_action_alerts(pk, now)
    out["expired"] = _events_expire(now)
    out["flushed"] = _groups_due(now)
    out["resent"] = notifications_sweep(now)
    out["alertmanager"] = alertmanager_refresh(now)
    return out


# --- routing and notifications ---------------------------------------------------------------


def implicit_subscription(user: AbstractBaseUser, scope: str) -> Subscription | None:
    """The user's own-jobs or hardware subscription, made on first use (with their email
    channel); None when they have no address. An unsubscribed one stays inactive."""
    if not user.email:
        return None
    channel = sel.channels_email_of(user)
    if channel is None:
        channel = Channel.objects.create(
            kind=ChannelKind.EMAIL, user=user, name=user.email, config={"address": user.email}
        )
    sub, _ = Subscription.objects.get_or_create(user=user, channel=channel, scope=scope)
    return sub


def _implicit_for(alerts: list[Alert]) -> dict:
    User = get_user_model()
    out: dict = {}
    owners = {a.job.user for a in alerts if a.job_id and a.job.user}
    for user in User.objects.filter(username__in=owners, is_active=True):
        sub = implicit_subscription(user, SubscriptionScope.OWN_JOBS)
        if sub is not None:
            out[(user.get_username(), SubscriptionScope.OWN_JOBS)] = sub
    if any(sel.alert_is_hardware(a) for a in alerts):
        for user in sel.operators():
            sub = implicit_subscription(user, SubscriptionScope.HARDWARE)
            if sub is not None:
                out[(user.get_username(), SubscriptionScope.HARDWARE)] = sub
    return out


def unsubscribe_token(subscription: Subscription) -> str:
    return signing.dumps({"s": subscription.pk}, salt=UNSUBSCRIBE_SALT, compress=True)


def unsubscribe_url(subscription: Subscription) -> str:
    return emails.absolute(UNSUBSCRIBE_PATH.format(token=unsubscribe_token(subscription)))


def subscription_unsubscribe(token: str) -> Subscription:
    """Turn off the one subscription a link names (no login: the signature is the proof)."""
    try:
        data = signing.loads(token, salt=UNSUBSCRIBE_SALT)
    except signing.BadSignature:
        raise AlertsError("this unsubscribe link is not valid (it was changed or cut)") from None
    sub = Subscription.objects.filter(pk=data.get("s")).first()
    if sub is None:
        raise AlertsError("this subscription no longer exists")
    Subscription.objects.filter(pk=sub.pk).update(active=False, updated_at=timezone.now())
    sub.active = False
    return sub


def _kind_for(firing: list[Alert], resolved: list[Alert]) -> str:
    if not firing:
        return NotificationKind.RESOLVED
    if len(firing) == 1 and not resolved:
        if firing[0].rule.kind == RuleKind.RECOVERY_APPROVAL:
            return NotificationKind.APPROVAL
        return NotificationKind.FIRING
    return NotificationKind.GROUPED


def _group_title(group: AlertGroup) -> str:
    cluster = group.cluster.name if group.cluster_id else "all clusters"
    return f"{cluster}, {group.cause.replace('_', ' ')}"


def _am_alert(alert: Alert, now: datetime) -> dict:
    """An alert as Alertmanager's API takes it (same labels; resolved by endsAt)."""
    body = {
        "labels": {k: str(v) for k, v in alert.labels.items()},
        "annotations": {"summary": alert.summary, "vigil_fingerprint": alert.fingerprint},
        "startsAt": alert.starts_at.isoformat(),
        "generatorURL": emails.absolute(emails.ALERTS_PATH),
    }
    if alert.state == AlertState.RESOLVED and alert.ends_at:
        body["endsAt"] = alert.ends_at.isoformat()
    return body


def _webhook_payload(items: list[dict], alerts: list[Alert], kind: str, group: str) -> dict:
    return {
        "version": "1",
        "kind": kind,
        "group": group,
        "status": "resolved" if kind == NotificationKind.RESOLVED else "firing",
        "alerts": [
            {
                "fingerprint": a.fingerprint,
                "status": a.state,
                "labels": a.labels,
                "startsAt": a.starts_at.isoformat(),
                "endsAt": a.ends_at.isoformat() if a.ends_at else None,
                "summary": i["summary"],
                "url": i["url"],
                "diagnosis": i["failure"],
                "evidence": i["evidence"],
            }
            for a, i in zip(alerts, items, strict=True)
        ],
    }


def _sent_last_hour(channel: Channel, now: datetime) -> int:
    return (
        Notification.objects.filter(channel=channel, created_at__gte=now - timedelta(hours=1))
        .exclude(status=NotificationStatus.SKIPPED)
        .count()
    )


def _notify(
    recipient: sel.Recipient,
    firing: list[Alert],
    resolved: list[Alert],
    group: AlertGroup,
    now: datetime,
) -> Notification:
    """Write the one Notification of this recipient for this flush, message rendered."""
    kind = _kind_for(firing, resolved)
    alerts = firing + resolved
    items = [emails.alert_context(a, show_logs=recipient.shows_logs(a)) for a in alerts]
    title = _group_title(group)
    channel = recipient.channel
    n = Notification(channel=channel, subscription=recipient.subscription, group=group, kind=kind)
    if channel.kind == ChannelKind.EMAIL:
        unsub = unsubscribe_url(recipient.subscription)
        if kind == NotificationKind.FIRING:
            r = emails.email_alert_firing(items[0], unsubscribe_url=unsub)
        elif kind == NotificationKind.APPROVAL:
            r = emails.email_approval_waiting(items[0], unsubscribe_url=unsub)
        elif kind == NotificationKind.RESOLVED:
            r = emails.email_alerts_resolved(items, group=title, unsubscribe_url=unsub)
        else:
            r = emails.email_alerts_grouped(items, group=title, unsubscribe_url=unsub)
        n.to = channel.config.get("address", "")
        n.subject, n.body_text, n.body_html = r.subject, r.text, r.html
        n.payload = {"unsubscribe_url": unsub}
        limit = settings.VIGIL_ALERTS_RATE_LIMIT_PER_HOUR
        if rules.rate_limited(_sent_last_hour(channel, now), limit):
            n.status = NotificationStatus.SKIPPED
            n.error = f"rate limit: {limit} notifications to this address in the last hour"
    elif channel.kind == ChannelKind.WEBHOOK:
        n.to = channel.config.get("url", "")
        n.subject = title
        n.payload = _webhook_payload(items, alerts, kind, title)
    else:
        n.to = channel.config.get("url", "")
        n.subject = title
        n.payload = {"alerts": [_am_alert(a, now) for a in alerts]}
    n.save()
    n.alerts.set(alerts)
    return n


def _deliver_notify_actions(alerts: list[Alert], notes: list[Notification], now: datetime) -> None:
    """The recovery plan's notify actions are delivered by the alert emails of its failure."""
    owner_told = any(
        n.subscription and n.subscription.scope == SubscriptionScope.OWN_JOBS for n in notes
    )
    operators_told = any(
        n.subscription and n.subscription.scope == SubscriptionScope.HARDWARE for n in notes
    )
    audiences = [
        a
        for a, told in ((Audience.OWNER, owner_told), (Audience.OPERATORS, operators_told))
        if told
    ]
    failure_ids = {a.failure_id for a in alerts if a.failure_id}
    if failure_ids and audiences:
        RecoveryAction.objects.filter(
            plan__failure_id__in=failure_ids,
            kind=ActionKind.NOTIFY,
            audience__in=audiences,
            delivered_at__isnull=True,
        ).update(delivered_at=now)


def group_flush(group_id: int, now: datetime | None = None) -> list[Notification]:
    """Send what a group has to say now, one notification per recipient listing its alerts.
    Claimed by a conditional UPDATE of flush_at, so two workers never flush one group twice."""
    now = now or timezone.now()
    with transaction.atomic():
        claimed = AlertGroup.objects.filter(pk=group_id, flush_at__lte=now).update(flush_at=None)
        if not claimed:
            return []
        group = AlertGroup.objects.select_related("cluster").get(pk=group_id)
        silences = sel.silences_in_force(now)
        down = sel.nodes_down()
        candidates = group.alerts.filter(
            Q(state=AlertState.FIRING)
            | Q(
                state=AlertState.RESOLVED,
                notified_at__isnull=False,
                resolved_notified_at__isnull=True,
            )
        ).select_related("rule", "cluster", "node", "job", "failure")
        firing, resolved = [], []
        for alert in candidates.order_by("starts_at", "pk"):
            facts = sel.alert_facts(alert)
            if rules.silenced(facts, silences, now):
                continue
            if alert.state == AlertState.RESOLVED:
                if alert.rule.send_resolved:
                    resolved.append(alert)
                continue
            if rules.inhibited(facts, down):
                continue
            if alert.notified_at is None or rules.repeat_due(
                alert.last_notified_at, alert.rule.repeat_interval_s, now
            ):
                firing.append(alert)
        if not firing and not resolved:
            return []
        implicit = _implicit_for(firing + resolved)
        per_channel: dict[int, tuple[sel.Recipient, list[Alert], list[Alert]]] = {}
        for alert in firing + resolved:
            for r in sel.alert_recipients(alert, implicit):
                entry = per_channel.setdefault(r.channel.pk, (r, [], []))
                (entry[1] if alert.state == AlertState.FIRING else entry[2]).append(alert)
        notes = [_notify(r, f, res, group, now) for r, f, res in per_channel.values()]
        Alert.objects.filter(pk__in=[a.pk for a in firing]).update(
            notified_at=Coalesce(F("notified_at"), now), last_notified_at=now
        )
        Alert.objects.filter(pk__in=[a.pk for a in resolved]).update(resolved_notified_at=now)
        AlertGroup.objects.filter(pk=group_id).update(last_notified_at=now)
        _deliver_notify_actions(firing, notes, now)
        for n in notes:
            if n.status == NotificationStatus.PENDING:
                notification_dispatch(n.pk)
    return notes


def notification_dispatch(pk: int, countdown: float | None = None) -> None:
    transaction.on_commit(
        lambda: app.send_task(SEND_TASK, args=[pk], countdown=countdown),
        robust=True,  # notifications_sweep sends it again if the broker was away
    )


# --- delivery --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    status: str
    retry_in_s: float | None = None
    note: str = ""


def _claim(pk: int, worker: str, now: datetime) -> bool:
    lease = now + timedelta(seconds=settings.VIGIL_ALERTS_LEASE_S)
    return bool(
        Notification.objects.filter(pk=pk, sent_at__isnull=True)
        .filter(
            Q(status=NotificationStatus.PENDING)
            | Q(status=NotificationStatus.RETRY, lease_until__lte=now)
            | Q(status=NotificationStatus.SENDING, lease_until__lt=now)
        )
        .update(
            status=NotificationStatus.SENDING,
            claimed_by=worker[:128],
            lease_until=lease,
            attempts=F("attempts") + 1,
        )
    )


def notification_send(pk: int, worker: str) -> Outcome:
    """Claim one notification and deliver it (from the send task; runs in autocommit, so the
    claim is committed before the send and `sent_at` right after it)."""
    now = timezone.now()
    if not _claim(pk, worker, now):
        n = Notification.objects.filter(pk=pk).first()
        if n is None:
            return Outcome("missing")
        if n.status == NotificationStatus.SENDING and n.lease_until:
            left = (n.lease_until - timezone.now()).total_seconds()
            return Outcome("held", retry_in_s=max(1.0, left + 1))
        if n.status == NotificationStatus.RETRY and n.lease_until:
            left = (n.lease_until - timezone.now()).total_seconds()
            return Outcome("retry", retry_in_s=max(0.5, left))
        return Outcome(n.status)
    n = Notification.objects.select_related("channel").get(pk=pk)
    if n.channel.disabled:
        Notification.objects.filter(pk=pk).update(
            status=NotificationStatus.SKIPPED,
            error=f"channel disabled: {n.channel.last_error}"[:1024],
            lease_until=None,
        )
        return Outcome(NotificationStatus.SKIPPED)
    pause = settings.VIGIL_ALERTS_TEST_PAUSE_BEFORE_SEND_S
    if pause and n.attempts == 1:
        time.sleep(pause)  # tests only: the window in which a test kills the worker
    try:
        transport_for(n).send()
    except TransientError as exc:
        if n.attempts >= settings.VIGIL_ALERTS_MAX_ATTEMPTS:
            return _failed(n, f"gave up after {n.attempts} attempts: {exc}", disable=False)
        wait = rules.backoff_s(n.attempts)
        Notification.objects.filter(pk=pk, status=NotificationStatus.SENDING).update(
            status=NotificationStatus.RETRY,
            error=str(exc)[:1024],
            lease_until=timezone.now() + timedelta(seconds=wait),
        )
        log.warning("notification %s: %s (retry in %.0f s)", pk, exc, wait)
        return Outcome(NotificationStatus.RETRY, retry_in_s=wait, note=str(exc))
    except PermanentError as exc:
        return _failed(n, str(exc), disable=exc.disables)
    # The one window: the server has it, and this UPDATE records that.
    Notification.objects.filter(pk=pk).update(
        status=NotificationStatus.SENT, sent_at=timezone.now(), error="", lease_until=None
    )
    return Outcome(NotificationStatus.SENT)


def _failed(n: Notification, error: str, *, disable: bool) -> Outcome:
    now = timezone.now()
    with transaction.atomic():
        Notification.objects.filter(pk=n.pk).update(
            status=NotificationStatus.FAILED, error=error[:1024], lease_until=None
        )
        if disable:
            Channel.objects.filter(pk=n.channel_id).update(
                disabled=True, last_error=error[:512], last_error_at=now
            )
    log.warning("notification %s to channel %s failed: %s", n.pk, n.channel_id, error)
    return Outcome(NotificationStatus.FAILED, note=error)


def notifications_sweep(now: datetime | None = None) -> int:
    """Hand to a worker again the notifications no worker has: pending ones whose message was
    lost, retries that are due, claimed ones whose worker's lease ran out (it died)."""
    now = now or timezone.now()
    stale = Notification.objects.filter(sent_at__isnull=True).filter(
        Q(status=NotificationStatus.PENDING, created_at__lt=now - timedelta(seconds=10))
        | Q(status=NotificationStatus.RETRY, lease_until__lte=now)
        | Q(status=NotificationStatus.SENDING, lease_until__lt=now)
    )
    pks = list(stale.values_list("pk", flat=True)[:1000])
    for pk in pks:
        app.send_task(SEND_TASK, args=[pk])
    return len(pks)


def alertmanager_refresh(now: datetime | None = None) -> int:
    """Post the firing alerts again to each Alertmanager channel, so that they stay there
    (see ALERTMANAGER_REFRESH_S). One Notification row per post, as for every attempt."""
    now = now or timezone.now()
    posted = 0
    channels = Channel.objects.filter(kind=ChannelKind.ALERTMANAGER, disabled=False)
    for channel in channels:
        recent = Notification.objects.filter(
            channel=channel, created_at__gte=now - timedelta(seconds=ALERTMANAGER_REFRESH_S)
        )
        if recent.exists():
            continue
        subs = list(channel.subscriptions.filter(active=True).select_related("user"))
        if not subs:
            continue
        firing = [
            a
            for a in Alert.objects.filter(state=AlertState.FIRING, notified_at__isnull=False)
            .select_related("rule", "job")
            .order_by("pk")
            if any(sel.Recipient(channel, s, s.user, s.team_id).may_see_job(a) for s in subs)
        ]
        if not firing:
            continue
        with transaction.atomic():
            n = Notification.objects.create(
                channel=channel,
                subscription=subs[0],
                kind=NotificationKind.FIRING,
                to=channel.config.get("url", ""),
                subject="refresh",
                payload={"alerts": [_am_alert(a, now) for a in firing]},
            )
            n.alerts.set(firing)
            notification_dispatch(n.pk)
        posted += 1
    return posted


# --- subscriptions, silences, channels -------------------------------------------------------


def _severities_check(severities: list[str]) -> list[str]:
    bad = [s for s in severities if s not in Severity.values]
    if bad:
        raise AlertsError(f"severities: {', '.join(bad)} not one of {', '.join(Severity.values)}")
    return list(dict.fromkeys(severities))


def subscription_create(
    user: AbstractBaseUser,
    *,
    clusters: list[Cluster] | None = None,
    severities: list[str] | None = None,
    channel: Channel | None = None,
    team_id: int | None = None,
) -> Subscription:
    """A user subscribes (themselves, or a team they are in) to clusters and severities;
    by default to their own email address."""
    from webapp.teams.selectors import team_has_member, user_is_operator

    if channel is None:
        if not user.email:
            raise AlertsError("email: your account has no email address to send alerts to")
        sub = implicit_subscription(user, SubscriptionScope.OWN_JOBS)
        channel = sub.channel
    if team_id is not None and not (team_has_member(team_id, user) or user_is_operator(user)):
        raise AlertsError(f"team: you are not a member of team {team_id}")
    sub = Subscription.objects.create(
        user=None if team_id is not None else user,
        team_id=team_id,
        channel=channel,
        scope=SubscriptionScope.CLUSTERS,
        severities=_severities_check(severities or []),
    )
    sub.clusters.set(clusters or [])
    return sub


def subscription_update(
    user: AbstractBaseUser,
    pk: int,
    *,
    clusters: list[Cluster] | None = None,
    severities: list[str] | None = None,
    active: bool | None = None,
) -> Subscription:
    """A user changes one of their own subscriptions (never someone else's)."""
    sub = Subscription.objects.filter(pk=pk, user=user).first()
    if sub is None:
        raise AlertsError(f"subscription {pk}: not one of yours")
    if severities is not None:
        sub.severities = _severities_check(severities)
    if active is not None:
        sub.active = active
    sub.save()
    if clusters is not None and sub.scope == SubscriptionScope.CLUSTERS:
        sub.clusters.set(clusters)
    return sub


def subscription_delete(user: AbstractBaseUser, pk: int) -> None:
    sub = Subscription.objects.filter(pk=pk, user=user).first()
    if sub is None:
        raise AlertsError(f"subscription {pk}: not one of yours")
    if sub.scope != SubscriptionScope.CLUSTERS:
        # The implicit ones would come back at the next alert: they are turned off instead.
        sub.active = False
        sub.save(update_fields=["active", "updated_at"])
        return
    sub.delete()


def silence_create(
    *,
    user: str,
    comment: str,
    ends_at: datetime,
    starts_at: datetime | None = None,
    cluster: Cluster | None = None,
    node: Node | None = None,
    cause: str = "",
    team_id: int | None = None,
) -> Silence:
    starts_at = starts_at or timezone.now()
    if not comment.strip():
        raise AlertsError("comment: say why (a maintenance window, a ticket)")
    if ends_at <= starts_at:
        raise AlertsError("ends_at: the silence must end after it starts")
    if cause and cause not in taxonomy.CAUSES and cause not in RuleKind.values:
        raise AlertsError(f"cause: {cause!r} is not a failure cause or a rule kind")
    if not (cluster or node or cause or team_id):
        raise AlertsError("a silence names at least one of cluster, node, cause or team")
    return Silence.objects.create(
        cluster=cluster or (node.cluster if node else None),
        node=node,
        cause=cause,
        team_id=team_id,
        starts_at=starts_at,
        ends_at=ends_at,
        created_by=user[:150],
        comment=comment.strip()[:512],
    )


def silence_expire(pk: int, user: str) -> Silence:
    """End a silence now (its alerts are sent at the next round if they still fire)."""
    now = timezone.now()
    silence = Silence.objects.filter(pk=pk).first()
    if silence is None:
        raise AlertsError(f"no silence {pk}")
    if silence.ends_at > now:
        silence.ends_at = max(now, silence.starts_at + timedelta(microseconds=1))
        silence.comment = f"{silence.comment} (expired by {user})"[:512]
        silence.save(update_fields=["ends_at", "comment"])
    return silence


def channel_enable(pk: int) -> Channel:
    """Turn a disabled channel back on (the address or URL was fixed)."""
    Channel.objects.filter(pk=pk).update(disabled=False)
    return Channel.objects.get(pk=pk)
