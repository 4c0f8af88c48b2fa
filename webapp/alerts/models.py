"""Alerting as data, after healthchecks and Alertmanager.

- `AlertRule`: what fires and how loud, tuned by an operator in the admin (defaults from
  migration 0002).
- `Alert`: one per fingerprint (rule + labels) while it fires; it then stays as the record of
  when it fired and resolved. `AlertGroup` (cluster + cause) is where Alertmanager's
  group_wait / group_interval / repeat_interval are kept: its `flush_at` is the work queue.
- `Silence`: maintenance windows (cluster, node, cause or team, until a time, who and why).
- `Channel` (kind, config, disabled, last_error) is a destination; `Subscription` says whose
  alerts reach it; `Notification` is one attempt to deliver, written *before* sending, with the
  rendered message, so the delivery log shows what was sent and a worker that died can be
  checked against `sent_at`.
- `OutboxMessage`: the demo's email outbox (webapp/alerts/outbox.py, EMAIL_URL unset).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models

from webapp.alerts.choices import (
    AlertState,
    ChannelKind,
    NotificationKind,
    NotificationStatus,
    RuleKind,
    Severity,
    SubscriptionScope,
)
from webapp.alerts.destinations import DestinationError, config_check, url_redacted
from webapp.failures.models import FailureEvent
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.models import Job
from webapp.recovery.models import RecoveryAction
from webapp.teams.models import Team


class AlertRule(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=24, choices=RuleKind.choices)
    enabled = models.BooleanField(default=True)
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    # The rule's limit, in the unit its kind names (help_text): degrees C, seconds, batches.
    threshold = models.FloatField(
        null=True,
        blank=True,
        help_text="gpu_thermal: degrees C; ingest_lag: seconds; ingest_refused: batches per "
        "window; gpus_idle: utilization percent at or below which a GPU is idle",
    )
    for_s = models.PositiveIntegerField(
        default=0, help_text="How long the condition must hold before the alert fires (s)"
    )
    # Kind-specific settings: job_failed's severity by job type and size, gpu_hardware's
    # Xids; the migration's defaults show each.
    params = models.JSONField(default=dict, blank=True)
    # Alertmanager's route timers (its defaults are 30 s / 5 min / 4 h; Vigil's group_wait is
    # short because a failure email must arrive within seconds).
    group_wait_s = models.PositiveIntegerField(default=1)
    group_interval_s = models.PositiveIntegerField(default=60)
    repeat_interval_s = models.PositiveIntegerField(default=4 * 3600)
    # Event alerts (choices.EVENT_RULES) resolve this long after their last event.
    resolve_after_s = models.PositiveIntegerField(default=3600)
    send_resolved = models.BooleanField(default=True)
    description = models.CharField(max_length=512, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AlertGroup(models.Model):
    """Alerts of one cluster and cause (or rule, where there is no cause) are sent together."""

    key = models.CharField(max_length=200, unique=True)
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_groups"
    )
    cause = models.CharField(max_length=64, blank=True, default="")
    # When the group's next notification is due (null: nothing waits). Workers claim a due
    # group with a conditional UPDATE that clears it.
    flush_at = models.DateTimeField(null=True, blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["flush_at"], name="alertgroup_flush_at")]

    def __str__(self) -> str:
        return self.key


class Alert(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    group = models.ForeignKey(AlertGroup, on_delete=models.CASCADE, related_name="alerts")
    # sha256 of the rule name and the sorted labels (rules.fingerprint).
    fingerprint = models.CharField(max_length=64)
    labels = models.JSONField(default=dict)
    summary = models.CharField(max_length=512)
    severity = models.CharField(max_length=16, choices=Severity.choices)
    state = models.CharField(max_length=16, choices=AlertState.choices, default=AlertState.FIRING)
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="alerts"
    )
    node = models.ForeignKey(
        Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    gpu = models.ForeignKey(Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    job = models.ForeignKey(
        Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    failure = models.ForeignKey(
        FailureEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    recovery_action = models.ForeignKey(
        RecoveryAction, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    cause = models.CharField(max_length=64, blank=True, default="")
    # The job's team when the alert fired (for routing and silences by team).
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    starts_at = models.DateTimeField()
    # Last time an evaluation (or a new event) found the condition true.
    last_seen_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    # Lifecycle of its emails: first and latest firing notification, resolved notification.
    notified_at = models.DateTimeField(null=True, blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    resolved_notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-starts_at", "-id"]
        constraints = [
            # One pending or firing alert per fingerprint; resolved ones stay as history.
            models.UniqueConstraint(
                fields=["fingerprint"],
                condition=models.Q(state__in=["pending", "firing"]),
                name="alert_one_active_per_fingerprint",
            )
        ]
        indexes = [
            models.Index(fields=["state", "rule"], name="alert_state_rule"),
            models.Index(fields=["group", "state"], name="alert_group_state"),
            models.Index(fields=["cluster", "starts_at"], name="alert_cluster_at"),
        ]

    def __str__(self) -> str:
        return f"{self.rule.name} {self.summary} ({self.state})"


class Silence(models.Model):
    """Alerts matching every field given (blank fields match anything) are not sent."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="silences"
    )
    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, null=True, blank=True, related_name="silences"
    )
    cause = models.CharField(max_length=64, blank=True, default="")
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="silences"
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.CharField(max_length=150)
    comment = models.CharField(max_length=512)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ends_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="silence_ends_after"
            )
        ]

    def __str__(self) -> str:
        return f"silence {self.pk} until {self.ends_at:%Y-%m-%d %H:%M} by {self.created_by}"


