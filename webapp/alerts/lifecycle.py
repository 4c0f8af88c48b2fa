"""Alerts raised, repeated and resolved as Alertmanager does it: a fingerprint per rule and labels,
alerts of one cluster and cause gathered in a group whose flush is scheduled (group_wait,
group_interval, repeat_interval)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction

from webapp.alerts import rules
from webapp.alerts.choices import (
    ACTIVE_STATES,
    AlertState,
)
from webapp.alerts.dispatch import FLUSH_TASK
from webapp.alerts.models import (
    Alert,
    AlertGroup,
    AlertRule,
)
from webapp.celery import app
from webapp.fleet.models import Cluster
from webapp.jobs.models import Job
from webapp.teams.selectors import job_team_id

log = logging.getLogger("vigil.alerts")

# --- raising and resolving -------------------------------------------------------------------


def rule_of(kind: str) -> AlertRule | None:
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
    # How long the condition must hold before it fires (None: the rule's for_s).
    for_s: float | None = None


def alert_raise(rule: AlertRule, found: Raise, now: datetime, *, pending: bool = False) -> Alert:
    """Create or refresh the active alert of this fingerprint. `pending`: a condition that
    fires only once it has held for the rule's for_s."""
    fp = rules.fingerprint(rule.name, found.identity)
    group = _group(found.cluster, found.cause or rule.name)
    labels = {"alertname": rule.name, "severity": found.severity, **found.labels}
    hold_s = rule.for_s if found.for_s is None else found.for_s
    with transaction.atomic():
        alert = (
            Alert.objects.select_for_update()
            .filter(fingerprint=fp, state__in=ACTIVE_STATES)
            .first()
        )
        if alert is None:
            team_id = job_team_id(found.job) if found.job is not None else None
            state = AlertState.PENDING if pending and hold_s > 0 else AlertState.FIRING
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
            not pending or now - alert.starts_at >= timedelta(seconds=hold_s)
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


def alerts_resolve_missing(rule: AlertRule, keep: set[str], now: datetime) -> int:
    gone = Alert.objects.filter(rule=rule, state__in=ACTIVE_STATES).exclude(fingerprint__in=keep)
    n = 0
    for alert in gone.select_related("rule"):
        alert_resolve(alert, now)
        n += 1
    return n
