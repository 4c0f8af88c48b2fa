"""`/metrics` for an existing Prometheus: the fleet as Vigil sees it, read at scrape time.

Values come from PostgreSQL when Prometheus scrapes (a custom collector), so every web process
answers the same and nothing is kept in process memory. Guarded by VIGIL_METRICS_KEY (see
webapp/keyauth.py). Names follow Prometheus conventions (STYLE.md).
"""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webapp.fleet.models import Node
from webapp.keyauth import key_refusal
from webapp.telemetry.models import RejectedBatch, RollupDirty
from webapp.telemetry.selectors import STATUSES, clusters_overview


class FleetCollector(Collector):
    def collect(self) -> Iterator:
        summaries, _ = clusters_overview()
        gpus = GaugeMetricFamily(
            "vigil_gpus", "GPUs by cluster and status (latest sample)", labels=["cluster", "status"]
        )
        power = GaugeMetricFamily(
            "vigil_cluster_gpu_power_watts", "Sum of the latest GPU power draw", labels=["cluster"]
        )
        for s in summaries:
            for status in STATUSES:
                gpus.add_metric([s.name, status], getattr(s, status))
            power.add_metric([s.name], s.power_kw * 1000)
        yield gpus
        yield power

        nodes = GaugeMetricFamily(
            "vigil_nodes", "Nodes by cluster and state", labels=["cluster", "state"]
        )
        for row in Node.objects.values("cluster__name", "state").annotate(n=Count("id")):
            nodes.add_metric([row["cluster__name"], row["state"]], row["n"])
        yield nodes

        rejected = CounterMetricFamily(
            "vigil_ingest_rejected_batches", "Batches refused whole, by reason", labels=["reason"]
        )
        for row in RejectedBatch.objects.values("reason").annotate(n=Count("id")):
            rejected.add_metric([row["reason"]], row["n"])
        yield rejected

        yield GaugeMetricFamily(
            "vigil_rollup_pending_batches",
            "Stored batches not yet folded into the 1-minute rollup",
            value=RollupDirty.objects.count(),
        )


@login_not_required
@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = key_refusal(request, settings.VIGIL_METRICS_KEY, "VIGIL_METRICS_KEY")
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
