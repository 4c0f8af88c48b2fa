"""The node page: a node's GPUs and samples (telemetry) beside which job holds each GPU (jobs),
its recent GPU errors and failures (failures) and the recovery actions taken on it (recovery)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from webapp.fleet.choices import NodeState
from webapp.fleet.models import Node
from webapp.fleet.selectors import node_state_now
from webapp.pages.node_activity import (
    RECENT_DAYS,
    failures_recent,
    gpu_errors_recent,
    jobs_holding_gpus,
    recovery_actions_recent,
)
from webapp.telemetry import figures as telemetry_figures
from webapp.telemetry.forms import RangeForm
from webapp.telemetry.selectors import RANGES, gpus_latest, gpus_series


def node(request: HttpRequest, node_id: int) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("cluster"), id=node_id)
    time_range = RangeForm(request.GET).time_range
    gpus = gpus_latest(node_id=node.id)
    until = timezone.now()
    series = gpus_series([g.gpu_id for g in gpus], time_range, until=until)
    holders = jobs_holding_gpus(node, until)
    figure = telemetry_figures.series_figure(
        {f"GPU {g.index}": series[g.gpu_id] for g in gpus},
        x_range=(until - timedelta(seconds=time_range.seconds), until),
    )
    return render(
        request,
        "pages/node.html",
        {
            "node": node,
            "node_state": NodeState(node_state_now(node.state, node.last_seen, timezone.now())),
            "gpus": [
                (g, telemetry_figures.gpu_hover_values(g), holders.get(g.index)) for g in gpus
            ],
            "gpu_errors": gpu_errors_recent(node),
            "failures": failures_recent(node, until),
            "actions": recovery_actions_recent(node, until),
            "recent_days": RECENT_DAYS,
            "figures": {"series": figure},
            "time_range": time_range,
            "ranges": RANGES.values(),
            "has_data": any(s.ts for s in series.values()),
            "now": timezone.now(),
            "stale_after_s": settings.VIGIL_STALE_AFTER_S,
        },
    )
