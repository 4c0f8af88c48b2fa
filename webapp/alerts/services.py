"""Writes of the alerts app that people ask for: subscriptions (and the unsubscribe link),
silences, channels. Alerts are raised in lifecycle.py / evaluate.py and delivered in
delivery.py."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from webapp.alerts import selectors as sel
from webapp.alerts.choices import (
    ChannelKind,
    RuleKind,
    Severity,
    SubscriptionScope,
)
from webapp.alerts.models import (
    Channel,
    Silence,
    Subscription,
)
from webapp.core import mail
from webapp.failures import taxonomy
from webapp.fleet.models import Cluster, Node

log = logging.getLogger("vigil.alerts")

# The unsubscribe page's path (the pages' urls.py, "alerts:unsubscribe"): fixed here so the
# link in an email never depends on a page being deployed.
UNSUBSCRIBE_PATH = "/alerts/unsubscribe/{token}/"
UNSUBSCRIBE_PURPOSE = "alerts"  # core.mail's signing purpose of the links


class AlertsError(ValueError):
    """A request about alerts that cannot be honoured, with the reason."""


def unsubscribe_token(subscription: Subscription) -> str:
    return mail.unsubscribe_token(UNSUBSCRIBE_PURPOSE, subscription.pk)


def unsubscribe_url(subscription: Subscription) -> str:
    return mail.unsubscribe_url(UNSUBSCRIBE_PATH, UNSUBSCRIBE_PURPOSE, subscription.pk)


def subscription_unsubscribe(token: str) -> Subscription:
    """Turn off the one subscription a link names (no login: the signature is the proof)."""
    try:
        pk = mail.unsubscribe_pk(UNSUBSCRIBE_PURPOSE, token)
    except mail.UnsubscribeError as exc:
        raise AlertsError(str(exc)) from None
    sub = Subscription.objects.filter(pk=pk).first()
    if sub is None:
        raise AlertsError("this subscription no longer exists")
    subscription_turn_off(sub)
    return sub


def subscription_turn_off(sub: Subscription) -> None:
    Subscription.objects.filter(pk=sub.pk).update(active=False, updated_at=timezone.now())
    sub.active = False


def channel_disable(channel_id: int, error: str) -> None:
    """A destination that refuses (its address, its URL) is not tried again until an operator
    enables it; the error stays on it for its page."""
    Channel.objects.filter(pk=channel_id).update(
        disabled=True, last_error=error[:512], last_error_at=timezone.now()
    )


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


# Days a finished notification (sent, failed, skipped) and a demo outbox email are kept.
NOTIFICATION_RETENTION_DAYS = 90


def notifications_prune(now: datetime | None = None) -> int:
    """Delete finished notifications and outbox emails older than
    VIGIL_ALERTS_NOTIFICATION_RETENTION_DAYS, a chunk at a time (one still to be sent or
    retried stays); how many rows were deleted."""
    from webapp.alerts.choices import NotificationStatus
    from webapp.alerts.models import Notification, OutboxMessage
    from webapp.failures.services import PRUNE_CHUNK, retention_days

    days = retention_days("VIGIL_ALERTS_NOTIFICATION_RETENTION_DAYS", NOTIFICATION_RETENTION_DAYS)
    before = (now or timezone.now()) - timedelta(days=days)
    unfinished = [NotificationStatus.PENDING, NotificationStatus.SENDING, NotificationStatus.RETRY]
    deleted = 0
    for old in (
        Notification.objects.filter(created_at__lt=before).exclude(status__in=unfinished),
        OutboxMessage.objects.filter(created_at__lt=before),
    ):
        while ids := list(old.values_list("pk", flat=True)[:PRUNE_CHUNK]):
            deleted += (
                old.model.objects.filter(pk__in=ids).delete()[1].get(old.model._meta.label, 0)
            )
    return deleted
