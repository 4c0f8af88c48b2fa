"""Reads of telemetry: the latest sample of every GPU, fleet summaries, and time series.

Latest values come from `telemetry_gpulatest`, one row per GPU that ingest keeps current in
the samples' own transaction: reading "now" costs the same whether the sample partitions hold
an hour or two weeks, and never touches them. Every series query is bounded by constant times
the planner prunes partitions with (tests/telemetry/test_selectors.py checks the plans).
Series of a day or more read only the 1-minute rollup (`telemetry_gpurollup1m`), never raw
samples.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby
from operator import itemgetter

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from collectors.schema import GPU_FIELD_NAMES
from webapp.fleet.choices import NodeState
from webapp.fleet.models import Cluster, Node
from webapp.fleet.selectors import node_state_now
from webapp.telemetry import arrays, distributions, reads
from webapp.telemetry.choices import GPU_STATUSES, GpuStatus
from webapp.telemetry.partitions import oldest_kept
from webapp.telemetry.samples import samples_source

# The read API over (GPU, interval) lists that the apps above telemetry use (reads.py):
# samples and energy, raw, compacted or rolled up, whichever holds the span.
GpuInterval = reads.GpuInterval
ReadBudget = reads.ReadBudget
Resolution = reads.Resolution
IntervalSeries = reads.IntervalSeries
Band = reads.Band
Bands = reads.Bands
CounterEnergy = reads.CounterEnergy
Activity = reads.Activity
Idle = reads.Idle
Distribution = distributions.Distribution
intervals_series = reads.intervals_series
intervals_bands = reads.intervals_bands
intervals_energy = reads.intervals_energy
intervals_activity = reads.intervals_activity
intervals_idle = reads.intervals_idle
cluster_distribution = distributions.cluster_distribution
KeptSince = distributions.KeptSince
telemetry_kept_since = distributions.telemetry_kept_since
# Samples as arrays and the GPU-hours that hold samples, for the energy rollup that accounts
# samples itself (counter, power integration and model fallbacks).
SampleArrays = arrays.SampleArrays
gpus_sample_arrays = arrays.gpus_sample_arrays
nodes_sample_arrays = arrays.nodes_sample_arrays
gpus_hourly_sample_counts = arrays.gpus_hourly_sample_counts
gpus_hours_with_samples = arrays.gpus_hours_with_samples

# Metrics the live pages show, with the unit the figures use.
SERIES_METRICS: tuple[str, ...] = (
    "gpu_util",
    "sm_active",
    "fb_used_bytes",
    "power_w",
    "gpu_temp_c",
)


@dataclass(frozen=True)
class LatestGpu:
    """A GPU of the inventory with its latest sample (all metrics None when stale)."""

    gpu_id: int
    index: int
    uuid: str
    model: str
    node_id: int
    hostname: str
    cluster_id: int
    cluster: str
    ts: datetime | None
    values: dict[str, float | int | None] = field(default_factory=dict)
    # The node's stored state and when it was last heard from (fleet.selectors.node_state_now
    # turns the two into the state to show).
    node_state: str = NodeState.UP
    node_seen: datetime | None = None

    def value(self, name: str) -> float | int | None:
        return self.values.get(name)

    @property
    def status(self) -> GpuStatus:
        return gpu_status(self.ts, self.values, settings.VIGIL_BUSY_UTIL_PCT)


def gpu_status(ts: datetime | None, values: dict, busy_util_pct: float) -> GpuStatus:
    """Classify a GPU from its latest sample (None when there is none in the stale window).

    Erroring means the latest sample shows an uncorrectable memory error the GPU has not
    recovered from: volatile double-bit ECC errors since the last reset (`ecc_dbe_vol > 0`),
    a row remap waiting for a reset (`remap_pending = 1`, Xid 63) or a failed remap
    (`remap_failure = 1`, Xid 64: RMA candidate). It wins over busy and idle, because a busy
    GPU with a bad row still needs attention. Aggregate and single-bit counters do not count:
    they never reset or are corrected, so they would keep a healthy GPU red forever.
    """
    if ts is None:
        return GpuStatus.STALE
    if gpu_problems(values):
        return GpuStatus.ERRORING
    util = values.get("gpu_util")
    if util is not None and util >= busy_util_pct:
        return GpuStatus.BUSY
    return GpuStatus.IDLE


def gpu_problems(values: dict) -> list[str]:
    """Why a sample makes its GPU erroring, in words (empty: it does not)."""
    problems = []
    dbe = values.get("ecc_dbe_vol") or 0
    if dbe > 0:
        problems.append(
            f"{dbe:,} double-bit ECC error{'s' if dbe != 1 else ''} since the last reset"
        )
    if values.get("remap_pending") == 1:
        problems.append("a row remap is pending: reset the GPU to activate it")
    if values.get("remap_failure") == 1:
        problems.append("a row remap failed: RMA candidate")
    return problems


# The sample's time travels as epoch seconds (float8 holds microseconds exactly at today's
# epoch), made a datetime once per distinct value: parsing a timestamp per GPU was a large
# share of the overview's read at fleet scale.
_LATEST_SQL = """
SELECT g.id, g.index, g.uuid, g.model, n.id, n.hostname, c.id, c.name,
    extract(epoch FROM s.ts)::float8, n.state, extract(epoch FROM n.last_seen)::float8{fields}
