"""Failure pages: the timeline, one failure with its evidence in context, reliability; every
table has a CSV export."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.db.models import Q
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseForbidden,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from webapp.core.templatetags.vigil import gpu_name
from webapp.core.windows import Window
from webapp.failures import figures, tables, taxonomy
from webapp.failures.choices import FailureKind
from webapp.failures.forms import ReliabilityForm, TimelineForm
from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.failures.selectors import (
    LIVE_DETECTION_MAX,
    Reliability,
    detected_live,
    evidence_in_context,
    failure_inputs,
    failure_lane,
    failures_filter,
    job_hosts_for,
    node_xid_history,
    reliability,
    reported_late_s,
    xid_meaning,
)
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobType
from webapp.jobs.models import Job
from webapp.teams.selectors import LOG_LINES_HIDDEN, job_logs_visible

TIMELINE_MAX = 2000  # failures drawn and listed (the CSV has them all, up to CSV_MAX_ROWS)
CSV_MAX_ROWS = 100_000
XID_HISTORY_DAYS = 30


def timeline(request: HttpRequest) -> HttpResponse:
    form = TimelineForm(request.GET)
    f, error = form.failure_filter(timezone.now()), form.error
    days, lane = form.values["days"], form.values["lane"]
    failures = list(failures_filter(f)[:TIMELINE_MAX])
    hosts = job_hosts_for(failures) if lane == "node" else {}
    rows = [
        (e, failure_lane(e, lane, hosts), reverse("failures:detail", args=[e.pk])) for e in failures
    ]
    query = request.GET.copy()
    query.pop("lane", None)
    return render(
        request,
        "failures/timeline.html",
        {
            "failures": failures,
            "failure_rows": [(e, not detected_live(e)) for e in failures],
            "replayed": sum(not detected_live(e) for e in failures),
            "live_max_min": int(LIVE_DETECTION_MAX.total_seconds() // 60),
            "filter": f,
            "days": days,
            "lane": lane,
            "error": error,
            "clusters": Cluster.objects.order_by("name"),
            "categories": [c.value for c in taxonomy.Category],
            "causes": list(taxonomy.CAUSES),
            "job_types": JobType.choices,
            "kinds": FailureKind.choices,
            "FailureKind": FailureKind,
            "query": request.GET.urlencode(),
            "lane_query": query.urlencode(),
            "truncated": len(failures) == TIMELINE_MAX,
            "figures": {"timeline": figures.timeline_figure(rows)},
        },
        status=400 if error else 200,
    )


def _refused(error: str) -> HttpResponse:
    """A CSV asked with a filter it cannot honour: 400 naming the field, as its page says,
    never a file of another window."""
    return HttpResponse(error, status=400, content_type="text/plain")


def timeline_csv(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    form = TimelineForm(request.GET)
    if form.error:
        return _refused(form.error)
    f = form.failure_filter(timezone.now())
    # A server-side cursor: rows are read as the response is written, not all at once.
    rows = failures_filter(f)[:CSV_MAX_ROWS].iterator(chunk_size=2000)
    return tables.FAILURES.csv_stream("failures.csv", rows)


def _failure(failure_id: int) -> FailureEvent:
    return get_object_or_404(
        FailureEvent.objects.select_related(
            "cluster", "job", "node", "gpu", "blamed_node", "blamed_gpu", "gpu_error"
        ),
        pk=failure_id,
    )


# How far apart a GPU error and the job failure it caused may be: the job's end follows the
# Xid within the scheduler's kill and the collector's next interval, a few minutes at most.
INCIDENT_SPAN = timedelta(minutes=15)


def incident_links(failure: FailureEvent, xids: list[GpuErrorEvent]) -> list[tuple[str, str]]:
    """The other pages of the failure's incident, as (text, url): for a GPU error, the jobs
    that held the GPU when it failed and their job failures; for a job failure, the GPU errors
    on its blamed GPU (or node) shortly before its end (`xids`: the blamed node's GPU error
    history, each with its failure), where the drain and requeue are recorded."""
    if failure.kind == FailureKind.GPU_ERROR and failure.node_id:
        on_gpu = Q(allocations__node_id=failure.node_id)
        if failure.gpu_error and failure.gpu_error.gpu_index is not None:
            on_gpu &= Q(allocations__gpu_index=failure.gpu_error.gpu_index)
        held = Q(allocations__start__lte=failure.occurred_at) & (
            Q(allocations__end__isnull=True) | Q(allocations__end__gte=failure.occurred_at)
        )
        jobs = list(Job.objects.filter(on_gpu & held).distinct().order_by("id")[:20])
        out = [(f"job {j.scheduler_id}", reverse("jobs:detail", args=[j.pk])) for j in jobs]
        related = FailureEvent.objects.filter(
            job__in=jobs,
            kind=FailureKind.JOB_FAILURE,
            occurred_at__gte=failure.occurred_at,
            occurred_at__lte=failure.occurred_at + INCIDENT_SPAN,
        ).select_related("job")
        out += [
            (f"job {f.job.scheduler_id}'s failure", reverse("failures:detail", args=[f.pk]))
            for f in related
        ]
        return out
    if failure.kind == FailureKind.JOB_FAILURE and failure.blamed_node_id:
        # Read from the node's GPU error history the page shows already (no query of its own).
        lo = failure.occurred_at - INCIDENT_SPAN
        errors = [
            e
            for e in reversed(xids)
            if lo <= e.ts <= failure.occurred_at
            and (failure.blamed_gpu_id is None or e.gpu_id == failure.blamed_gpu_id)
            and getattr(e, "failure", None) is not None
        ]
        return [
            (
                f"GPU error{f' Xid {e.xid}' if e.xid else ''} on "
                f"{failure.blamed_node.hostname} {gpu_name(e.gpu_index, e.pci_bus_id)}",
                reverse("failures:detail", args=[e.failure.pk]),
            )
            for e in errors[:10]
        ]
    return []


def detail(request: HttpRequest, failure_id: int) -> HttpResponse:
    failure = _failure(failure_id)
    node = failure.blamed_node or failure.node
    until = timezone.now()
    xids = node_xid_history(node, days=XID_HISTORY_DAYS)
    cause = taxonomy.CAUSES.get(failure.cause) if failure.cause else None
    logs_visible = job_logs_visible(request.user, failure.job)
    # The lines the engine read only for those who may see them; notes for everyone.
    inputs = failure_inputs(failure, streams=logs_visible)
    return render(
        request,
        "failures/detail.html",
        {
            "failure": failure,
            "incident": incident_links(failure, xids),
            "reported_late_s": reported_late_s(failure),
            "FailureKind": FailureKind,
            "cause": cause,
            "history_node": node,
            "xids": [(e, xid_meaning(e.xid) if e.xid else e.kind) for e in xids],
            "context": evidence_in_context(failure, inputs=inputs) if logs_visible else [],
            # The note shown in place of the evidence, for a viewer not in the job's team.
            "logs_hidden": None if logs_visible else LOG_LINES_HIDDEN,
            "notes": inputs.get("notes", []),
            "symptoms": inputs.get("symptoms", []),
            "figures": {
                "xids": figures.xid_history_figure(
                    # Half a day of margin: a marker at "now" is drawn whole.
                    xids,
                    until - timedelta(days=XID_HISTORY_DAYS),
                    until + timedelta(hours=12),
                )
            }
            if xids
            else {},
        },
    )


def detail_evidence_csv(request: HttpRequest, failure_id: int) -> HttpResponse:
    failure = _failure(failure_id)
    if not job_logs_visible(request.user, failure.job):
        return HttpResponseForbidden(LOG_LINES_HIDDEN, content_type="text/plain")
    return tables.EVIDENCE.csv_response(
        f"failure-{failure.pk}-evidence.csv", failure.evidence or []
    )


def detail_xids_csv(request: HttpRequest, failure_id: int) -> HttpResponse:
    failure = _failure(failure_id)
    node = failure.blamed_node or failure.node
    return tables.XIDS.csv_response(
        f"failure-{failure.pk}-gpu-errors.csv",
        ((node.hostname, e) for e in node_xid_history(node)),
    )


def job_failures(request: HttpRequest, job_id: int) -> HttpResponse:
    """A job's failure: its page if it has one, else the timeline filtered to the job."""
    failures = list(FailureEvent.objects.filter(job_id=job_id).order_by("-occurred_at")[:2])
    if len(failures) == 1:
        return redirect("failures:detail", failures[0].pk)
    return redirect(reverse("failures:timeline") + "?" + urlencode({"job": job_id, "lane": "job"}))


