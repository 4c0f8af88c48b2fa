"""The telemetry app's families on `/metrics` (webapp/core/metrics.py): GPUs by status, power,
nodes by state, and the rollup backlog."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webapp.fleet.models import Node
from webapp.telemetry.choices import GPU_STATUSES
from webapp.telemetry.models import RollupDirty
from webapp.telemetry.selectors import clusters_overview


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
            for status in GPU_STATUSES:
                gpus.add_metric([s.name, status.value], getattr(s, status.value))
            power.add_metric([s.name], s.power_kw * 1000)
        yield gpus
        yield power

        nodes = GaugeMetricFamily(
            "vigil_nodes", "Nodes by cluster and state", labels=["cluster", "state"]
        )
        for row in Node.objects.values("cluster__name", "state").annotate(n=Count("id")):
            nodes.add_metric([row["cluster__name"], row["state"]], row["n"])
        yield nodes

        yield GaugeMetricFamily(
            "vigil_rollup_pending_batches",
            "Stored batches not yet folded into the 1-minute rollup",
            value=RollupDirty.objects.count(),
        )