FROM fleet_gpu g
JOIN fleet_node n ON n.id = g.node_id
JOIN fleet_cluster c ON c.id = n.cluster_id
LEFT JOIN telemetry_gpulatest s ON s.gpu_id = g.id AND s.ts > now() - %s * interval '1 second'
{where}
ORDER BY c.name, n.hostname, g.index
"""

# What the overview and its counts read of each GPU's latest sample: what it draws and what
# gpu_status needs (a narrower row costs less to read at 47,040 GPUs than all 34 fields).
OVERVIEW_FIELDS: tuple[str, ...] = (
    *SERIES_METRICS,
    "ecc_dbe_vol",
    "remap_pending",
    "remap_failure",
)


def latest_sql(fields: tuple[str, ...] = GPU_FIELD_NAMES, where: str = "") -> str:
    """The statement of gpus_latest() (one parameter, the stale window in seconds, then those
    of `where`)."""
    unknown = [f for f in fields if f not in GPU_FIELD_NAMES]
    if unknown:
        raise ValueError(f"not a GPU sample field: {unknown[0]!r}")
    return _LATEST_SQL.format(fields="".join(", s." + name for name in fields), where=where)


def gpus_latest(
    cluster: Cluster | None = None,
    *,
    node_id: int | None = None,
    within_s: int | None = None,
    fields: tuple[str, ...] = GPU_FIELD_NAMES,
) -> list[LatestGpu]:
    """Every GPU (of one cluster or node, or of the fleet) with its latest sample, in one query.

    GPUs without a sample in the last `within_s` seconds (default VIGIL_STALE_AFTER_S) are
    listed with ts None and no values: they are stale. `values` holds `fields` (default: every
    field).
    """
    within_s = settings.VIGIL_STALE_AFTER_S if within_s is None else within_s
    params: list = [within_s]
    where = ""
    if cluster is not None:
        where, params = "WHERE c.id = %s", [*params, cluster.id]
    elif node_id is not None:
        where, params = "WHERE n.id = %s", [*params, node_id]
    with connection.cursor() as cur:
        cur.execute(latest_sql(fields, where), params)
        rows = cur.fetchall()
    out = []
    times: dict[float, datetime] = {}

    def when(epoch_s: float | None) -> datetime | None:
        if epoch_s is None:
            return None
        return times.get(epoch_s) or times.setdefault(epoch_s, datetime.fromtimestamp(epoch_s, UTC))

    for row in rows:
        ts = when(row[8])
        values = {} if ts is None else dict(zip(fields, row[11:], strict=True))
        out.append(LatestGpu(*row[:8], ts, values, row[9], when(row[10])))
    return out


def cluster_power_limit_mean_w(cluster_id: int) -> float | None:
    """The mean enforced power limit (W) of the cluster's GPUs, each by its latest sample
    (None: no GPU reported one)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT avg(l.power_limit_w) FROM telemetry_gpulatest l"
            " JOIN fleet_gpu g ON g.id = l.gpu_id JOIN fleet_node n ON n.id = g.node_id"
            " WHERE n.cluster_id = %s",
            [cluster_id],
        )
        return cur.fetchone()[0]


