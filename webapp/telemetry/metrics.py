"""The telemetry app's families on `/metrics` (webapp/core/metrics.py): every GPU's latest
sample, cluster aggregates, nodes and how fresh their data is, and the ingest counters.

Cheap at fleet scale: one `gpus_latest()` query (the latest-values table, one row per GPU, see
telemetry/selectors.py) feeds every per-GPU and per-cluster family, one query over the nodes feeds
the node families, and no query is made per GPU or per node. A GPU without a sample in that window
has no per-GPU series (it is counted under `vigil_gpus{status="stale"}`): Prometheus then marks its
series stale, as it does for a target that stops reporting.

Units are Prometheus' base units (its naming guide): utilization and SM activity as ratios
0-1 (dcgm-exporter's DCGM_FI_DEV_GPU_UTIL is in percent; Vigil's own names say `_ratio`),
watts, degrees Celsius, bytes, joules.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

from django.core.cache import cache
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from webapp.core.metrics import TextFamily, families_exposition, label_value_escape
from webapp.core.units import mj_to_joules
from webapp.fleet.models import Cluster, Node
from webapp.telemetry.choices import GPU_STATUSES, THERMAL_CLOCK_EVENTS, GpuStatus
from webapp.telemetry.compaction import compaction_lag_hours
from webapp.telemetry.models import RollupDirty
from webapp.telemetry.selectors import (
    OVERVIEW_FIELDS,
    LatestGpu,
    clusters_summarize,
    gpus_latest,
)

log = logging.getLogger("vigil.metrics")

GPU_LABELS = ["cluster", "node", "gpu", "uuid", "model"]

# (family name, help, sample column, factor to the family's unit). Percent -> ratio is /100.
_GPU_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    (
        "vigil_gpu_utilization_ratio",
        "Fraction of the last sample period a kernel ran on the GPU (NVML utilization.gpu / "
        "DCGM_FI_DEV_GPU_UTIL divided by 100)",
        "gpu_util",
        0.01,
    ),
    (
        "vigil_gpu_sm_active_ratio",
        "Fraction of time at least one warp was active on an SM, averaged over SMs "
        "(DCGM_FI_PROF_SM_ACTIVE)",
        "sm_active",
        1.0,
    ),
    ("vigil_gpu_power_watts", "Board power draw", "power_w", 1.0),
    ("vigil_gpu_temperature_celsius", "GPU core temperature", "gpu_temp_c", 1.0),
    ("vigil_gpu_memory_used_bytes", "Framebuffer memory used", "fb_used_bytes", 1.0),
)

# Ingest counters kept in the shared cache (one Redis INCRBY per stored group of batches),
# not in PostgreSQL: counting stored rows there would read the whole sample table.
INGEST_SAMPLES_KEY = "vigil:ingest_samples"


def ingest_samples_count(stored: int) -> None:
    """Count GPU samples newly stored (duplicates of a redelivered batch are not counted).

    Called by telemetry.services after each stored group. A cache outage loses the count, not
    the samples; Prometheus reads a cleared count as a counter reset.
    """
    if stored <= 0:
        return
    try:
        cache.add(INGEST_SAMPLES_KEY, 0, timeout=None)
        cache.incr(INGEST_SAMPLES_KEY, stored)
    except Exception:  # the samples are stored; only the count is lost
        log.warning("could not count %d stored samples", stored, exc_info=True)


# What the families read of each GPU's latest sample: the per-GPU gauges, throttling and
# energy, and what gpu_status needs for vigil_gpus{status} (a third of the 34 fields: the
# scrape reads a row per GPU of the fleet, and each field is a column to read and a dict entry).
METRICS_FIELDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            *(column for _, _, column, _ in _GPU_GAUGES),
            "clocks_event_reasons",
            "energy_mj",
            *OVERVIEW_FIELDS,
        )
    )
)


def gpu_families_text(gpus: Iterable[LatestGpu]) -> str:
    """Per-GPU families from the latest samples, rendered as text (core.metrics.TextFamily:
    one label string per GPU). A missing value (stale, or NULL: not supported on that GPU)
    has no series.

    The labels are written once per GPU, and a cluster's, node's and model's escaped value
    once per scrape (8 GPUs share a node): escaping 5 values per GPU was a large share of
    the families' time at fleet scale.
    """
    gauges = [
        (TextFamily(name, text), column, factor) for name, text, column, factor in _GPU_GAUGES
    ]
    throttling = TextFamily(
        "vigil_gpu_thermal_throttling",
        "1 if the latest sample's clocks event reasons include a thermal slowdown "
        "(NVML SwThermalSlowdown 0x20 or HwThermalSlowdown 0x40), else 0",
    )
    energy = TextFamily(
        "vigil_gpu_energy_joules",
        "NVML cumulative energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ) in joules; "
        "resets when the driver reloads",
        "counter",
    )
    escaped: dict[str, str] = {}

    def shared(value: str) -> str:
        text = escaped.get(value)
        if text is None:
            text = escaped[value] = label_value_escape(value)
        return text

    cluster_label, node_label, gpu_label, uuid_label, model_label = GPU_LABELS
    for g in gpus:
        if g.ts is None:
            continue
        # labels_text(GPU_LABELS, ...), with the shared values escaped once.
        labels = (
            f'{cluster_label}="{shared(g.cluster)}",{node_label}="{shared(g.hostname)}",'
            f'{gpu_label}="{g.index}",{uuid_label}="{label_value_escape(g.uuid)}",'
            f'{model_label}="{shared(g.model)}"'
        )
        values = g.values
        for family, column, factor in gauges:
            value = values.get(column)
            if value is not None:
                family.add(labels, value * factor)
        reasons = values.get("clocks_event_reasons")
        if reasons is not None:
            throttling.add(labels, 1.0 if reasons & THERMAL_CLOCK_EVENTS else 0.0)
        energy_mj = values.get("energy_mj")
        if energy_mj is not None:
            energy.add(labels, mj_to_joules(energy_mj))
    return "".join(f.text() for f in [*(f for f, _, _ in gauges), throttling, energy])


def cluster_families(clusters: list[Cluster], gpus: list[LatestGpu]) -> list[GaugeMetricFamily]:
    """Per-cluster aggregates of the same latest samples (plain arithmetic, no query)."""
    gpus_by_status = GaugeMetricFamily(
        "vigil_gpus", "GPUs by cluster and status (latest sample)", labels=["cluster", "status"]
    )
    up = GaugeMetricFamily(
        "vigil_cluster_gpus_up",
        f"GPUs with a sample in the stale window (every status but {GpuStatus.STALE.value})",
        labels=["cluster"],
    )
    util = GaugeMetricFamily(
        "vigil_cluster_gpu_utilization_mean_ratio",
        "Mean of vigil_gpu_utilization_ratio over the cluster's GPUs that report it",
        labels=["cluster"],
    )
    power = GaugeMetricFamily(
        "vigil_cluster_gpu_power_watts", "Sum of the latest GPU power draw", labels=["cluster"]
    )
    util_sum: Counter[int] = Counter()
    util_n: Counter[int] = Counter()
    for g in gpus:
        value = g.values.get("gpu_util")
        if value is not None:
            util_sum[g.cluster_id] += value / 100.0
            util_n[g.cluster_id] += 1
    for s in clusters_summarize(clusters, gpus):
        for status in GPU_STATUSES:
            gpus_by_status.add_metric([s.name, status.value], getattr(s, status.value))
        up.add_metric([s.name], s.gpus - s.stale)
        power.add_metric([s.name], s.power_kw * 1000)
        if util_n[s.id]:
            util.add_metric([s.name], util_sum[s.id] / util_n[s.id])
    return [gpus_by_status, up, util, power]


def node_families() -> list[GaugeMetricFamily]:
    """Nodes by state, when each node last reported, and each cluster's ingest lag: one query.

    A node's last_seen is the newest sample timestamp it sent (fleet.services
    NODE_SEEN_UPDATE), so now - the newest last_seen of a cluster is how far behind its
    stored data is.
    """
    now = timezone.now()
    nodes = GaugeMetricFamily(
        "vigil_nodes", "Nodes by cluster and state", labels=["cluster", "state"]
    )
    seen = GaugeMetricFamily(
        "vigil_node_last_seen_timestamp_seconds",
        "When the node's newest stored sample was taken (Unix time)",
        labels=["cluster", "node"],
    )
    lag = GaugeMetricFamily(
        "vigil_ingest_lag_seconds",
        "Seconds between now and the cluster's newest stored sample",
        labels=["cluster"],
    )
    states: Counter[tuple[str, str]] = Counter()
    newest: dict[str, float] = {}
    rows = Node.objects.values_list("cluster__name", "hostname", "state", "last_seen")
    for cluster, hostname, state, last_seen in rows.iterator(chunk_size=5000):
        states[cluster, state] += 1
        if last_seen is not None:
            ts = last_seen.timestamp()
            seen.add_metric([cluster, hostname], ts)
            newest[cluster] = max(ts, newest.get(cluster, ts))
    for (cluster, state), n in sorted(states.items()):
        nodes.add_metric([cluster, state], n)
    for cluster, ts in sorted(newest.items()):
        lag.add_metric([cluster], max(now.timestamp() - ts, 0.0))
    return [nodes, seen, lag]


class FleetCollector:
    """core.metrics TextCollector: the per-GPU families are rendered as text, the rest by
    prometheus_client; one `gpus_latest()` query serves both."""

    def exposition(self) -> bytes:
        clusters = list(Cluster.objects.order_by("name"))
        gpus = gpus_latest(fields=METRICS_FIELDS)
        families = [*cluster_families(clusters, gpus), *node_families()]
        families.append(
            GaugeMetricFamily(
                "vigil_rollup_pending_batches",
                "Stored batches not yet folded into the 1-minute rollup",
                value=RollupDirty.objects.count(),
            )
        )
        families.append(
            GaugeMetricFamily(
                "vigil_compaction_lag_hours",
                "Hours past the compaction horizon (VIGIL_COMPACT_AFTER_HOURS) whose raw GPU "
                "samples are not all packed yet (0: caught up)",
                value=compaction_lag_hours(),
            )
        )
        try:
            stored = int(cache.get(INGEST_SAMPLES_KEY) or 0)
        except Exception:  # a cache outage must not take /metrics down: leave the series out
            log.warning("ingest sample count unavailable", exc_info=True)
        else:
            families.append(
                CounterMetricFamily(
                    "vigil_ingest_samples",
                    "GPU samples stored (new rows; a redelivered batch adds none), since the "
                    "cache was last cleared",
                    value=stored,
                )
            )
        return families_exposition(families) + gpu_families_text(gpus).encode()
