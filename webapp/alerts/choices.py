"""Kinds and states of alert rules, alerts, channels and notifications."""

from django.db import models


class Severity(models.TextChoices):
    # Alertmanager's customary `severity` label values: critical pages someone, warning is
    # read in working hours, info is for the record.
    CRITICAL = "critical", "Critical (pages)"
    WARNING = "warning", "Warning"
    INFO = "info", "Info"


class RuleKind(models.TextChoices):
    GPU_HARDWARE = "gpu_hardware", "Critical Xid, double-bit ECC or GPU lost"
    GPU_THERMAL = "gpu_thermal", "GPU temperature or thermal throttling"
    NODE_DOWN = "node_down", "Node not reporting"
    JOB_FAILED = "job_failed", "Job failed"
    RECOVERY_FAILED = "recovery_failed", "Recovery action failed"
    RECOVERY_APPROVAL = "recovery_approval", "Recovery action awaiting approval"
    GPUS_IDLE = "gpus_idle", "Allocated GPUs idle"
    INGEST_LAG = "ingest_lag", "Ingest lag"
    INGEST_REFUSED = "ingest_refused", "Refused batches"


# Rules whose alerts stand for one event (a failure, an action): they resolve after the rule's
# resolve_after_s without a new event. The others are conditions the beat task re-checks.
EVENT_RULES = frozenset(
    {
        RuleKind.GPU_HARDWARE,
        RuleKind.JOB_FAILED,
        RuleKind.RECOVERY_FAILED,
        RuleKind.RECOVERY_APPROVAL,
    }
)


class AlertState(models.TextChoices):
    # As Prometheus: a condition holds but not yet for the rule's for_s (nothing is sent).
    PENDING = "pending", "Pending"
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"


class ChannelKind(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (JSON POST, HMAC-signed)"
    ALERTMANAGER = "alertmanager", "Alertmanager (/api/v2/alerts)"


class SubscriptionScope(models.TextChoices):
    # Alerts of chosen clusters and severities (a job's alerts only for its owner and team).
    CLUSTERS = "clusters", "Clusters and severities"
    # A user's own jobs' failures: every user has it unless they unsubscribed.
    OWN_JOBS = "own_jobs", "My jobs' failures"
    # Hardware alerts: every operator has it unless they unsubscribed.
    HARDWARE = "hardware", "Hardware alerts (operators)"


class NotificationKind(models.TextChoices):
    # One email template set each (templates/emails/alert-<kind>-*.html).
    FIRING = "firing", "Alert firing"
    GROUPED = "grouped", "Alerts firing (grouped)"
    RESOLVED = "resolved", "Alerts resolved"
    APPROVAL = "approval", "Recovery action awaiting approval"


class NotificationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending (claimed by a worker)"
    SENT = "sent", "Sent"
    RETRY = "retry", "Failed, will retry"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Not sent (rate limit or disabled channel)"


# States of an alert that is not over (one such alert per fingerprint).
ACTIVE_STATES = (AlertState.PENDING, AlertState.FIRING)

# Causes of the hardware: operators get these alerts (docs/failure-taxonomy.md, infrastructure
# causes that point at a node or its GPUs).
HARDWARE_CAUSES = frozenset(
    {"gpu_nvlink", "gpu_ecc", "gpu_off_bus", "gpu_firmware", "node_lost", "ib_link"}
)