@dataclass(frozen=True)
class NodeRow:
    id: int
    hostname: str
    state: str
    state_label: str
    last_seen: datetime | None
    gpus: int
    busy: int


def cluster_nodes(cluster: Cluster) -> list[NodeRow]:
    """Every node of the cluster with its GPU count and busy GPUs now (two queries)."""
    now = timezone.now()
    nodes = (
        Node.objects.filter(cluster=cluster).annotate(gpu_count=Count("gpus")).order_by("hostname")
    )
    busy = Counter(g.node_id for g in gpus_latest(cluster) if g.status == GpuStatus.BUSY)
    rows = []
    for n in nodes:
        state = node_state_now(n.state, n.last_seen, now)
        rows.append(
            NodeRow(
                id=n.id,
                hostname=n.hostname,
                state=state,
                state_label=NodeState(state).label,
                last_seen=n.last_seen,
                gpus=n.gpu_count,
                busy=busy[n.id],
            )
        )
    return rows


@dataclass(frozen=True)
class ClusterSummary:
    id: int
    name: str
    gpus: int
    busy: int
    idle: int
    erroring: int
    stale: int
    power_kw: float
    nodes: int

    @property
    def busy_pct(self) -> float | None:
        return 100.0 * self.busy / self.gpus if self.gpus else None


def clusters_summarize(clusters: list[Cluster], gpus: list[LatestGpu]) -> list[ClusterSummary]:
    """Busy / idle / erroring / stale counts and power now (kW) per cluster (plain arithmetic,
    one pass over the GPUs)."""
    busy_util_pct = settings.VIGIL_BUSY_UTIL_PCT
    counts = {c.id: dict.fromkeys(GPU_STATUSES, 0) for c in clusters}
    power_w = dict.fromkeys(counts, 0.0)
    nodes: dict[int, set[int]] = {c: set() for c in counts}
    for g in gpus:
        mine = counts.get(g.cluster_id)
        if mine is None:
            continue
        mine[gpu_status(g.ts, g.values, busy_util_pct)] += 1
        power_w[g.cluster_id] += g.values.get("power_w") or 0.0
        nodes[g.cluster_id].add(g.node_id)
    return [
        ClusterSummary(
            id=c.id,
            name=c.name,
            gpus=sum(counts[c.id].values()),
            power_kw=power_w[c.id] / 1000.0,
            nodes=len(nodes[c.id]),
            **counts[c.id],
        )
        for c in clusters
    ]


def clusters_overview() -> tuple[list[ClusterSummary], list[LatestGpu]]:
    """Summaries of every cluster and the latest sample of every GPU (two queries)."""
    clusters = list(Cluster.objects.order_by("name"))
    gpus = gpus_latest(fields=OVERVIEW_FIELDS)
    return clusters_summarize(clusters, gpus), gpus


# --- Time series ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeRange:
    key: str
    label: str
    seconds: int
    # None: raw samples. Otherwise rollup cells averaged into buckets of this many seconds.
    bucket_s: int | None
    hourly: bool = False  # the hourly rollup (kept for years) instead of the 1-minute one

    @property
    def source(self) -> str:
        if self.bucket_s is None:
            return "raw samples"
        return "hourly rollup" if self.hourly else "1-minute rollup"


# Ranges of a day or more read a rollup only (raw samples are for short ranges);
# past the 1-minute rollup's month (VIGIL_ROLLUP_RETENTION_DAYS), the hourly one.
RANGES: dict[str, TimeRange] = {
    r.key: r
    for r in (
        TimeRange("1h", "last hour", 3600, None),
        TimeRange("1d", "last day", 86400, 60),
        TimeRange("7d", "last 7 days", 7 * 86400, 600),
        TimeRange("90d", "last 90 days", 90 * 86400, 6 * 3600, hourly=True),
        TimeRange("1y", "last year", 365 * 86400, 86400, hourly=True),
    )
}
DEFAULT_RANGE = "1h"


