"""The alerts pages' tables, declared once for the page's header and the CSV
(`webapp/core/tables.py`)."""

from __future__ import annotations

from webapp.core.tables import Column, Table, iso


def _owner(channel) -> str | None:
    if channel.user:
        return channel.user.get_username()
    return f"team {channel.team.name}" if channel.team else None


# The alert list (`alerts/list.html`), rows Alert with rule, cluster, node, job and team read;
# the page puts the start first and ends each row with the silence link.
ALERTS = Table(
    Column("id", accessor="pk", csv_only=True),
    Column("rule", "Rule", "rule.name"),
    Column("state", "State"),
    Column("severity", "Severity"),
    Column("summary", "Summary"),
    Column("cluster", "Cluster", "cluster.name"),
    Column("node", "Node", "node.hostname"),
    Column("job", "Job", "job.scheduler_id"),
    Column("team", "Team", "team.name"),
    Column("cause", csv_only=True),
    Column("value", csv_only=True),
    Column("starts_at", "Started (UTC)", iso("starts_at")),
    Column("last_seen_at", accessor=iso("last_seen_at"), csv_only=True),
    Column("ends_at", "Ended (UTC)", iso("ends_at")),
    Column("notified_at", accessor=iso("notified_at"), csv_only=True),
    Column("resolved_notified_at", accessor=iso("resolved_notified_at"), csv_only=True),
    Column("failure_id", csv_only=True),
    Column("silence", "", html_only=True),
    page_order=(
        "starts_at",
        "state",
        "severity",
        "rule",
        "summary",
        "cluster",
        "node",
        "job",
        "team",
        "ends_at",
        "silence",
    ),
)

# The silences (`alerts/silences.html`), rows Silence; the page says whether one mutes now
# and ends each row with its expire button.
SILENCES = Table(
    Column("id", accessor="pk", csv_only=True),
    Column("cluster", "Cluster", "cluster.name"),
    Column("node", "Node", "node.hostname"),
    Column("cause", "Cause"),
    Column("team", "Team", "team.name"),
    Column("starts_at", "From (UTC)", iso("starts_at")),
    Column("ends_at", "Until (UTC)", iso("ends_at")),
    Column("mutes", "Mutes", html_only=True),
    Column("created_by", "Who"),
    Column("why", "Why", "comment"),
    Column("expire", "", html_only=True),
)

# The user's own subscriptions (`alerts/channels.html`), rows Subscription with channel and
# clusters read.
SUBSCRIPTIONS = Table(
    Column("id", accessor="pk", csv_only=True),
    Column("scope", "What"),
    Column("clusters", "Clusters", lambda s: " ".join(c.name for c in s.clusters.all())),
    Column("severities", "Severities", lambda s: " ".join(s.severities)),
    Column("channel_kind", accessor="channel.kind", csv_only=True),
    Column("channel", "Channel", "channel.target"),
    Column("active", "State"),
    Column("edit", "", html_only=True),
)

# The channels one may see (`alerts/channels.html`), rows Channel with n_subscriptions.
CHANNELS = Table(
    Column("id", accessor="pk", csv_only=True),
    Column("kind", "Kind"),
    Column("name", "Name"),
    Column("target", "Target"),
    Column("owner", "Owner", _owner, html_only=True),
    Column("user", accessor=lambda c: c.user.get_username() if c.user else None, csv_only=True),
    Column("team", accessor="team.name", csv_only=True),
    Column("disabled", "State"),
    Column("last_error", "Last error"),
    Column("last_error_at", accessor=iso("last_error_at"), csv_only=True),
    Column("subscriptions", "Subscriptions", "n_subscriptions", num=True),
    Column("links", "", html_only=True),
    page_order=(
        "kind",
        "name",
        "target",
        "owner",
        "subscriptions",
        "disabled",
        "last_error",
        "links",
    ),
)

# The delivery log (`alerts/deliveries.html`), rows Notification with channel read.
DELIVERIES = Table(
    Column("id", accessor="pk", csv_only=True),
    Column("created_at", "When (UTC)", iso("created_at")),
    Column("sent_at", "Sent (UTC)", iso("sent_at")),
    Column("channel_kind", accessor="channel.kind", csv_only=True),
    Column("channel", "Channel", lambda n: str(n.channel)),
    Column("recipient", "Recipient", "to"),
    Column("kind", "Kind"),
    Column("status", "Status"),
    Column("attempts", "Attempts", num=True),
    Column("subject", "Subject"),
    Column("error", "Error"),
    page_order=(
        "created_at",
        "channel",
        "recipient",
        "kind",
        "subject",
        "status",
        "attempts",
        "sent_at",
        "error",
    ),
)

# The demo's outbox (`alerts/outbox.html`), rows OutboxMessage; the page links the subject to
# the whole message, which the CSV carries.
OUTBOX = Table(
    Column("id", accessor="pk", csv_only=True),
    Column("created_at", "When (UTC)", iso("created_at")),
    Column("from", accessor="from_email", csv_only=True),
    Column("to", "To"),
    Column("subject", "Subject"),
    Column("message_id", csv_only=True),
    Column("body_text", csv_only=True),
)
