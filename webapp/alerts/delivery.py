"""Delivery: a group flushed into one Notification per recipient (routing, rate limits, the
message rendered), each sent through its channel's transport.

The path of a failure (nothing waits on a poll):
`failure_diagnosed` (inside the diagnosis transaction) -> on commit, task `vigil.alerts.failure`
-> `failure_alerts` raises the alert and plans its group's flush (group_wait, 1 s by default)
-> task `vigil.alerts.flush` -> `group_flush` writes one Notification per recipient, each with
its message rendered, and on commit sends task `vigil.alerts.send` for each
-> `notification_send` claims the row with a lease (core/workrows.py), sends, records
`sent_at`.

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
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.alerts import emails, rules
from webapp.alerts import selectors as sel
from webapp.alerts.choices import (
    AlertState,
    ChannelKind,
    NotificationKind,
    NotificationStatus,
    RuleKind,
    SubscriptionScope,
)
from webapp.alerts.dispatch import SEND_TASK
from webapp.alerts.models import (
    Alert,
    AlertGroup,
    Channel,
    Notification,
)
from webapp.alerts.services import channel_disable, implicit_subscription
from webapp.alerts.transports import (
    Message,
    PermanentError,
    TransientError,
    UnknownChannelKind,
    am_alert,
    transport_class,
    transport_for,
)
from webapp.celery import app
from webapp.core import workrows
from webapp.core.workrows import Outcome
from webapp.recovery.choices import ActionKind, Audience
from webapp.recovery.models import RecoveryAction

log = logging.getLogger("vigil.alerts")

# Alertmanager forgets a posted alert after its resolve_timeout (5 minutes by default) unless
# it is posted again: firing alerts are re-posted this often (as Prometheus does).
ALERTMANAGER_REFRESH_S = 60


# --- routing and notifications ---------------------------------------------------------------


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
    try:
        transport = transport_class(channel.kind)
    except UnknownChannelKind as exc:
        # Written, failed and the channel disabled, so that its page says why nothing arrives.
        n.to, n.subject = channel.target, title
        n.status, n.error = NotificationStatus.FAILED, str(exc)
        channel_disable(channel.pk, str(exc))
        log.warning("notification to channel %s failed: %s", channel.pk, exc)
    else:
        message = Message(kind, alerts, items, title, recipient.subscription)
        transport.prepare(n, message)
        limit = settings.VIGIL_ALERTS_RATE_LIMIT_PER_HOUR
        if transport.rate_limited and rules.rate_limited(_sent_last_hour(channel, now), limit):
            n.status = NotificationStatus.SKIPPED
            n.error = f"rate limit: {limit} notifications to this address in the last hour"
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
        ).select_related("rule", "cluster", "node", "gpu", "job", "failure__blamed_gpu")
        firing, resolved = [], []
        silencing: dict[int, frozenset[int]] = {}
        for alert in candidates.order_by("starts_at", "pk"):
            facts = sel.alert_facts(alert)
            if rules.silenced(facts, silences, now):
                continue
            silencing[alert.pk] = rules.silencing_teams(facts, silences, now)
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
        held: set[int] = set()  # muted for some recipient by a team's silence
        told: set[int] = set()
        for alert in firing + resolved:
            for r in sel.alert_recipients(alert, implicit):
                if r.muted(alert, silencing[alert.pk]):
                    held.add(alert.pk)
                    continue
                told.add(alert.pk)
                entry = per_channel.setdefault(r.channel.pk, (r, [], []))
                (entry[1] if alert.state == AlertState.FIRING else entry[2]).append(alert)
        # An alert every recipient of which is muted waits, as a silenced one does: it is
        # sent once the team's silence ends (the beat's _groups_due plans it again).
        firing = [a for a in firing if a.pk in told or a.pk not in held]
        resolved = [a for a in resolved if a.pk in told or a.pk not in held]
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


# A pending notification is claimed; a retry once its backoff is over (its lease is the
# wait); a sending one whose worker's lease ran out (it died) is claimed again.
LEASE = workrows.LeaseSpec(
    Notification,
    claimable=(NotificationStatus.PENDING,),
    running=NotificationStatus.SENDING,
    retry=NotificationStatus.RETRY,
)


def notification_send(pk: int, worker: str) -> Outcome:
    """Claim one notification and deliver it (from the send task; runs in autocommit, so the
    claim is committed before the send and `sent_at` right after it)."""
    unsent = Q(sent_at__isnull=True)
    if not workrows.claim(LEASE, pk, worker, settings.VIGIL_ALERTS_LEASE_S, only=unsent):
        return workrows.not_claimed(LEASE, Notification.objects.filter(pk=pk).first())
    n = Notification.objects.select_related("channel").get(pk=pk)
    if n.channel.disabled:
        why = f"channel disabled: {n.channel.last_error}"[:1024]
        workrows.finish(LEASE, pk, NotificationStatus.SKIPPED, error=why)
        return Outcome(NotificationStatus.SKIPPED)
    pause = settings.VIGIL_ALERTS_TEST_PAUSE_BEFORE_SEND_S
    if pause and n.attempts == 1:
        time.sleep(pause)  # tests only: the window in which a test kills the worker
    try:
        transport_for(n).send()
    except TransientError as exc:
        if n.attempts >= settings.VIGIL_ALERTS_MAX_ATTEMPTS:
            return _failed(n, f"gave up after {n.attempts} attempts: {exc}", disable=False)
        wait = workrows.backoff_s(n.attempts)
        workrows.retry_later(LEASE, pk, wait, error=str(exc)[:1024])
        log.warning("notification %s: %s (retry in %.0f s)", pk, exc, wait)
        return Outcome(NotificationStatus.RETRY, retry_in_s=wait, note=str(exc))
    except PermanentError as exc:
        return _failed(n, str(exc), disable=exc.disables)
    # The one window: the server has it, and this UPDATE records that.
    workrows.finish(LEASE, pk, NotificationStatus.SENT, sent_at=timezone.now(), error="")
    return Outcome(NotificationStatus.SENT)


def _failed(n: Notification, error: str, *, disable: bool) -> Outcome:
    with transaction.atomic():
        workrows.finish(LEASE, n.pk, NotificationStatus.FAILED, error=error[:1024])
        if disable:
            channel_disable(n.channel_id, error)
    log.warning("notification %s to channel %s failed: %s", n.pk, n.channel_id, error)
    return Outcome(NotificationStatus.FAILED, note=error)


def notifications_sweep(now: datetime | None = None) -> int:
    """Hand to a worker again the notifications no worker has: pending ones whose message was
    lost, retries that are due, claimed ones whose worker's lease ran out (it died)."""
    now = now or timezone.now()
    stale = Notification.objects.filter(sent_at__isnull=True).filter(
        Q(status=NotificationStatus.PENDING, created_at__lt=now - timedelta(seconds=10))
        | LEASE.lost_q(now)
    )
    pks = list(stale.values_list("pk", flat=True)[:1000])
    for pk in pks:
        app.send_task(SEND_TASK, args=[pk])
    return len(pks)