@dataclass
class Series:
    """One GPU's series: timestamps and one list of values per metric (None = no value)."""

    ts: list[datetime] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(
        default_factory=lambda: {m: [] for m in SERIES_METRICS}
    )


# Times travel as epoch seconds, made a datetime once per distinct value (every GPU of a node
# has the same buckets): psycopg parsing a timestamptz per row, and appending a row's values
# one by one, were most of a node's day page (8 GPUs x 1,440 minutes).
_RAW_SERIES_SQL = f"""
SELECT gpu_id, extract(epoch FROM ts)::float8, {", ".join(SERIES_METRICS)}
FROM {{samples}} s
WHERE gpu_id = ANY(%s) AND ts > %s AND ts <= %s
ORDER BY gpu_id, ts
"""

# Means per bucket from the rollup's sums and counts (a mean of means would weight minutes
# with fewer samples too much).
_ROLLUP_SERIES_SQL = f"""
SELECT gpu_id,
    extract(epoch FROM date_bin(%s * interval '1 second', minute, timestamptz '2000-01-01'))::float8,
    {", ".join(f"sum({m}_sum) / nullif(sum({m}_cnt), 0)" for m in SERIES_METRICS)}
FROM telemetry_gpurollup1m
WHERE gpu_id = ANY(%s) AND minute > %s AND minute <= %s
GROUP BY 1, 2
ORDER BY 1, 2
"""


# Buckets of one minute are the rollup's own cells: each cell's mean, with no regrouping (the
# same values: a sum over one row is that row's value), in half the time of the day's query.
_MINUTE_SERIES_SQL = f"""
SELECT gpu_id, extract(epoch FROM minute)::float8,
    {", ".join(f"{m}_sum / nullif({m}_cnt, 0)" for m in SERIES_METRICS)}
FROM telemetry_gpurollup1m
WHERE gpu_id = ANY(%s) AND minute > %s AND minute <= %s
ORDER BY 1, 2
"""


_HOURLY_SERIES_SQL = f"""
SELECT gpu_id,
    extract(epoch FROM date_bin(%s * interval '1 second', hour, timestamptz '2000-01-01'))::float8,
    {", ".join(f"sum({m}_sum) / nullif(sum({m}_cnt), 0)" for m in SERIES_METRICS)}
FROM telemetry_gpurollup1h
WHERE gpu_id = ANY(%s) AND hour > %s AND hour <= %s
GROUP BY 1, 2
ORDER BY 1, 2
"""


def gpus_series(
    gpu_ids: list[int], time_range: TimeRange, *, until: datetime | None = None
) -> dict[int, Series]:
    """Series of SERIES_METRICS for each GPU over `time_range` ending at `until` (default now)."""
    until = until or timezone.now()
    since = until - timedelta(seconds=time_range.seconds)
    out: dict[int, Series] = {gpu_id: Series() for gpu_id in gpu_ids}
    if not gpu_ids:
        return out
    with connection.cursor() as cur:
        if time_range.bucket_s is None:
            source = samples_source(gpu_ids, since, until, SERIES_METRICS)
            cur.execute(_RAW_SERIES_SQL.format(samples=source), [list(gpu_ids), since, until])
        elif not time_range.hourly and time_range.bucket_s == 60:
            cur.execute(_MINUTE_SERIES_SQL, [list(gpu_ids), since, until])
        else:
            sql = _HOURLY_SERIES_SQL if time_range.hourly else _ROLLUP_SERIES_SQL
            cur.execute(sql, [time_range.bucket_s, list(gpu_ids), since, until])
        rows = cur.fetchall()
    times: dict[float, datetime] = {}
    # Rows come ordered by GPU: one run of rows per GPU, its columns transposed at once.
    for gpu_id, run in groupby(rows, key=itemgetter(0)):
        _, epochs, *columns = zip(*run, strict=True)
        series = out[gpu_id]
        series.ts.extend(
            times.get(e) or times.setdefault(e, datetime.fromtimestamp(e, UTC)) for e in epochs
        )
        for name, column in zip(SERIES_METRICS, columns, strict=True):
            series.values[name].extend(column)
    return out


