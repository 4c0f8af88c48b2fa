"""Live pages: fleet overview (heatmap refreshed from JSON), node and GPU pages, CSV exports."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone

from webapp.core.charts import ERROR_COLOUR, NO_DATA_COLOUR, UTIL_COLOURSCALE
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.telemetry import figures, tables
from webapp.telemetry.forms import RangeForm
from webapp.telemetry.overview import GPU_CELLS_MAX, gpus_list, overview_payload
from webapp.telemetry.readings import readings_grouped
from webapp.telemetry.selectors import (
    RANGES,
    SERIES_METRICS,
    ClusterSummary,
    LatestGpu,
    cluster_nodes,
    clusters_overview,
    gpu_problems,
    gpu_sample_latest,
    gpu_status,
    gpus_latest,
    gpus_series,
)


def api_login_required(view: Callable) -> Callable:
    """For JSON polled by a page: an anonymous caller gets 401 JSON (the page's script sends
    the person to `login_url`) instead of the login page's HTML that LoginRequiredMiddleware
    would redirect to."""

    @login_not_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return JsonResponse(
                {"error": "login required", "login_url": reverse("login")}, status=401
            )
        return view(request, *args, **kwargs)

    return wrapper


def _node_url_factory() -> Callable[[int], str]:
    prefix = reverse("pages:node", args=[0]).removesuffix("0/")
    return lambda node_id: f"{prefix}{node_id}/"


def _overview_payload(summaries: list[ClusterSummary], gpus: list[LatestGpu]) -> dict:
    return overview_payload(
        summaries,
        gpus,
        node_url=_node_url_factory(),
        generated_at=timezone.now().isoformat(),
        busy_util_pct=settings.VIGIL_BUSY_UTIL_PCT,
        stale_after_s=settings.VIGIL_STALE_AFTER_S,
    )


def overview(request: HttpRequest) -> HttpResponse:
    summaries, gpus = clusters_overview()
    return render(
        request,
        "telemetry/overview.html",
        {
            "summaries": summaries,
            "payload": _overview_payload(summaries, gpus),
            # The figures' look, sent once with the page (the refreshes carry data only).
            "look": {
                "template": figures.template_json(),
                "util_colourscale": UTIL_COLOURSCALE,
                "no_data": NO_DATA_COLOUR,
                "error": ERROR_COLOUR,
            },
            "gpu_cells_max": GPU_CELLS_MAX,
            "per_node": any(s.gpus > GPU_CELLS_MAX for s in summaries),
            "busy_util_pct": settings.VIGIL_BUSY_UTIL_PCT,
            "stale_after_s": settings.VIGIL_STALE_AFTER_S,
        },
    )


@api_login_required
def overview_json(request: HttpRequest) -> JsonResponse:
    """What the overview draws; `?gpus=1` adds every GPU's latest values (for scripts: the page
    does not read them, and at 47,040 GPUs they are most of the bytes)."""
    summaries, gpus = clusters_overview()
    payload = _overview_payload(summaries, gpus)
    if request.GET.get("gpus") == "1":
        payload["gpus"] = gpus_list(gpus, _node_url_factory(), SERIES_METRICS)
    return JsonResponse(payload)


def overview_csv(request: HttpRequest) -> HttpResponse:
    summaries, _ = clusters_overview()
    return tables.CLUSTERS.csv_response("vigil-clusters.csv", summaries)


def node_csv(request: HttpRequest, node_id: int) -> HttpResponse:
    node = get_object_or_404(Node, id=node_id)
    return tables.NODE_GPUS.csv_response(
        f"vigil-{node.hostname}-gpus.csv", gpus_latest(node_id=node.id)
    )


def gpu(request: HttpRequest, gpu_id: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("node__cluster"), id=gpu_id)
    time_range = RangeForm(request.GET).time_range
    ts, values = gpu_sample_latest(gpu.id)
    until = timezone.now()
    series = gpus_series([gpu.id], time_range, until=until)[gpu.id]
    latest = readings_grouped(values if ts else None, gpu.model)
    age_s = (timezone.now() - ts).total_seconds() if ts else None
    stale = age_s is None or age_s > settings.VIGIL_STALE_AFTER_S
    return render(
        request,
        "telemetry/gpu.html",
        {
            "gpu": gpu,
            "node": gpu.node,
            "latest": latest,
            "latest_ts": ts,
            "stale": stale,
            "status": gpu_status(None if stale else ts, values, settings.VIGIL_BUSY_UTIL_PCT),
            "problems": gpu_problems(values) if not stale else [],
            "figures": {
                "series": figures.series_figure(
                    {f"GPU {gpu.index}": series},
                    x_range=(until - timedelta(seconds=time_range.seconds), until),
                )
            },
            "has_data": bool(series.ts),
            "time_range": time_range,
            "ranges": RANGES.values(),
            "now": timezone.now(),
            "stale_after_s": settings.VIGIL_STALE_AFTER_S,
        },
    )


def gpu_csv(request: HttpRequest, gpu_id: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("node"), id=gpu_id)
    time_range = RangeForm(request.GET).time_range
    series = gpus_series([gpu.id], time_range)[gpu.id]
    columns = [series.values[m] for m in SERIES_METRICS]
    return tables.GPU_SERIES.csv_response(
        f"vigil-{gpu.node.hostname}-gpu{gpu.index}-{time_range.key}.csv",
        zip(series.ts, *columns, strict=True),
    )


def nodes(request: HttpRequest, cluster: str) -> HttpResponse:
    cluster_obj = get_object_or_404(Cluster, name=cluster)
    return render(
        request,
        "telemetry/nodes.html",
        {
            "cluster": cluster_obj,
            "nodes": cluster_nodes(cluster_obj),
            "now": timezone.now(),
            "busy_util_pct": settings.VIGIL_BUSY_UTIL_PCT,
            "stale_after_s": settings.VIGIL_STALE_AFTER_S,
        },
    )


def nodes_csv(request: HttpRequest, cluster: str) -> HttpResponse:
    cluster_obj = get_object_or_404(Cluster, name=cluster)
    return tables.NODES.csv_response(
        f"vigil-{cluster_obj.name}-nodes.csv", cluster_nodes(cluster_obj)
    )
