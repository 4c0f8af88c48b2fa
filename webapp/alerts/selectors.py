"""Reads of the alerts app: silences and inhibition in force, who receives an alert, what the
pages list.

Routing (`alert_recipients`) is where "an email never names another team's jobs" holds: an
alert about a job reaches only the job's owner, subscribers of the job's own team and, for
hardware causes, operators. Alerts about no job (a node, the ingest) reach every subscriber
of the cluster and severity.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet

from webapp.alerts import rules
from webapp.alerts.choices import (
    ACTIVE_STATES,
    HARDWARE_CAUSES,
    AlertState,
    ChannelKind,
    RuleKind,
    SubscriptionScope,
)
from webapp.alerts.models import Alert, Channel, Notification, Silence, Subscription
from webapp.teams.selectors import (
    OPERATORS_GROUP,
    job_logs_visible,
    job_team_id,
    team_has_member,
    user_is_operator,
)


def silences_in_force(now: datetime) -> list[rules.SilenceFacts]:
    return [
        rules.SilenceFacts(s.cluster_id, s.node_id, s.cause, s.team_id, s.starts_at, s.ends_at)
        for s in Silence.objects.filter(starts_at__lte=now, ends_at__gt=now)
    ]


def nodes_down() -> frozenset[int]:
    """Nodes whose node-down alert fires (they inhibit their GPUs' and jobs' alerts)."""
    ids = Alert.objects.filter(
        rule__kind=RuleKind.NODE_DOWN, state=AlertState.FIRING, node__isnull=False
    ).values_list("node_id", flat=True)
    return frozenset(ids)


def alert_facts(alert: Alert) -> rules.AlertFacts:
    return rules.AlertFacts(
        alert.cluster_id, alert.node_id, alert.cause, alert.team_id, alert.rule.kind
    )


def alert_is_hardware(alert: Alert) -> bool:
    """Operators' alerts: everything but a job failure with a cause in the job itself."""
    return alert.rule.kind != RuleKind.JOB_FAILED or alert.cause in HARDWARE_CAUSES


@dataclass
class Recipient:
    channel: Channel
    subscription: Subscription
    user: AbstractBaseUser | None
    team_id: int | None

    def may_see_job(self, alert: Alert) -> bool:
        """May this recipient be told about the alert's job at all?"""
        job = alert.job
        if job is None:
            return True
        if self.team_id is not None:
            return job_team_id(job) == self.team_id
        user = self.user
        if user is None or not user.is_active:
            return False
        if job.user and job.user == user.get_username():
            return True
        team_id = job_team_id(job)
        if team_id is not None and team_has_member(team_id, user):
            return True
        return user_is_operator(user) and alert_is_hardware(alert)

    def muted(self, alert: Alert, silencing: frozenset[int]) -> bool:
        """Is the alert kept from this recipient by a team's silence (`silencing`: the teams
        whose silence matches it, rules.silencing_teams)?"""
        if not silencing:
            return False
        if self.team_id is not None:
            teams, operator = frozenset({self.team_id}), False
        elif self.user is not None:
            teams, operator = team_ids_of(self.user), user_is_operator(self.user)
        else:
            return False
        return rules.team_silence_mutes(
            silencing,
            teams,
            operator_alert=alert_is_hardware(alert),
            recipient_is_operator=operator,
        )

    def shows_logs(self, alert: Alert) -> bool:
        """May the email carry the failure's log lines (the evidence)?"""
        if self.team_id is not None:
            return alert.job is None or job_team_id(alert.job) == self.team_id
        return self.user is not None and job_logs_visible(self.user, alert.job)


def operators() -> QuerySet:
    User = get_user_model()
    return (
        User.objects.filter(is_active=True)
        .exclude(email="")
        .filter(Q(is_staff=True) | Q(is_superuser=True) | Q(groups__name=OPERATORS_GROUP))
        .distinct()
        .order_by("pk")
    )


def cluster_subscriptions(alert: Alert) -> QuerySet:
    qs = Subscription.objects.filter(
        active=True, scope=SubscriptionScope.CLUSTERS, channel__disabled=False
    ).select_related("channel", "channel__user", "user")
    if alert.cluster_id is not None:
        qs = qs.annotate(n_clusters=Count("clusters")).filter(
            Q(n_clusters=0) | Q(clusters=alert.cluster_id)
        )
    qs = qs.filter(Q(severities=[]) | Q(severities__contains=[alert.severity]))
    return qs.distinct().order_by("pk")


