"""`/metrics` for an existing Prometheus: the fleet as Vigil sees it, read at scrape time.

Values come from PostgreSQL when Prometheus scrapes (custom collectors), so every web process
answers the same and nothing is kept in process memory. Guarded by VIGIL_METRICS_KEY (see
webapp/core/keyauth.py). Names follow Prometheus conventions (STYLE.md).

Each app contributes its own metric families: it calls `register(SomeCollector)` when it
loads (its AppConfig.ready), so a new app adds metrics without editing core. A collector is
built anew for every scrape and should read with one query per family, never one per GPU or
node: `/metrics` must stay cheap for a fleet of 50,000 GPUs. Where the families live:

- core: `vigil_ingest_rejected_batches_total{reason}` (below),
  `vigil_api_unauthenticated_requests_total` (keyauth.py);
- telemetry (telemetry/metrics.py): per GPU `vigil_gpu_*` (labels cluster, node, gpu, uuid,
  model), per cluster `vigil_gpus`, `vigil_cluster_*`, nodes, `vigil_ingest_lag_seconds`,
  `vigil_ingest_samples_total`;
- failures (failures/metrics.py): `vigil_failures_total`, `vigil_gpu_errors_total`.
- alerts: the alerts app registers its own collector the same way, from its AppConfig.ready,
  with the family `vigil_alerts_firing{rule,severity}` (a gauge: alerts firing now, silenced
  ones left out). The shipped Prometheus rules (deploy/prometheus/rules/vigil.rules.yml) do
  not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from webapp.core.keyauth import key_refusal
from webapp.core.models import RejectedBatch

_collectors: list[Callable[[], Collector]] = []


def register(factory: Callable[[], Collector]) -> None:
    """Add a collector (built anew for every scrape) to `/metrics`; registering twice is a no-op."""
    if factory not in _collectors:
        _collectors.append(factory)


class IngestCollector(Collector):
    def collect(self) -> Iterator:
        rejected = CounterMetricFamily(
            "vigil_ingest_rejected_batches", "Batches refused whole, by reason", labels=["reason"]
        )
        for row in RejectedBatch.objects.values("reason").annotate(n=Count("id")).order_by():
            rejected.add_metric([row["reason"]], row["n"])
        yield rejected


register(IngestCollector)


@login_not_required
@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = key_refusal(request, settings.VIGIL_METRICS_KEY, "VIGIL_METRICS_KEY")
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    for factory in _collectors:
        registry.register(factory())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