def gpu_sample_latest(gpu_id: int) -> tuple[datetime | None, dict[str, float | int | None]]:
    """The newest sample of one GPU however old (within retention), as (ts, values)."""
    kept = oldest_kept()
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT ts, {', '.join(GPU_FIELD_NAMES)} FROM telemetry_gpulatest "
            "WHERE gpu_id = %s AND ts >= %s",
            [gpu_id, datetime(kept.year, kept.month, kept.day, tzinfo=UTC)],
        )
        row = cur.fetchone()
    if row is None:
        return None, {}
    return row[0], dict(zip(GPU_FIELD_NAMES, row[1:], strict=True))


# The earliest time any tier holds of one GPU: raw samples, packed hours (their first sample),
# and the rollups, which outlive both (a rollup's time is its cell's start).
_FIRST_DATA_SQL = """
SELECT least(
    (SELECT min(ts) FROM telemetry_gpusample WHERE gpu_id = %(gpu)s),
    (SELECT first_ts FROM telemetry_gpusamplepacked WHERE gpu_id = %(gpu)s
        ORDER BY hour LIMIT 1),
    (SELECT min(minute) FROM telemetry_gpurollup1m WHERE gpu_id = %(gpu)s),
    (SELECT min(hour) FROM telemetry_gpurollup1h WHERE gpu_id = %(gpu)s)
)
"""


def gpu_first_data(gpu_id: int) -> datetime | None:
    """The time of the oldest telemetry Vigil keeps of one GPU (None: none). It may precede
    the GPU's registration, when its history arrived later (a spool replayed, a backfill)."""
    with connection.cursor() as cur:
        cur.execute(_FIRST_DATA_SQL, {"gpu": gpu_id})
        return cur.fetchone()[0]


def gpus_minute_grid(
    gpu_ids: list[int], first: datetime, last: datetime, metrics: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """{metric: float64 array [len(gpu_ids), minutes first..last (both included)]}: each GPU's
    mean of its samples in each minute from the 1-minute rollup, NaN where it has none; row k
    is gpu_ids[k]. `first` and `last` are whole minutes.

    One query whose result is a handful of binary arrays (GPU row, minute column, one per
    metric), laid into the grid with NumPy: the straggler pass reads 10 minutes of every GPU
    of the fleet, and a Python tuple and dict per GPU-minute cost most of its time.
    """
    from webapp.core.pgcopy import array_loader
    from webapp.telemetry.models import ROLLUP_METRICS
    from webapp.telemetry.samples import binary_cursor

    unknown = [m for m in metrics if m not in ROLLUP_METRICS]
    if unknown:
        raise ValueError(f"not a rolled-up GPU metric: {unknown[0]!r}")
    n_minutes = int((last - first).total_seconds() // 60) + 1
    out = {m: np.full((len(gpu_ids), max(n_minutes, 0)), np.nan) for m in metrics}
    if not gpu_ids or not metrics or n_minutes < 1:
        return out
    means = ", ".join(
        f"array_agg(coalesce(r.{m}_sum / NULLIF(r.{m}_cnt, 0), 'NaN'))" for m in metrics
    )
    # One index range scan per GPU (LATERAL), not `gpu_id = ANY(array)`: with the thousands
    # of GPUs of the straggler pass, planning and filtering by a long array cost seconds, and
    # a join could hash the whole partition; the constant bounds prune partitions.
    with transaction.atomic(), binary_cursor() as cur:
        for oid, element in ((1016, "int8"), (1022, "float8")):  # int8[], float8[]: NumPy
            cur.adapters.register_loader(oid, array_loader(element))
        cur.execute(
            f"SELECT array_agg(u.k - 1), "
            f"array_agg((extract(epoch FROM r.minute - %s) / 60)::bigint), {means} "
            "FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(gpu_id, k) "
            "CROSS JOIN LATERAL (SELECT * FROM telemetry_gpurollup1m r "
            "WHERE r.gpu_id = u.gpu_id AND r.minute BETWEEN %s AND %s) r",
            [first, list(gpu_ids), first, last],
            binary=True,
        )
        row, column, *values = cur.fetchone()
    if row is None:  # no cell at all
        return out
    for m, data in zip(metrics, values, strict=True):
        out[m][row, column] = data
    return out