def _routed_to(channel: Channel, alerts: list[Alert], now: datetime) -> list[Alert]:
    """The firing alerts a flush would send to this channel now: not silenced or inhibited,
    and routed to it by an active subscription (its clusters, severities, job rules, team
    silences and an active subscriber), as group_flush decides."""
    silences = sel.silences_in_force(now)
    down = sel.nodes_down()
    out = []
    for alert in alerts:
        facts = sel.alert_facts(alert)
        if rules.silenced(facts, silences, now) or rules.inhibited(facts, down):
            continue
        silencing = rules.silencing_teams(facts, silences, now)
        if any(
            r.channel.pk == channel.pk and not r.muted(alert, silencing)
            for r in sel.alert_recipients(alert, {})
        ):
            out.append(alert)
    return out


def alertmanager_refresh(now: datetime | None = None) -> int:
    """Post the firing alerts again to each Alertmanager channel, so that they stay there
    (see ALERTMANAGER_REFRESH_S): only those its subscriptions route to it now, so that a
    silence, a filter or a deactivated subscriber takes effect there too (Alertmanager drops
    what is no longer posted). One Notification row per post, as for every attempt."""
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
        notified = (
            Alert.objects.filter(state=AlertState.FIRING, notified_at__isnull=False)
            .select_related("rule", "job", "cluster")
            .order_by("pk")
        )
        firing = _routed_to(channel, list(notified), now)
        if not firing:
            continue
        with transaction.atomic():
            n = Notification.objects.create(
                channel=channel,
                subscription=subs[0],
                kind=NotificationKind.FIRING,
                to=channel.target,
                subject="refresh",
                payload={"alerts": [am_alert(a) for a in firing]},
            )
            n.alerts.set(firing)
            notification_dispatch(n.pk)
        posted += 1
    return posted
