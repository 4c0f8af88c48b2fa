"""Failure pages: the timeline, one failure with its evidence in context, reliability; every
table has a CSV export."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

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

from webapp.core.exports import csv_response, csv_stream
from webapp.core.windows import Window
from webapp.failures import figures, taxonomy
from webapp.failures.choices import FailureKind
from webapp.failures.forms import ReliabilityForm, TimelineForm
from webapp.failures.models import FailureEvent
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
    xid_meaning,
)
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobType
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


FAILURE_CSV_HEADER = (
    "id",
    "cluster",
    "kind",
    "occurred_at",
    "detected_at",
    "diagnosed_at",
    "job",
    "job_type",
    "user",
    "node",
    "cause",
    "category",
    "acme_alias",
    "action",
    "default_action",
    "breaker",
    "detail",
    "confidence",
    "rule_id",
    "source",
    "blamed_node",
    "blamed_gpu",
    "gpu_hours_lost",
)


def timeline_csv(request: HttpRequest) -> StreamingHttpResponse:
    f = TimelineForm(request.GET).failure_filter(timezone.now())

    def rows():
        # A server-side cursor: rows are read as the response is written, not all at once.
        for e in failures_filter(f)[:CSV_MAX_ROWS].iterator(chunk_size=2000):
            yield (
                e.pk,
                e.cluster.name,
                e.kind,
                e.occurred_at.isoformat(),
                e.detected_at.isoformat(),
                e.diagnosed_at.isoformat() if e.diagnosed_at else None,
                e.job.scheduler_id if e.job else None,
                e.job.job_type if e.job else None,
                e.job.user if e.job else None,
                e.node.hostname if e.node else None,
                e.cause,
                e.category,
                e.alias,
                e.action,
                e.default_action,
                e.breaker,
                e.detail,
                e.confidence,
                e.rule_id,
                e.source,
                e.blamed_node.hostname if e.blamed_node else e.blamed_host or None,
                e.blamed_gpu_label or None,
                e.gpu_hours_lost,
            )

    return csv_stream("failures.csv", FAILURE_CSV_HEADER, rows())


def _failure(failure_id: int) -> FailureEvent:
    return get_object_or_404(
        FailureEvent.objects.select_related(
            "cluster", "job", "node", "gpu", "blamed_node", "blamed_gpu", "gpu_error"
        ),
        pk=failure_id,
    )


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
    rows = (
        (e.get("file"), e.get("line"), e.get("rule_id"), e.get("text"))
        for e in failure.evidence or []
    )
    return csv_response(
        f"failure-{failure.pk}-evidence.csv", ("file", "line", "rule_id", "text"), rows
    )


def detail_xids_csv(request: HttpRequest, failure_id: int) -> HttpResponse:
    failure = _failure(failure_id)
    node = failure.blamed_node or failure.node
    rows = (
        (
            node.hostname,
            e.ts.isoformat(),
            e.gpu_index,
            e.kind,
            e.xid or None,
            xid_meaning(e.xid) if e.xid else "",
            e.count,
            e.source,
            e.message,
        )
        for e in node_xid_history(node)
    )
    return csv_response(
        f"failure-{failure.pk}-gpu-errors.csv",
        ("node", "ts", "gpu_index", "kind", "xid", "meaning", "count", "source", "message"),
        rows,
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


def _fmt(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


RELIABILITY_TABLES = (
    "summary",
    "nodes",
    "sizes",
    "causes",
    "table3",
    "offenders",
    "ettr",
    "checkpoints",
    "recovery",
)


def reliability_csv(request: HttpRequest, table: str) -> HttpResponse:
    if table not in RELIABILITY_TABLES:
        raise Http404(f"no table {table!r}")
    r, _ = _reliability(request)
    if r is None:
        raise Http404("no cluster")
    name = f"reliability-{r.window.cluster.name}-{table}.csv"
    if table == "summary":
        t = r.times
        return csv_response(
            name,
            (
                "cluster",
                "since",
                "until",
                "nodes",
                "node_days",
                "failures",
                "failures_per_1000_node_days",
                "mtbf_h",
                "detect_median_s",
                "diagnose_median_s",
            ),
            [
                (
                    r.window.cluster.name,
                    r.window.since.isoformat(),
                    r.window.until.isoformat(),
                    r.nodes,
                    _fmt(r.node_days),
                    r.failures,
                    _fmt(r.rate_per_1000_node_days),
                    _fmt(r.mtbf_h),
                    _fmt(t["detect_median_s"]),
                    _fmt(t["diagnose_median_s"]),
                )
            ],
        )
    if table == "nodes":
        return csv_response(
            name,
            ("node", "failures", "mtbf_h"),
            [(x["node"], x["failures"], _fmt(x["mtbf_h"])) for x in r.per_node],
        )
    if table == "sizes":
        return csv_response(
            name,
            ("job_size", "job_hours", "failures", "mtbf_observed_h", "mtbf_formula_h"),
            [
                (
                    x["size"],
                    _fmt(x["job_hours"]),
                    x["failures"],
                    _fmt(x["mtbf_observed_h"]),
                    _fmt(x["mtbf_formula_h"]),
                )
                for x in r.per_size
            ],
        )
    if table in ("causes", "table3"):
        rows = [
            (
                c["category"],
                x["cause"],
                x["alias"],
                x["jobs"],
                _fmt(x["job_share"]),
                _fmt(x["gpu_hours"]),
                _fmt(x["gpu_share"]),
            )
            for c in r.table3
            for x in c["causes"]
        ]
        return csv_response(
            name,
            (
                "category",
                "cause",
                "acme_alias",
                "failed_jobs",
                "share_of_failed_jobs",
                "gpu_hours_lost",
                "share_of_lost_gpu_time",
            ),
            rows,
        )
    if table == "offenders":
        return csv_response(
            name,
            (
                "node",
                "failures",
                "jobs_failed",
                "gpu_errors",
                "node_fails",
                "causes",
                "days_since_last_failure",
            ),
            [
                (
                    x["node"],
                    x["failures"],
                    x["jobs_failed"],
                    x["xids"],
                    x["node_fails"],
                    x["causes"],
                    _fmt(x["days_since_last"]),
                )
                for x in r.offenders
            ],
        )
    if table == "recovery":
        return csv_response(
            name,
            (
                "category",
                "failures",
                "jobs_running_again",
                "time_to_recover_median_s",
                "time_to_recover_p95_s",
            ),
            [
                (
                    x["category"],
                    x["failures"],
                    x["running_again"],
                    _fmt(x["median_s"]),
                    _fmt(x["p95_s"]),
                )
                for x in r.recovery
            ],
        )
    if table == "ettr":
        return csv_response(
            name,
            ("job", "name", "wall_h", "productive_h", "ettr", "failures"),
            [
                (
                    x["job"].scheduler_id,
                    x["job"].name,
                    _fmt(x["wall_h"]),
                    _fmt(x["productive_h"]),
                    _fmt(x["ettr"]),
                    x["failures"],
                )
                for x in r.ettr
            ],
        )
    return csv_response(
        name,
        (
            "job",
            "name",
            "nodes",
            "job_mtbf_h",
            "young_daly_interval_s",
            "used_interval_s",
            "checkpoint_write_s",
            "last_checkpoint_at",
        ),
        [
            (
                x["job"].scheduler_id,
                x["job"].name,
                x["nodes"],
                _fmt(x["mtbf_h"]),
                _fmt(x["optimal_s"], 0),
                _fmt(x["used_s"], 0) if x["used_s"] else "unknown",
                r.checkpoint_write_s,
                x["last_checkpoint_at"].isoformat() if x["last_checkpoint_at"] else None,
            )
            for x in r.checkpoints
        ],
    )
