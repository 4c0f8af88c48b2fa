"""The hourly GPU and node energy rollups (the energy app's pipeline from samples).

Each GPU-hour is recomputed whole from raw samples (webapp/energy/sources.py) and split at
allocation boundaries, so a row is the energy one GPU used in one hour while one job held it
(job null: no job held it, "idle"). Rows are replaced per (GPU, hour), so a refresh is exact
whatever was redelivered, and running it twice changes nothing.

Which GPU-hours to recompute: ended hours whose sample count (telemetry's
gpus_hourly_sample_counts, from its 1-minute rollup) differs from the count this rollup saw,
within VIGIL_ENERGY_LOOKBACK_H; and the hour after each (its first interval starts with the
previous hour's last sample). No hook in ingest is needed; the
comparison reads the 1-minute rollup of the lookback window each run, which a very large
fleet would rather avoid: a dirty-range row written by ingest, as RollupDirty is, would let
this refresh recompute exactly the GPU-hours that changed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from webapp.energy import accounting
from webapp.energy.carbon import node_power_estimate_w
from webapp.energy.selectors import (
    month_key,
)
from webapp.energy.sources import gpu_series, node_series
from webapp.fleet.models import Node
from webapp.telemetry.selectors import gpus_hourly_sample_counts, gpus_hours_with_samples

HOUR = timedelta(hours=1)
# GPUs read and written per statement group: a few hundred keeps each read of raw samples
# to tens of thousands of rows and each transaction short.
GPUS_PER_CHUNK = 500
# GPU-hours looked at per refresh run (the rest wait for the next run, oldest first).
STALE_PER_RUN = 20_000

_GPU_COLUMNS = (
    "cluster_id",
    "node_id",
    "gpu_id",
    "hour",
    "job_id",
    "counter_j",
    "integrated_j",
    "model_j",
    "covered_s",
    "idle_j",
    "idle_s",
    "samples",
    "hour_samples",
    "computed_at",
)
_NODE_COLUMNS = (
    "cluster_id",
    "node_id",
    "hour",
    "ipmi_j",
    "ipmi_s",
    "model_j",
    "gpu_j",
    "computed_at",
)

# The cluster's job-hour sums of one hour, rewritten from its GPU-hour rows.
_JOB_HOUR_SQL = """
WITH gone AS (
    DELETE FROM energy_jobenergyhour WHERE cluster_id = %(cluster)s AND hour = %(hour)s
)
INSERT INTO energy_jobenergyhour
    (cluster_id, hour, job_id, gpus, counter_j, integrated_j, model_j, covered_s, idle_j, idle_s)
SELECT cluster_id, hour, job_id, count(DISTINCT gpu_id), sum(counter_j), sum(integrated_j),
    sum(model_j), sum(covered_s), sum(idle_j), sum(idle_s)
FROM energy_gpuenergyhour WHERE cluster_id = %(cluster)s AND hour = %(hour)s
GROUP BY cluster_id, hour, job_id
"""

# The month's version moves with the rows (same transaction): a report or export computed from
# the month is current while its version is (selectors.data_version).
_MONTH_VERSION_SQL = """
INSERT INTO energy_energymonthversion (cluster_id, month, version, changed_at)
VALUES (%(cluster)s, %(month)s, 1, now())
ON CONFLICT (cluster_id, month) DO UPDATE
SET version = energy_energymonthversion.version + 1, changed_at = excluded.changed_at
"""

_ALLOC_SQL = """
SELECT coalesce(a.gpu_id, g.id), a.job_id, extract(epoch FROM a.start)::float8,
    extract(epoch FROM a."end")::float8
FROM jobs_joballocation a
LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
WHERE a.start < %(hi)s AND (a."end" IS NULL OR a."end" > %(lo)s)
    AND coalesce(a.gpu_id, g.id) = ANY(%(ids)s)
