"""`/metrics` for an existing Prometheus: the fleet as Vigil sees it, read at scrape time.

Values come from PostgreSQL when Prometheus scrapes (custom collectors), so every web process
answers the same and nothing is kept in process memory. Guarded by VIGIL_METRICS_KEY (see
webapp/core/keyauth.py). Names follow Prometheus' naming conventions
(https://prometheus.io/docs/practices/naming/).

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

import gzip
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from webapp.core.keyauth import key_refusal
from webapp.core.refusals import refusals_by_reason


class TextCollector(Protocol):
    """A collector that renders its families itself, in the text format (0.0.4)."""

    def exposition(self) -> bytes: ...


_collectors: list[Callable[[], Collector | TextCollector]] = []


def register(factory: Callable[[], Collector | TextCollector]) -> None:
    """Add a collector (built anew for every scrape) to `/metrics`; registering twice is a no-op.

    A collector is a prometheus_client Collector (its `collect()` yields metric families), or
    one with `exposition()` returning text-format bytes, for families with a series per GPU.
    """
    if factory not in _collectors:
        _collectors.append(factory)


# --- Families with a series per GPU -------------------------------------------------------
# prometheus_client builds an object per sample and validates and escapes every label of
# every sample again when it renders, which dominates a scrape at fleet scale. TextFamily
# renders a line straight from a label string escaped once per GPU: the same text, cheaper.


def label_value_escape(value: str) -> str:
    """A label value as the text format writes it between quotes (backslash, quote,
    newline escaped: Prometheus "Exposition formats", text format details)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_text(names: Iterable[str], values: Iterable[str]) -> str:
    """`a="1",b="2"`: the inside of a sample's braces, to render once and reuse per family."""
    return ",".join(
        f'{name}="{label_value_escape(value)}"' for name, value in zip(names, values, strict=True)
    )


class TextFamily:
    """One metric family rendered as text as its samples are added (see above)."""

    def __init__(self, name: str, documentation: str, kind: str = "gauge") -> None:
        # A counter's samples are named <name>_total, as prometheus_client writes them.
        self.sample_name = f"{name}_total" if kind == "counter" else name
        help_text = documentation.replace("\\", "\\\\").replace("\n", "\\n")
        self._lines = [f"# HELP {self.sample_name} {help_text}\n# TYPE {self.sample_name} {kind}\n"]

    def add(self, labels: str, value: float) -> None:
        """One sample; `labels` from labels_text()."""
        value = float(value)
        # repr is what floatToGoString returns for these (NaN, infinities and exponents
        # aside), at a third of its cost.
        text = repr(value) if -1e15 < value < 1e15 else floatToGoString(value)
        self._lines.append(f"{self.sample_name}{{{labels}}} {text}\n")

    def text(self) -> str:
        return "".join(self._lines)


def families_exposition(families: Iterable[Metric]) -> bytes:
    """Ordinary prometheus_client families in the text format (for a TextCollector's rest)."""

    class _Families(Collector):
        def collect(self) -> Iterator[Metric]:
            yield from families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families())
    return generate_latest(registry)


class IngestCollector(Collector):
    def collect(self) -> Iterator:
        rejected = CounterMetricFamily(
            "vigil_ingest_rejected_batches", "Batches refused whole, by reason", labels=["reason"]
        )
        for reason, n in sorted(refusals_by_reason().items()):
            rejected.add_metric([reason], n)
        yield rejected


register(IngestCollector)


# Prometheus asks for gzip. The body is megabytes at fleet scale, and level 1 compresses it
# in a fraction of GZipMiddleware's level 6 time for a few more bytes.
GZIP_LEVEL = 1
GZIP_MIN_BYTES = 200  # as GZipMiddleware: smaller bodies are sent as they are
_ACCEPTS_GZIP = re.compile(r"\bgzip\b")


@login_not_required
@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = key_refusal(request, settings.VIGIL_METRICS_KEY, "VIGIL_METRICS_KEY")
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    rendered: list[bytes] = []
    for factory in _collectors:
        collector = factory()
        exposition = getattr(collector, "exposition", None)
        if exposition is not None:
            rendered.append(exposition())
        else:
            registry.register(collector)
    body = generate_latest(registry) + b"".join(rendered)
    response = HttpResponse(content_type=CONTENT_TYPE_LATEST)
    if len(body) >= GZIP_MIN_BYTES and _ACCEPTS_GZIP.search(
        request.headers.get("Accept-Encoding", "")
    ):
        # Compressed here, fast (GZipMiddleware leaves a response with Content-Encoding alone).
        body = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
        response["Content-Encoding"] = "gzip"
    patch_vary_headers(response, ("Accept-Encoding",))
    response.content = body
    return response