def alert_recipients(alert: Alert, implicit: dict) -> list[Recipient]:
    """Who gets this alert, one entry per channel. `implicit` maps (user id, scope) to the
    user's implicit subscription (services.implicit_subscription makes them)."""
    found: dict[int, Recipient] = {}

    def add(r: Recipient) -> None:
        if r.channel.disabled or r.channel.pk in found or not r.may_see_job(alert):
            return
        # A deactivated account keeps its rows but hears nothing, whatever the route.
        for user in (r.user, r.channel.user):
            if user is not None and not user.is_active:
                return
        found[r.channel.pk] = r

    job = alert.job
    if job is not None and job.user:
        sub = implicit.get((job.user, SubscriptionScope.OWN_JOBS))
        if sub is not None and sub.active:
            add(Recipient(sub.channel, sub, sub.user, None))
    if alert_is_hardware(alert):
        for key, sub in implicit.items():
            if key[1] == SubscriptionScope.HARDWARE and sub.active:
                add(Recipient(sub.channel, sub, sub.user, None))
    for sub in cluster_subscriptions(alert):
        add(Recipient(sub.channel, sub, sub.user, sub.team_id))
    return list(found.values())


def channels_email_of(user: AbstractBaseUser) -> Channel | None:
    return Channel.objects.filter(
        kind=ChannelKind.EMAIL, user=user, config__address=user.email
    ).first()


def alerts_firing_counts() -> list[tuple[str, str, int]]:
    """(rule, severity, n) of the alerts firing now, silenced ones left out (for /metrics)."""
    from django.utils import timezone

    now = timezone.now()
    silences = silences_in_force(now)
    counts: dict[tuple[str, str], int] = {}
    firing = Alert.objects.filter(state=AlertState.FIRING).select_related("rule")
    for alert in firing.iterator(chunk_size=2000):
        if rules.silenced(alert_facts(alert), silences, now):
            continue
        key = (alert.rule.name, alert.severity)
        counts[key] = counts.get(key, 0) + 1
    return [(rule, severity, n) for (rule, severity), n in sorted(counts.items())]


def alerts_active() -> QuerySet:
    return Alert.objects.filter(state__in=ACTIVE_STATES).select_related(
        "rule", "cluster", "node", "job"
    )


def notifications_for_channel(channel_id: int, limit: int = 100) -> list[Notification]:
    return list(Notification.objects.filter(channel_id=channel_id).order_by("-id")[:limit])


def subscriptions_of(user: AbstractBaseUser) -> QuerySet:
    """A user's own subscriptions (the subscriptions page lists and edits these)."""
    return (
        Subscription.objects.filter(user=user)
        .select_related("channel")
        .prefetch_related("clusters")
        .order_by("scope", "pk")
    )


# --- the pages -------------------------------------------------------------------------------


def team_ids_of(user: AbstractBaseUser) -> frozenset[int]:
    """The teams a user is in, directly or through a group (one query, for a whole page)."""
    from webapp.teams.models import Team

    ids = Team.objects.filter(Q(users=user) | Q(groups__user=user)).values_list("pk", flat=True)
    return frozenset(ids)


def alerts_filter(
    *,
    cluster: str = "",
    state: str = "",
    severity: str = "",
    rule: str = "",
    node: str = "",
) -> QuerySet:
    """Alerts firing, pending and resolved, newest first; each filter given narrows."""
    qs = Alert.objects.select_related("rule", "cluster", "node", "job", "team", "failure")
    if cluster:
        qs = qs.filter(cluster__name=cluster)
    if state:
        qs = qs.filter(state=state)
    if severity:
        qs = qs.filter(severity=severity)
    if rule:
        qs = qs.filter(rule__name=rule)
    if node:
        qs = qs.filter(node__hostname=node)
    return qs.order_by("-starts_at", "-id")


def silences_visible() -> QuerySet:
    """Silences in force first, then the ended ones (every logged-in user may read them: they
    say why alerts are quiet)."""
    return Silence.objects.select_related("cluster", "node", "team").order_by("-ends_at", "-id")


def channels_visible(user: AbstractBaseUser) -> QuerySet:
    """Every channel for an operator; otherwise the user's own and their teams' channels."""
    qs = Channel.objects.annotate(n_subscriptions=Count("subscriptions")).select_related(
        "user", "team"
    )
    if not user_is_operator(user):
        qs = qs.filter(Q(user=user) | Q(team__in=team_ids_of(user)))
    return qs.order_by("kind", "name", "pk")


def notifications_visible(user: AbstractBaseUser, *, channel_id: int | None = None) -> QuerySet:
    """The delivery log: every attempt for an operator, else attempts to the user's own or
    their teams' channels (a message to someone else may name their jobs)."""
    qs = Notification.objects.select_related("channel")
    if not user_is_operator(user):
        qs = qs.filter(Q(channel__user=user) | Q(channel__team__in=team_ids_of(user)))
    if channel_id is not None:
        qs = qs.filter(channel_id=channel_id)
    return qs.order_by("-created_at", "-id")
