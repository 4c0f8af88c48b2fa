"""What happened to a job beyond its scheduler events, for its page's timeline: the failures
that name it or whose recovery acted on it (a GPU error whose drain requeued it), their
diagnoses, and every recovery action of those failures or on the job, each linking its page.

The jobs app asks (`jobs.dispatch.job_incident_wanted`); this answers from the top floor,
since failures and recovery sit above jobs. Three queries, whatever the job's history.
"""

from __future__ import annotations

from django.db.models import Q
from django.urls import reverse

from webapp.core.templatetags.vigil import gpu_name
from webapp.failures.choices import FailureKind
from webapp.failures.models import FailureEvent
from webapp.jobs.dispatch import TimelineEntry, job_incident_wanted
from webapp.jobs.models import Job
from webapp.recovery.models import RecoveryAction
from webapp.recovery.selectors import action_label


def _failure_entries(f: FailureEvent) -> list[TimelineEntry]:
    url = reverse("failures:detail", args=[f.pk])
    links: tuple[tuple[str, str], ...] = ()
    where = ""
    if f.blamed_gpu is not None:
        gpu = f.blamed_gpu
        label = f"{gpu.node.hostname} {gpu_name(gpu.index, gpu.pci_bus_id)}"
        links = (("GPU page", reverse("telemetry:gpu", args=[gpu.pk])),)
        where = f" on {label}"
    elif f.blamed_node is not None:
        links = (("node page", reverse("pages:node", args=[f.blamed_node_id])),)
        where = f" on {f.blamed_node.hostname}"
    elif f.blamed_host:
        where = f" on {f.blamed_host}"
    if f.kind == FailureKind.GPU_ERROR:
        xid = f" Xid {f.gpu_error.xid}" if f.gpu_error and f.gpu_error.xid else ""
        host = f.node.hostname if f.node else ""
        gpu = gpu_name(f.gpu_error.gpu_index, f.gpu_error.pci_bus_id) if f.gpu_error else ""
        title = f"GPU error{xid} on {host} {gpu}".rstrip()
        kind = "gpu_error"
    else:
        title = f"{f.get_kind_display()}"
        kind = "failure"
    out = [TimelineEntry(f.occurred_at, kind, title, f.detail, url, "Failed", links)]
    if f.diagnosed_at is not None and f.cause:
        chose = f"; the policy's action: {f.action}" if f.action else ""
        out.append(
            TimelineEntry(
                f.diagnosed_at,
                "diagnosis",
                f"Diagnosed: {f.cause}{where}",
                f"category {f.category or 'none'}, by {f.get_source_display().lower()}{chose}",
                url,
                "",
                links,
            )
        )
    return out


def _action_entry(a: RecoveryAction) -> TimelineEntry:
    detail = a.result or (a.error.splitlines()[0] if a.error else "") or a.reason
    return TimelineEntry(
        a.started_at or a.created_at,
        "action",
        action_label(a),
        detail,
        reverse("recovery:action", args=[a.pk]),
        a.get_status_display(),
    )


def job_incident(sender: type, *, job: Job, **kwargs: object) -> list[TimelineEntry]:
    """The job's failures, diagnoses and recovery actions as timeline entries."""
    failures = list(
        FailureEvent.objects.filter(
            Q(job_id=job.pk)
            | Q(recovery_plan__job_id=job.pk)
            | Q(recovery_plan__actions__job_id=job.pk)
        )
        .distinct()
        .select_related("node", "blamed_node", "blamed_gpu__node", "gpu_error")
        .order_by("occurred_at", "id")
    )
    actions = RecoveryAction.objects.filter(
        Q(job_id=job.pk) | Q(plan__failure_id__in=[f.pk for f in failures])
    ).select_related("plan")
    out = [e for f in failures for e in _failure_entries(f)]
    out += [_action_entry(a) for a in actions.order_by("created_at", "seq", "id")]
    return out


job_incident_wanted.connect(job_incident, dispatch_uid="pages.job_incident")
