"""The alerting decisions as plain functions over plain data (tested without Django):
fingerprints, a failed job's severity, silences, inhibition, Alertmanager's group timers and
per-recipient rate limits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from webapp.alerts.choices import Severity


def fingerprint(rule: str, identity: Mapping[str, object]) -> str:
    """sha256 of the rule's name and the labels that identify the alert (sorted), as hex.

    Alertmanager fingerprints the whole label set; Vigil's labels also carry what can change
    while the alert is the same one (a re-diagnosed cause), so the identity is the subset that
    names the thing: the failure, the node, the GPU, the action.
    """
    text = json.dumps({"rule": rule, **{k: str(v) for k, v in identity.items()}}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def job_failure_severity(
    params: Mapping[str, object],
    default: str,
    *,
    job_type: str,
    gpus: int,
    cause: str,
) -> str | None:
    """The severity of a failed job's alert, or None for no alert (a cancellation).

    Defaults (migration 0002): a failed pretraining job on 64 GPUs or more pages (critical);
    a debug job's failure is info; a scheduler outcome such as a requeue is no alert.
    """
    if cause in (params.get("skip_causes") or ()):
        return None
    if job_type in (params.get("info_job_types") or ()):
        return Severity.INFO
    min_gpus = int(params.get("critical_min_gpus") or 0)  # type: ignore[call-overload]
    if job_type in (params.get("critical_job_types") or ()) and gpus >= min_gpus:
        return Severity.CRITICAL
    return default


@dataclass(frozen=True)
class AlertFacts:
    """What silences and inhibition look at."""

    cluster_id: int | None
    node_id: int | None
    cause: str
    team_id: int | None
    rule_kind: str


@dataclass(frozen=True)
class SilenceFacts:
    cluster_id: int | None
    node_id: int | None
    cause: str
    team_id: int | None
    starts_at: datetime
    ends_at: datetime


def _matches(s: SilenceFacts, alert: AlertFacts, now: datetime) -> bool:
    """The silence is in force and every field it names equals the alert's."""
    return (
        s.starts_at <= now < s.ends_at
        and (s.cluster_id is None or s.cluster_id == alert.cluster_id)
        and (s.node_id is None or s.node_id == alert.node_id)
        and (not s.cause or s.cause == alert.cause)
        and (s.team_id is None or s.team_id == alert.team_id)
    )


def silenced(alert: AlertFacts, silences: Iterable[SilenceFacts], now: datetime) -> bool:
    """True if a silence for everyone (one naming no team) in force matches the alert."""
    return any(s.team_id is None and _matches(s, alert, now) for s in silences)


def silencing_teams(
    alert: AlertFacts, silences: Iterable[SilenceFacts], now: datetime
) -> frozenset[int]:
    """The teams whose own silence in force matches the alert: it mutes those teams'
    recipients only (see `team_silence_mutes`)."""
    return frozenset(
        s.team_id for s in silences if s.team_id is not None and _matches(s, alert, now)
    )


def team_silence_mutes(
    silencing: frozenset[int],
    recipient_teams: frozenset[int],
    *,
    operator_alert: bool,
    recipient_is_operator: bool,
) -> bool:
    """Does a team's silence keep this alert from this recipient? Only a recipient of a
    silencing team (a member, or the team's own channel), and never an operator's alert about
    the hardware or recovery: a team quiets its own inboxes, not the people who fix nodes."""
    if recipient_is_operator and operator_alert:
        return False
    return not silencing.isdisjoint(recipient_teams)


# Inhibition (Alertmanager's inhibit_rules): a node that is down explains its GPUs' and jobs'
# alerts; those are held back while the node-down alert fires.
INHIBITED_BY_NODE_DOWN = frozenset(
    {"gpu_hardware", "gpu_thermal", "job_failed", "gpus_idle", "recovery_failed"}
)


def inhibited(alert: AlertFacts, nodes_down: frozenset[int]) -> bool:
    return (
        alert.node_id is not None
        and alert.node_id in nodes_down
        and alert.rule_kind in INHIBITED_BY_NODE_DOWN
    )


def group_flush_at(
    now: datetime,
    *,
    pending_flush_at: datetime | None,
    last_notified_at: datetime | None,
    group_wait_s: float,
    group_interval_s: float,
) -> datetime:
    """When a group that just got a new (or newly resolved) alert should send.

    As Alertmanager: a new group waits group_wait to gather the alerts that come together; a
    group that sent already sends the news at most once per group_interval. A flush already
    planned earlier stays.
    """
    if last_notified_at is None:
        due = now + timedelta(seconds=group_wait_s)
    else:
        due = max(now, last_notified_at + timedelta(seconds=group_interval_s))
    if pending_flush_at is not None and pending_flush_at <= due:
        return pending_flush_at
    return due


def repeat_due(last_notified_at: datetime | None, repeat_interval_s: float, now: datetime) -> bool:
    """A firing alert already sent is sent again once repeat_interval has passed."""
    return last_notified_at is not None and now - last_notified_at >= timedelta(
        seconds=repeat_interval_s
    )


def rate_limited(sent_in_last_hour: int, limit_per_hour: int) -> bool:
    return sent_in_last_hour >= limit_per_hour
