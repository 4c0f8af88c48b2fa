"""Pages that compose several apps.

The fleet overview: every GPU's latest sample (telemetry) on a heatmap per cluster, with each
node's state (fleet) and the job holding each GPU (jobs), refreshed from its JSON.
The node page: a node's GPUs and samples (telemetry) beside which job holds each GPU (jobs),
its recent GPU errors and failures (failures) and the recovery actions taken on it (recovery).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone

from webapp.core.charts import ERROR_COLOUR, NO_DATA_COLOUR, UTIL_COLOURSCALE
from webapp.fleet.choices import NodeState
from webapp.fleet.models import Node
from webapp.fleet.selectors import node_state_now
from webapp.jobs.selectors import GpuHolder, gpu_holders
from webapp.pages.node_activity import (
    RECENT_DAYS,
    failures_recent,
    gpu_errors_recent,
    jobs_holding_gpus,
    recovery_actions_recent,
)
from webapp.pages.overview import GPU_CELLS_MAX, HELD_IDLE_COLOUR, gpus_list, overview_payload
from webapp.telemetry import figures as telemetry_figures
from webapp.telemetry.forms import RangeForm
from webapp.telemetry.selectors import (
    RANGES,
    SERIES_METRICS,
    ClusterSummary,
    LatestGpu,
    clusters_overview,
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


def _overview() -> tuple[
    list[ClusterSummary], dict, list[LatestGpu], dict[int, GpuHolder], datetime
]:
    """The clusters' summaries and the page's payload: three queries whatever the fleet's size
    (clusters; every GPU's latest sample with its node's state; the GPUs jobs hold now)."""
    summaries, gpus = clusters_overview()
    now = timezone.now()
    holders = gpu_holders(now)
    payload = overview_payload(
        summaries,
        gpus,
        holders=holders,
        now=now,
        node_url=_node_url_factory(),
        busy_util_pct=settings.VIGIL_BUSY_UTIL_PCT,
        stale_after_s=settings.VIGIL_STALE_AFTER_S,
    )
    return summaries, payload, gpus, holders, now


def overview(request: HttpRequest) -> HttpResponse:
    summaries, payload, *_ = _overview()
    return render(
        request,
        "pages/overview.html",
        {
            "summaries": summaries,
            "payload": payload,
            # The figures' look, sent once with the page (the refreshes carry data only).
            "look": {
                "template": telemetry_figures.template_json(),
                "util_colourscale": UTIL_COLOURSCALE,
                "no_data": NO_DATA_COLOUR,
                "error": ERROR_COLOUR,
                "held_idle": HELD_IDLE_COLOUR,
            },
            "held_idle_colour": HELD_IDLE_COLOUR,
            "gpu_cells_max": GPU_CELLS_MAX,
            "per_node": any(s.gpus > GPU_CELLS_MAX for s in summaries),
            "busy_util_pct": settings.VIGIL_BUSY_UTIL_PCT,
            "stale_after_s": settings.VIGIL_STALE_AFTER_S,
        },
    )


@api_login_required
def overview_json(request: HttpRequest) -> JsonResponse:
    """What the overview draws; `?gpus=1` adds every GPU's latest values, node state and job
    (for scripts: the page does not read them, and at 47,040 GPUs they are most of the bytes)."""
    _, payload, gpus, holders, now = _overview()
    if request.GET.get("gpus") == "1":
        payload["gpus"] = gpus_list(gpus, holders, now, _node_url_factory(), SERIES_METRICS)
    return JsonResponse(payload)


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
            "node_state": NodeState(
                node_state_now(node.state, node.last_seen, timezone.now(), runs_jobs=bool(holders))
            ),
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
