"""Distributions of a cluster's samples (the workload characterization's CDFs) and how far back
each tier of telemetry reaches: telemetry chooses raw samples, the 1-minute or the hourly rollup
and block-samples above a row budget. Part of the read API `selectors.py` re-exports."""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db import connection

from webapp.telemetry import tiers
from webapp.telemetry.models import ROLLUP_METRICS
from webapp.telemetry.samples import RAW, UNPACKED, samples_source

# --- Distributions over a cluster's GPUs -------------------------------------------------------

# Windows shorter than this read samples; longer ones per-cell means of a rollup.
DISTRIBUTION_RAW_SPAN_MAX = timedelta(days=1)
RAW_STEP_S = 15  # assumed sample interval when estimating raw rows (the paper's 15 s)

_DISTRIBUTION_SQL = """
SELECT count(*), {aggs}
FROM {table} {sample}
JOIN fleet_gpu g ON g.id = {alias}.gpu_id
JOIN fleet_node n ON n.id = g.node_id
WHERE n.cluster_id = %s AND {alias}.{ts} >= %s AND {alias}.{ts} < %s
"""

_PER_CELL = {
    tiers.SAMPLES: "",
    tiers.MINUTE: " (per-minute means)",
    tiers.HOURLY: " (per-hour means)",
}


@dataclass(frozen=True)
class Distribution:
    """Percentiles of metrics over every GPU of a cluster in a window: `source` names the
    data ("raw samples", "1-minute rollup (per-minute means)", ...), `rows` the samples or
    cells read, `sampled_pct` the share of blocks read (None: every row)."""

    source: str
    rows: int
    sampled_pct: float | None
    # metric -> value at each of the asked percentiles (None: no data), in the stored unit
    quantiles: dict[str, list[float | None] | None] = field(default_factory=dict)


def cluster_distribution(
    cluster_id: int,
    since: datetime,
    until: datetime,
    metrics: Sequence[str],
    percentiles: Sequence[float],
    *,
    row_budget: int,
) -> Distribution:
    """`percentiles` (0..1) of each metric over every GPU of the cluster with since <= t <
    until, in its stored unit. Windows of a day or more read per-cell means from the 1-minute
    rollup, shorter ones samples (raw or compacted); a window that begins before a tier's
    retention reads the next coarser tier whole (per-hour means for a quarter), so every
    GPU-cell of it weighs the same. When those tiers hold nothing, the finer tiers' last day
    answers (telemetry not rolled up yet; `source` says so). Above `row_budget` rows the table
    is block-sampled, so the cost stays bounded."""
    for m in metrics:
        if m not in ROLLUP_METRICS:
            raise ValueError(f"not a rolled-up GPU metric: {m!r}")
    finest = tiers.SAMPLES if (until - since) < DISTRIBUTION_RAW_SPAN_MAX else tiers.MINUTE
    result = Distribution("", 0, None)
    candidates = tiers.tiers_for(since, finest)
    for tier in candidates:
        result = _distribution(cluster_id, since, until, tier, metrics, percentiles, row_budget)
        # A block sample can miss every row of a sparse tier: that tier still has data.
        if result.rows or (result.sampled_pct and _has_cells(cluster_id, since, until, tier)):
            return result
    recent = max(since, until - DISTRIBUTION_RAW_SPAN_MAX)
    # A rollup holds a cell only once it has ended and been rolled up: telemetry younger than
    # that (a fleet's first hour, under a window that reads the hourly rollup) is in the finer
    # tiers only, so their last day is read rather than nothing.
    for tier in tiers.tiers_for(recent, tiers.SAMPLES):
        if tier in candidates or recent >= until:
            break
        fresh = _distribution(cluster_id, recent, until, tier, metrics, percentiles, row_budget)
        if fresh.rows:
            return replace(fresh, source=f"{fresh.source}, not rolled up yet")
    return result


def _has_cells(cluster_id: int, since: datetime, until: datetime, tier: tiers.Tier) -> bool:
    """Whether `tier`'s rollup holds a cell of the cluster's GPUs in the window (samples: no,
    the 1-minute rollup holds the same data)."""
    if tier is tiers.SAMPLES:
        return False
    cell = "minute" if tier is tiers.MINUTE else "hour"
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT EXISTS (SELECT 1 FROM {tier.table} r JOIN fleet_gpu g ON g.id = r.gpu_id "
            "JOIN fleet_node n ON n.id = g.node_id "
            f"WHERE n.cluster_id = %s AND r.{cell} >= %s AND r.{cell} < %s)",
            [cluster_id, since, until],
        )
        return cur.fetchone()[0]


def _cluster_gpu_ids(cluster_id: int) -> list[int]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT g.id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id "
            "WHERE n.cluster_id = %s",
            [cluster_id],
        )
        return [r[0] for r in cur.fetchall()]


def _distribution(
    cluster_id: int,
    since: datetime,
    until: datetime,
    tier: tiers.Tier,
    metrics: Sequence[str],
    percentiles: Sequence[float],
    row_budget: int,
) -> Distribution:
    gpu_ids = _cluster_gpu_ids(cluster_id)
    span_s = max((until - since).total_seconds(), 0.0)
    estimate = len(gpu_ids) * span_s / (tier.step_s or RAW_STEP_S)
    pct = 100.0 * row_budget / estimate if estimate > row_budget else None
    use_raw = tier is tiers.SAMPLES
    values = [f"s.{m}" if use_raw else f"r.{m}_sum / nullif(r.{m}_cnt, 0)" for m in metrics]
    aggs = ", ".join(f"percentile_cont(%s::float8[]) WITHIN GROUP (ORDER BY {v})" for v in values)
    # REPEATABLE: the same window draws the same blocks, so a reload shows the same curve.
    sample = f"TABLESAMPLE SYSTEM ({pct:.6f}) REPEATABLE (42)" if pct else ""
    table = f"{RAW} s" if use_raw else f"{tier.table} r"
    if use_raw:  # raw or compacted samples (samples.py)
        source = samples_source(gpu_ids, since, until, metrics, sample_pct=pct)
        if source != RAW:  # packed GPU-hours are sampled as they unpack, raw blocks here
            table = f"(SELECT * FROM {RAW} {sample} UNION ALL SELECT * FROM {UNPACKED}) s"
            sample = ""
    sql = _DISTRIBUTION_SQL.format(
        aggs=aggs,
        table=table,
        alias="s" if use_raw else "r",
        ts="ts" if use_raw else ("minute" if tier is tiers.MINUTE else "hour"),
        sample=sample,
    )
    params = [list(percentiles)] * len(metrics) + [cluster_id, since, until]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows, *quantiles = cur.fetchone()
    return Distribution(
        source=tier.label + _PER_CELL[tier],
        rows=rows,
        sampled_pct=pct,
        quantiles=dict(zip(metrics, quantiles, strict=True)),
    )


@dataclass(frozen=True)
class KeptSince:
    """The oldest time each kind of telemetry is still kept: samples (raw or compacted), the
    1-minute rollup and the hourly one."""

    samples: datetime
    minute: datetime
    hourly: datetime


def telemetry_kept_since(now: datetime | None = None) -> KeptSince:
    """How far back each kind of telemetry reaches now (its retention), for a reader that
    bounds what it asks for by what can still answer."""
    return KeptSince(*(t.kept_since(now) for t in (tiers.SAMPLES, tiers.MINUTE, tiers.HOURLY)))
