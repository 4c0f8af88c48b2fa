"""Inventory pages: the nodes of a cluster, with a CSV export."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from webapp.exports import csv_response
from webapp.fleet.models import Cluster
from webapp.fleet.selectors import cluster_nodes


@login_required
def nodes(request: HttpRequest, cluster: str) -> HttpResponse:
    cluster_obj = get_object_or_404(Cluster, name=cluster)
    return render(
        request,
        "fleet/nodes.html",
        {
            "cluster": cluster_obj,
            "nodes": cluster_nodes(cluster_obj),
            "now": timezone.now(),
            "busy_util_pct": settings.VIGIL_BUSY_UTIL_PCT,
            "stale_after_s": settings.VIGIL_STALE_AFTER_S,
        },
    )


@login_required
def nodes_csv(request: HttpRequest, cluster: str) -> HttpResponse:
    cluster_obj = get_object_or_404(Cluster, name=cluster)
    return csv_response(
        f"vigil-{cluster_obj.name}-nodes.csv",
        ["hostname", "state", "last_seen_utc", "gpus", "busy_gpus"],
        (
            [n.hostname, n.state, n.last_seen.isoformat() if n.last_seen else None, n.gpus, n.busy]
            for n in cluster_nodes(cluster_obj)
        ),
    )
