"""The telemetry pages' tables, declared once for the page's header and the CSV
(`webapp/core/tables.py`)."""

from __future__ import annotations

from django.utils.html import format_html

from webapp.core.tables import Column, Table
from webapp.core.units import GIB, iso_utc
from webapp.telemetry.selectors import SERIES_METRICS, LatestGpu


def _dot(state: str, text: str) -> str:
    """A header with the legend's dot of its state's colour."""
    return format_html('<span class="dot {}"></span>{}', state, text)


# The fleet overview's table of clusters (`pages/overview.html`), rows ClusterSummary.
CLUSTERS = Table(
    Column("cluster", "Cluster", "name"),
    Column("nodes", "Nodes", num=True),
    Column("gpus", "GPUs", num=True),
    Column("busy", _dot("busy", "Busy"), num=True),
    Column("idle", _dot("idle", "Idle"), num=True),
    Column("erroring", _dot("erroring", "Erroring"), num=True),
    Column("stale", _dot("stale", "Stale"), num=True),
    Column("power_kw", "Power now", lambda s: round(s.power_kw, 3), unit="kW", num=True),
)


def _sm_active_pct(g: LatestGpu) -> float | None:
    sm = g.value("sm_active")
    return round(sm * 100, 1) if sm is not None else None


def _mem_used_gib(g: LatestGpu) -> float | None:
    mem = g.value("fb_used_bytes")
    return round(mem / GIB, 2) if mem is not None else None


# A node's GPUs (`pages/node.html`), rows LatestGpu; the page adds the job holding each GPU.
NODE_GPUS = Table(
    Column("index", "GPU", num=True),
    Column("uuid", "UUID"),
    Column("model", "Model"),
    Column("status", "Status"),
    Column("last_sample_utc", accessor=lambda g: iso_utc(g.ts), csv_only=True),
    Column("gpu_util_pct", "Util", lambda g: g.value("gpu_util"), unit="%", num=True),
    Column("sm_active_pct", "SM active", _sm_active_pct, unit="%", num=True),
    Column("mem_used_gib", "Memory used", _mem_used_gib, unit="GiB", num=True),
    Column("power_w", "Power", lambda g: g.value("power_w"), unit="W", num=True),
    Column("gpu_temp_c", "Temp", lambda g: g.value("gpu_temp_c"), unit="°C", num=True),
    Column("job_now", "Job now", html_only=True),
)


def _series_column(i: int, metric: str) -> Column:
    return Column(metric, accessor=lambda row: row[i + 1])


# One GPU's series over a range (CSV only: the page draws it), rows (ts, *SERIES_METRICS).
GPU_SERIES = Table(
    Column("ts_utc", accessor=lambda row: iso_utc(row[0])),
    *(_series_column(i, m) for i, m in enumerate(SERIES_METRICS)),
)

# A cluster's nodes (`telemetry/nodes.html`), rows NodeRow.
NODES = Table(
    Column("hostname", "Hostname"),
    Column("state", "State"),
    Column("last_seen_utc", "Last seen (UTC)", lambda n: iso_utc(n.last_seen)),
    Column("gpus", "GPUs", num=True),
    Column("busy_gpus", "Busy GPUs", "busy", num=True),
)