class Channel(models.Model):
    """A destination: an email address, a webhook URL or an Alertmanager."""

    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    name = models.CharField(max_length=128, blank=True, default="")
    # email: {"address"}; webhook: {"url", "secret_env"} (the HMAC secret is read from that
    # environment variable, VIGIL_CHANNEL_SECRET_<NAME>, or from settings.VIGIL_WEBHOOK_SECRET);
    # alertmanager: {"url"}. URLs: https, or http to localhost (destinations.py).
    config = models.JSONField(default=dict, blank=True)
    # A user's own address (made on demand from User.email) or a team's channel.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="alert_channels",
    )
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_channels"
    )
    disabled = models.BooleanField(default=False)
    last_error = models.CharField(max_length=512, blank=True, default="")
    last_error_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "name", "id"]

    def __str__(self) -> str:
        return self.name or f"{self.kind} {self.target}"

    @property
    def target(self) -> str:
        """Where it delivers, for pages and logs: an address, or a URL without its path
        (a webhook's path is often its secret)."""
        if self.config.get("address"):
            return str(self.config["address"])
        url = self.config.get("url")
        return url_redacted(str(url)) if url else ""

    def clean(self) -> None:
        try:
            config_check(self.kind, self.config)
        except DestinationError as exc:
            raise ValidationError({"config": str(exc)}) from None


class Subscription(models.Model):
    """Whose alerts reach a channel: a user's or a team's (exactly one of the two)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="alert_subscriptions",
    )
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_subscriptions"
    )
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="subscriptions")
    scope = models.CharField(
        max_length=16, choices=SubscriptionScope.choices, default=SubscriptionScope.CLUSTERS
    )
    # Empty: every cluster / every severity.
    clusters = models.ManyToManyField(Cluster, blank=True, related_name="alert_subscriptions")
    severities = ArrayField(
        models.CharField(max_length=16, choices=Severity.choices), default=list, blank=True
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, team__isnull=True)
                | models.Q(user__isnull=True, team__isnull=False),
                name="subscription_user_or_team",
            ),
            # The implicit routes (own jobs, hardware) exist once per user and channel.
            models.UniqueConstraint(
                fields=["user", "channel", "scope"],
                condition=~models.Q(scope="clusters"),
                name="subscription_unique_implicit",
            ),
        ]

    def __str__(self) -> str:
        who = self.user or self.team
        return f"{who} -> {self.channel} ({self.scope})"


class Notification(models.Model):
    """One attempt to deliver one message to one channel, written before it is sent."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    subscription = models.ForeignKey(
        Subscription,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="notifications",
    )
    group = models.ForeignKey(
        AlertGroup, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    alerts = models.ManyToManyField(Alert, blank=True, related_name="notifications")
    kind = models.CharField(max_length=16, choices=NotificationKind.choices)
    status = models.CharField(
        max_length=16, choices=NotificationStatus.choices, default=NotificationStatus.PENDING
    )
    # The message as rendered when the row was written: a retry sends the same bytes.
    to = models.CharField(max_length=512, blank=True, default="")
    subject = models.CharField(max_length=512, blank=True, default="")
    body_text = models.TextField(blank=True, default="")
    body_html = models.TextField(blank=True, default="")
    payload = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=1024, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "lease_until"], name="notification_status"),
            models.Index(fields=["channel", "created_at"], name="notification_channel_at"),
        ]

    def __str__(self) -> str:
        return f"notification {self.pk} {self.kind} to {self.to or self.channel_id} ({self.status})"

    @property
    def message_id(self) -> str:
        """The email's Message-ID, derived from the row: a resend after a crash carries the
        same one, so a mail client or a reader can see it is the same message."""
        return f"<vigil-notification-{self.pk}@{settings.VIGIL_EMAIL_DOMAIN}>"


class OutboxMessage(models.Model):
    """An email the demo's outbox backend kept instead of sending (alerts/outbox.py)."""

    to = models.CharField(max_length=1024)
    from_email = models.CharField(max_length=256)
    subject = models.CharField(max_length=998)
    body_text = models.TextField(blank=True, default="")
    body_html = models.TextField(blank=True, default="")
    message_id = models.CharField(max_length=256, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.subject} to {self.to}"