# --- Reliability -----------------------------------------------------------------------------


def _reliability(request: HttpRequest) -> tuple[Reliability | None, dict]:
    form = ReliabilityForm(request.GET)
    cluster, days, write_s = form.chosen_cluster, form.values["days"], form.values["ckpt_write_s"]
    context = {
        "clusters": Cluster.objects.order_by("name"),
        "cluster": cluster,
        "days": days,
        "error": form.error,
        "ckpt_write_s": write_s,
        "live_max_min": int(LIVE_DETECTION_MAX.total_seconds() // 60),
        "query": request.GET.urlencode(),
    }
    if cluster is None:
        return None, context
    now = timezone.now()
    return reliability(Window(cluster, now - timedelta(days=days), now), write_s), context


def reliability_page(request: HttpRequest) -> HttpResponse:
    result, context = _reliability(request)
    context["r"] = result
    if result is not None:
        context["figures"] = {"lost": figures.lost_by_cause_figure(result.by_cause)}
    return render(
        request, "failures/reliability.html", context, status=400 if context["error"] else 200
    )


def reliability_csv(request: HttpRequest, table: str) -> HttpResponse:
    declared = tables.RELIABILITY.get(table)
    if declared is None:
        raise Http404(f"no table {table!r}")
    r, context = _reliability(request)
    if context["error"]:
        return _refused(context["error"])
    if r is None:
        raise Http404("no cluster")
    rows: list = {
        "summary": [r],
        "nodes": r.per_node,
        "sizes": r.per_size,
        "causes": [x for c in r.table3 for x in c.causes],
        "offenders": r.offenders,
        "ettr": r.ettr,
        "checkpoints": r.checkpoints,
        "recovery": r.recovery,
    }[table if table != "table3" else "causes"]
    return declared.csv_response(f"reliability-{r.window.cluster.name}-{table}.csv", rows)
