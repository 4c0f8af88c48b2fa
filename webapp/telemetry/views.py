"""Live pages: the GPU page and a cluster's nodes, and the CSV exports of the fleet, a cluster, a
node and a GPU (the fleet overview and the node page compose several apps: webapp/pages/)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from webapp.fleet.models import Cluster, Gpu, Node
from webapp.telemetry import figures, tables
from webapp.telemetry.forms import RangeForm
from webapp.telemetry.readings import readings_grouped
from webapp.telemetry.selectors import (
    RANGES,
    SERIES_METRICS,
    cluster_nodes,
    clusters_overview,
    gpu_first_data,
    gpu_problems,
    gpu_sample_latest,
    gpu_status,
    gpus_latest,
    gpus_series,
)


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
    first_data = gpu_first_data(gpu.id)
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
            # First seen: when Vigil first saw the GPU or its oldest telemetry, whichever is
            # earlier, so the page never says it appeared after its own chart's first point.
            "first_seen": min(first_data, gpu.first_seen) if first_data else gpu.first_seen,
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
