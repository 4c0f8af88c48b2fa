"""The failures app's families on `/metrics` (webapp/core/metrics.py): diagnosed failures by
cause and category, and the GPU error events the nodes reported. One query for each pair.

Counters count rows: a failure is counted once it is diagnosed (a pending one would move from
cause "" to its cause, which Prometheus would read as a reset), a GPU error event by its
coalesced `count`. Each counter has a `..._last_..._timestamp_seconds` twin with the same
labels: alert rules test `time() - twin < window`, which fires for a series seen for the
first time too (increase() needs two samples, so it misses a counter's first step) and does
not fire again for old errors when Prometheus restarts.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Max, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webapp.failures.choices import DiagnosisSource, GpuErrorKind
from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.failures.taxonomy import xid_info


class FailuresCollector(Collector):
    def collect(self) -> Iterator:
        labels = ["cluster", "kind", "cause", "category", "job_type"]
        failures = CounterMetricFamily(
            "vigil_failures",
            "Diagnosed failures by cluster, kind, cause and category; job_type is the failed "
            "job's type (empty for a failure without a job)",
            labels=labels,
        )
        last_failure = GaugeMetricFamily(
            "vigil_failures_last_diagnosed_timestamp_seconds",
            "When the newest failure of these labels was diagnosed (Unix time)",
            labels=labels,
        )
        rows = (
            FailureEvent.objects.exclude(source=DiagnosisSource.PENDING)
            .values_list("cluster__name", "kind", "cause", "category", "job__job_type")
            .annotate(n=Count("id"), last=Max("diagnosed_at"))
            .order_by()
        )
        for cluster, kind, cause, category, job_type, n, last in rows:
            values = [cluster, kind, cause, category, job_type or ""]
            failures.add_metric(values, n)
            if last is not None:
                last_failure.add_metric(values, last.timestamp())
        yield failures
        yield last_failure

        labels = ["cluster", "node", "kind", "xid", "page"]
        errors = CounterMetricFamily(
            "vigil_gpu_errors",
            "GPU error events reported by the nodes (Xids, ECC, row remap, NVLink, PCIe, GPU "
            "lost), by node, kind and Xid code (empty for the other kinds); page is what the "
            "Xid asks of operators by NVIDIA's catalog (docs/xid-catalog.md): true, act now "
            "(the node is reset, rebooted or escalated); support, tell operators without a "
            "drain (the catalog ignores it once and asks for support when it recurs); false",
            labels=labels,
        )
        last_error = GaugeMetricFamily(
            "vigil_gpu_errors_last_timestamp_seconds",
            "When the node saw the newest GPU error event of these labels (Unix time)",
            labels=labels,
        )
        rows = (
            GpuErrorEvent.objects.values_list(
                "node__cluster__name", "node__hostname", "kind", "xid"
            )
            .annotate(n=Sum("count"), last=Max("last_ts"))
            .order_by()
        )
        for cluster, node, kind, xid, n, last in rows:
            is_xid = kind == GpuErrorKind.XID
            page = xid_page_label(xid) if is_xid else "false"
            values = [cluster, node, kind, str(xid) if is_xid else "", page]
            errors.add_metric(values, n)
            last_error.add_metric(values, last.timestamp())
        yield errors
        yield last_error


def xid_page_label(code: int) -> str:
    """The `page` label of an Xid: "true" where the node needs a person or a repair now,
    "support" where the catalog says to ignore it but asks for support when it recurs (92,
    157: operators are told, nothing is drained), "false" otherwise."""
    info = xid_info(code)
    if not info.page:
        return "false"
    return "support" if info.tier == "ignore" else "true"
