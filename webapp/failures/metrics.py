"""The failures app's families on `/metrics` (webapp/core/metrics.py): diagnosed failures by
cause and category, and the GPU error events the nodes reported. One query per family.

Counters count rows: a failure is counted once it is diagnosed (a pending one would move from
cause "" to its cause, which Prometheus would read as a reset), a GPU error event by its
coalesced `count`.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Sum
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from webapp.failures.choices import DiagnosisSource, GpuErrorKind
from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.failures.taxonomy import xid_info


class FailuresCollector(Collector):
    def collect(self) -> Iterator:
        failures = CounterMetricFamily(
            "vigil_failures",
            "Diagnosed failures by cluster, kind, cause and category; job_type is the failed "
            "job's type (empty for a failure without a job)",
            labels=["cluster", "kind", "cause", "category", "job_type"],
        )
        rows = (
            FailureEvent.objects.exclude(source=DiagnosisSource.PENDING)
            .values_list("cluster__name", "kind", "cause", "category", "job__job_type")
            .annotate(n=Count("id"))
            .order_by()
        )
        for cluster, kind, cause, category, job_type, n in rows:
            failures.add_metric([cluster, kind, cause, category, job_type or ""], n)
        yield failures

        errors = CounterMetricFamily(
            "vigil_gpu_errors",
            "GPU error events reported by the nodes (Xids, ECC, row remap, NVLink, PCIe, GPU "
            "lost), by node, kind and Xid code (empty for the other kinds); page is the Xid "
            "catalogue's page column (reference/telemetry.md section 5)",
            labels=["cluster", "node", "kind", "xid", "page"],
        )
        rows = (
            GpuErrorEvent.objects.values_list(
                "node__cluster__name", "node__hostname", "kind", "xid"
            )
            .annotate(n=Sum("count"))
            .order_by()
        )
        for cluster, node, kind, xid, n in rows:
            is_xid = kind == GpuErrorKind.XID
            page = is_xid and xid_info(xid).page
            labels = [cluster, node, kind, str(xid) if is_xid else "", "true" if page else "false"]
            errors.add_metric(labels, n)
        yield errors