ORDER BY a.start
"""

# What the rollup saw of each GPU-hour it accounted (telemetry's count when it read them).
_SEEN_SQL = """
SELECT gpu_id, hour, max(hour_samples) FROM energy_gpuenergyhour
WHERE hour >= %(since)s AND hour < %(until)s GROUP BY 1, 2
"""


def _stale_gpu_hours(since: datetime, until: datetime, limit: int) -> list[tuple[int, datetime]]:
    """The GPU-hours in [since, until) whose sample count (telemetry's) differs from the one
    they were accounted with, oldest first, at most `limit`; and the hour after each that
    has samples (its first interval starts with the previous hour's last sample)."""
    counts = gpus_hourly_sample_counts(since, until)
    with connection.cursor() as cur:
        cur.execute(_SEEN_SQL, {"since": since, "until": until})
        accounted = {(gpu_id, hour): n for gpu_id, hour, n in cur.fetchall()}
    changed = sorted(
        (key for key, n in counts.items() if accounted.get(key) != n),
        key=lambda key: (key[1], key[0]),
    )[:limit]
    stale = set(changed)
    stale.update((g, h + HOUR) for g, h in changed if (g, h + HOUR) in counts)
    return sorted(stale, key=lambda key: (key[1], key[0]))


@dataclass(frozen=True)
class RefreshResult:
    gpu_hours: int
    rows: int


def _epoch(t: datetime) -> float:
    return t.timestamp()


def _gpu_nodes(gpu_ids: list[int]) -> dict[int, tuple[int, int]]:
    """gpu id -> (node id, cluster id)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT g.id, n.id, n.cluster_id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
            " WHERE g.id = ANY(%s)",
            [gpu_ids],
        )
        return {g: (n, c) for g, n, c in cur.fetchall()}


def _allocations(ids: list[int], lo: datetime, hi: datetime) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = defaultdict(list)
    with connection.cursor() as cur:
        cur.execute(_ALLOC_SQL, {"ids": ids, "lo": lo, "hi": hi})
        for gpu_id, job_id, start, end in cur.fetchall():
            out[gpu_id].append((job_id, start, np.inf if end is None else end))
    return out


def _job_of(t1: np.ndarray, allocs: list[tuple]) -> np.ndarray:
    """The job holding the GPU at each interval end (0: none); a later allocation wins."""
    job = np.zeros(len(t1), dtype=np.int64)
    for job_id, start, end in allocs:
        job[(t1 >= start) & (t1 < end)] = job_id
    return job


def _gpu_hour_rows(gpu_id: int, where: tuple[int, int], hour: datetime, series, allocs, now):
    """Rollup rows of one GPU-hour, one per job that held it (and one for no job)."""
    node_id, cluster_id = where
    lo = _epoch(hour)
    iv = accounting.gpu_intervals(
        series.ts,
        series.energy_mj,
        series.power_w,
        power_limit_w=series.power_limit_w,
        util_pct=series.gpu_util,
    )
    hour_samples = int(np.count_nonzero(series.ts >= lo))
    in_hour = iv.t1 >= lo
    jobs = _job_of(iv.t1, allocs)
    keys, seg = np.unique(jobs, return_inverse=True)
    seg = np.where(in_hour, seg, -1)
    # Idle: utilization under the busy bound (the rule of the wasted-GPUs page); unknown
    # utilization is not called idle.
    util = series.gpu_util[np.searchsorted(series.ts, iv.t1)]
    busy = ~(util < settings.VIGIL_BUSY_UTIL_PCT)
    sums = accounting.segment_sums(iv, seg, len(keys), busy=busy)
    rows = []
    for k, job_id in enumerate(keys):
        if sums.samples[k] == 0:
            continue
        c, i, m = sums.energy_j[k]
        rows.append(
            (
                cluster_id,
                node_id,
                gpu_id,
                hour,
                int(job_id) or None,
                float(c),
                float(i),
                float(m),
                float(sums.covered_s[k]),
                float(sums.idle_j[k]),
                float(sums.idle_s[k]),
                int(sums.samples[k]),
                hour_samples,
                now,
            )
        )
    if not rows and hour_samples:
        # Only the sample opening the hour: remember it was seen, with no energy yet.
        rows.append(
            (cluster_id, node_id, gpu_id, hour, None, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 1, now)
        )
    return rows


def _node_hour_row(node: Node, hour: datetime, series, gpu_j: float, gpu_s: float, now):
    """Node IT energy of one hour: IPMI server power where measured, else the node power
    model over the seconds its GPUs were accounted."""
    lo = _epoch(hour)
    ipmi_j = ipmi_s = 0.0
    cpu_util = None
    if series is not None:
        iv = accounting.gpu_intervals(series.ts, None, series.server_power_w)
        sel = (iv.t1 >= lo) & (iv.method == accounting.INTEGRATED)
        ipmi_j = float(iv.energy_j[sel].sum())
        ipmi_s = float((iv.t1 - iv.t0)[sel].sum())
        cu = series.cpu_util[series.ts >= lo]
        cpu_util = float(np.nanmean(cu)) if np.isfinite(cu).any() else None
    model_j = 0.0
    rest_s = gpu_s - ipmi_s
    if rest_s > 0 and gpu_s > 0:
        gpu_w = gpu_j / gpu_s
        model_j = node_power_estimate_w(node, gpu_w, cpu_util) * rest_s
    return (node.cluster_id, node.id, hour, ipmi_j, ipmi_s, model_j, gpu_j, now)


def _copy_rows(cur, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    if not rows:
        return
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def gpu_hours_recompute(hour: datetime, gpu_ids: list[int]) -> int:
    """Recompute the energy rows of these GPUs in this hour, and their nodes' rows; returns
    the GPU rows written. One transaction per call: a reader sees old rows or new, never a
    half."""
    hour = hour.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hi = hour + HOUR
    now = timezone.now()
    where = _gpu_nodes(gpu_ids)
    ids = [g for g in gpu_ids if g in where]
    series = gpu_series(ids, hour, hi)
    allocs = _allocations(ids, hour, hi)
    rows: list[tuple] = []
    for gpu_id in ids:
        s = series.get(gpu_id)
        if s is not None:
            rows.extend(_gpu_hour_rows(gpu_id, where[gpu_id], hour, s, allocs.get(gpu_id, []), now))
    # Node totals: sum the GPU energy of every GPU of the node this hour (rows of other GPUs
    # of the node not recomputed now are read back from the table).
    node_ids = sorted({where[g][0] for g in ids})
    gpu_j: dict[int, float] = defaultdict(float)
    gpu_s: dict[int, float] = defaultdict(float)
    fresh = {r[2] for r in rows}
    for r in rows:
        gpu_j[r[1]] += r[5] + r[6] + r[7]
        gpu_s[r[1]] += r[8]
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "DELETE FROM energy_gpuenergyhour WHERE hour = %s AND gpu_id = ANY(%s)", [hour, ids]
        )
        cur.execute(
            "SELECT node_id, sum(counter_j + integrated_j + model_j), sum(covered_s)"
            " FROM energy_gpuenergyhour WHERE hour = %s AND node_id = ANY(%s)"
            " AND NOT gpu_id = ANY(%s) GROUP BY node_id",
            [hour, node_ids, list(fresh)],
        )
        for node_id, j, s in cur.fetchall():
            gpu_j[node_id] += j
            gpu_s[node_id] += s
        _copy_rows(cur.cursor, "energy_gpuenergyhour", _GPU_COLUMNS, rows)
        # Node-seconds of GPU coverage: the mean over the node's GPUs (a node-hour is 3600 s
        # however many GPUs it has).
        cur.execute(
            "SELECT node_id, count(*) FROM fleet_gpu WHERE node_id = ANY(%s) GROUP BY node_id",
            [node_ids],
        )
        gpus_per_node = dict(cur.fetchall())
        nodes = Node.objects.in_bulk(node_ids)
        nseries = node_series(node_ids, hour, hi)
        node_rows = []
        for node_id in node_ids:
            per_gpu_s = gpu_s[node_id] / gpus_per_node.get(node_id, 1)
            node_rows.append(
                _node_hour_row(
                    nodes[node_id], hour, nseries.get(node_id), gpu_j[node_id], per_gpu_s, now
                )
            )
        cur.execute(
            "DELETE FROM energy_nodeenergyhour WHERE hour = %s AND node_id = ANY(%s)",
            [hour, node_ids],
        )
        _copy_rows(cur.cursor, "energy_nodeenergyhour", _NODE_COLUMNS, node_rows)
        for cluster_id in sorted({where[g][1] for g in ids}):
            cur.execute(_JOB_HOUR_SQL, {"cluster": cluster_id, "hour": hour})
            cur.execute(_MONTH_VERSION_SQL, {"cluster": cluster_id, "month": month_key(hour)})
    return len(rows)


def energy_rollups_refresh(now: datetime | None = None) -> RefreshResult:
    """Recompute the ended GPU-hours whose raw samples changed since they were last
    accounted (within VIGIL_ENERGY_LOOKBACK_H), oldest first, at most STALE_PER_RUN."""
    now = now or timezone.now()
    since = (now - timedelta(hours=settings.VIGIL_ENERGY_LOOKBACK_H)).replace(
        minute=0, second=0, microsecond=0
    )
    # Only hours that have ended: the current one would look stale at every run (its samples
    # keep coming) and cost a full read of it each time; it is accounted once it closes.
    until = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    stale = _stale_gpu_hours(since, until, STALE_PER_RUN)
    by_hour: dict[datetime, list[int]] = defaultdict(list)
    for gpu_id, hour in stale:
        by_hour[hour].append(gpu_id)
    rows = 0
    for hour in sorted(by_hour):
        ids = sorted(by_hour[hour])
        for i in range(0, len(ids), GPUS_PER_CHUNK):
            rows += gpu_hours_recompute(hour, ids[i : i + GPUS_PER_CHUNK])
    return RefreshResult(len(stale), rows)


def energy_rollups_rebuild(cluster_id: int, lo: datetime, hi: datetime) -> RefreshResult:
    """Recompute a cluster's GPU-hours in [lo, hi) from its samples, raw or compacted (a
    backfill, or after allocations were corrected). Only hours that still have samples are
    touched: an hour whose samples retention has dropped keeps the rows it has."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT g.id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
            " WHERE n.cluster_id = %s ORDER BY g.id",
            [cluster_id],
        )
        ids = [r[0] for r in cur.fetchall()]
    # Hours with samples, raw or compacted (telemetry packs old hours, one row per GPU).
    hours = gpus_hours_with_samples(ids, lo, hi)
    rows = 0
    for hour in hours:
        for i in range(0, len(ids), GPUS_PER_CHUNK):
            rows += gpu_hours_recompute(hour, ids[i : i + GPUS_PER_CHUNK])
    return RefreshResult(len(hours) * len(ids), rows)
