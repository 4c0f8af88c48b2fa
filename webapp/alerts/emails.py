"""The alert emails: each kind is three templates (templates/emails/alert-<kind>-subject.html,
-body-text.html, -body-html.html, as in healthchecks), rendered by core.mail.render through one
function per kind from the context `alert_context` builds for one recipient.

What a recipient may read decides what the context holds: evidence lines only for those who
may read the job's logs (teams.selectors.job_logs_visible); routing (selectors.py) already
keeps other teams' jobs out of their emails altogether.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from webapp.alerts.models import Alert
from webapp.core import mail
from webapp.core.templatetags.vigil import gpu_name, gpu_name_of
from webapp.failures.selectors import reported_late_s
from webapp.recovery.choices import ActionKind
from webapp.recovery.models import RecoveryAction

# Where the pages helper's alert list lives (webapp/alerts/urls.py, "alerts:list"); a fixed
# path here, so emails link to it even before that page exists.
ALERTS_PATH = "/alerts/"


def absolute(path: str) -> str:
    return f"{settings.VIGIL_BASE_URL}{path}"


def _url(name: str, *args: object) -> str:
    try:
        return absolute(reverse(name, args=args))
    except NoReverseMatch:
        return ""


def _actions(alert: Alert) -> list[dict]:
    """The recovery actions of the alert's failure plan (or the alert's own action)."""
    qs = RecoveryAction.objects.none()
    if alert.failure_id:
        qs = RecoveryAction.objects.filter(plan__failure_id=alert.failure_id)
    elif alert.recovery_action_id:
        qs = RecoveryAction.objects.filter(pk=alert.recovery_action_id)
    return [
        {
            "kind": a.get_kind_display(),
            "status": a.get_status_display(),
            "target": a.host or a.job_scheduler_id or a.audience,
            "result": a.result,
            "waiting": a.status == "awaiting_approval",
        }
        for a in qs.exclude(kind=ActionKind.NOTIFY).order_by("seq", "id")
    ]


def _gpu_name(gpu: object, label: str) -> str:
    """The GPU as every page names it (core's gpu_name), else its label ("3": GPU 3)."""
    if gpu is not None:
        return gpu_name_of(gpu)
    if label.isdigit():
        return gpu_name(int(label))
    return label if not label or label.startswith("GPU") else f"GPU {label}"


def alert_context(alert: Alert, *, show_logs: bool) -> dict:
    """One alert as the templates show it."""
    f = alert.failure
    job = alert.job
    item = {
        "summary": alert.summary,
        "rule": alert.rule.name,
        "severity": alert.severity,
        "state": alert.state,
        "starts_at": alert.starts_at,
        "ends_at": alert.ends_at,
        "cluster": alert.cluster.name if alert.cluster_id else "",
        "node": alert.node.hostname if alert.node_id else alert.labels.get("node", ""),
        "gpu": _gpu_name(alert.gpu if alert.gpu_id else None, alert.labels.get("gpu", "")),
        "gpu_url": _url("telemetry:gpu", alert.gpu_id) if alert.gpu_id else "",
        "cause": alert.cause,
        "value": alert.value,
        "job": None,
        "failure": None,
        "actions": _actions(alert),
        "evidence": [],
        "evidence_hidden": False,
        "url": absolute(ALERTS_PATH),
    }
    if job is not None:
        item["job"] = {
            "id": job.scheduler_id,
            "name": job.name,
            "user": job.user,
            "type": job.get_job_type_display(),
            "gpus": job.gpus_requested,
            "url": _url("jobs:detail", job.pk),
        }
    if f is not None:
        late_s = reported_late_s(f)  # replayed or late: "since" is when it happened
        item["failure"] = {
            "occurred_at": f.occurred_at,
            "reported_late_min": round(late_s / 60) if late_s is not None else None,
            "cause": f.cause,
            "category": f.category,
            "confidence": f.confidence,
            "detail": f.detail,
            "blamed_host": f.blamed_host,
            "blamed_gpu": _gpu_name(f.blamed_gpu if f.blamed_gpu_id else None, f.blamed_gpu_label),
            "blamed_gpu_url": _url("telemetry:gpu", f.blamed_gpu_id) if f.blamed_gpu_id else "",
            "gpu_hours_lost": f.gpu_hours_lost,
            "url": _url("failures:detail", f.pk),
        }
        if show_logs:
            item["evidence"] = f.evidence
        else:
            item["evidence_hidden"] = bool(f.evidence)
        item["url"] = item["failure"]["url"] or item["url"]
    return item


def email_alert_firing(item: dict, *, unsubscribe_url: str) -> mail.Rendered:
    return mail.render("alert-firing", {"a": item, "unsubscribe_url": unsubscribe_url})


def email_alerts_grouped(items: list[dict], *, group: str, unsubscribe_url: str) -> mail.Rendered:
    firing = [i for i in items if i["state"] == "firing"]
    resolved = [i for i in items if i["state"] == "resolved"]
    return mail.render(
        "alert-grouped",
        {
            "firing": firing,
            "resolved": resolved,
            "group": group,
            "unsubscribe_url": unsubscribe_url,
        },
    )


def email_alerts_resolved(items: list[dict], *, group: str, unsubscribe_url: str) -> mail.Rendered:
    return mail.render(
        "alert-resolved", {"resolved": items, "group": group, "unsubscribe_url": unsubscribe_url}
    )


def email_approval_waiting(item: dict, *, unsubscribe_url: str) -> mail.Rendered:
    return mail.render("alert-approval", {"a": item, "unsubscribe_url": unsubscribe_url})
