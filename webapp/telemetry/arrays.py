"""Samples as arrays, for the energy rollup that accounts samples itself (counter deltas with a
plausibility check, power integration): GPU and node samples over a window with the one
before it, and which GPU-hours hold samples. Part of the read API `selectors.py` re-exports."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from django.db import connection

from collectors.schema import NODE_FIELD_NAMES
from webapp.telemetry import tiers
from webapp.telemetry.packing import Column
from webapp.telemetry.samples import RAW, gpu_samples

# --- Sample arrays, for readers that account samples themselves (energy) -----------------------


@dataclass(frozen=True)
class SampleArrays:
    """One GPU's or node's samples ordered by time: `ts` in epoch seconds and one float64
    array per field, NaN where the sample had no value."""

    ts: np.ndarray
    values: dict[str, np.ndarray]


def _float64(column: Column, first: int) -> np.ndarray:
    values = column.values[first:].astype(np.float64)
    if column.valid is not None:
        values[~column.valid[first:]] = np.nan
    return values


def gpus_sample_arrays(
    gpu_ids: Sequence[int],
    lo: datetime,
    hi: datetime,
    fields: Sequence[str],
    *,
    previous: timedelta,
) -> dict[int, SampleArrays]:
    """Each GPU's samples with lo <= ts < hi, raw or compacted alike, and its last sample
    before lo (looked for within `previous`), so the interval that crosses into the window
    can be accounted in it. {gpu_id: arrays} for the GPUs with samples."""
    found = gpu_samples(gpu_ids, lo - previous, hi, fields)
    lo_us = int(lo.timestamp() * 1_000_000)
    out = {}
    for gpu_id, u in found.items():
        first = max(int(np.searchsorted(u.ts_us, lo_us)) - 1, 0)
        values = {name: _float64(u.columns[name], first) for name in fields}
        out[gpu_id] = SampleArrays(u.ts_us[first:] / 1e6, values)
    return out


_NODE_SAMPLES_SQL = """
SELECT s.node_id, extract(epoch FROM s.ts)::float8, {fields}
FROM telemetry_nodesample s
WHERE s.node_id = ANY(%(ids)s) AND s.ts >= %(lo)s AND s.ts < %(hi)s
UNION ALL
SELECT n, p.* FROM unnest(%(ids)s::bigint[]) AS n
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM s.ts)::float8, {fields}
    FROM telemetry_nodesample s
    WHERE s.node_id = n AND s.ts < %(lo)s AND s.ts >= %(before)s
    ORDER BY s.ts DESC LIMIT 1
) p
"""


def nodes_sample_arrays(
    node_ids: Sequence[int],
    lo: datetime,
    hi: datetime,
    fields: Sequence[str],
    *,
    previous: timedelta,
) -> dict[int, SampleArrays]:
    """Each node's samples with lo <= ts < hi and its last one before lo (within
    `previous`), as gpus_sample_arrays does for GPUs. Node samples are never compacted."""
    unknown = [f for f in fields if f not in NODE_FIELD_NAMES]
    if unknown or not fields:
        raise ValueError(f"not a node sample field: {(unknown or [''])[0]!r}")
    params = {"ids": list(node_ids), "lo": lo, "hi": hi, "before": lo - previous}
    sql = _NODE_SAMPLES_SQL.format(fields=", ".join(f"s.{f}" for f in fields))
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    if not rows:
        return {}
    arr = np.array(rows, dtype=np.float64)  # None -> NaN
    arr = arr[np.lexsort((arr[:, 1], arr[:, 0]))]
    keys, starts = np.unique(arr[:, 0], return_index=True)
    bounds = [*starts[1:], len(arr)]
    return {
        int(k): SampleArrays(arr[s:e, 1], {f: arr[s:e, 2 + n] for n, f in enumerate(fields)})
        for k, s, e in zip(keys, starts, bounds, strict=True)
    }


def gpus_hourly_sample_counts(since: datetime, until: datetime) -> dict[tuple[int, datetime], int]:
    """How many samples each GPU-hour from `since` to before `until` holds, from the
    1-minute rollup's counts (kept in step with ingest): {(gpu_id, hour): samples}. A reader
    that accounts GPU-hours compares them with the counts it saw, to find what changed."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT gpu_id, date_trunc('hour', minute), sum(n)::bigint "
            f"FROM {tiers.MINUTE.table} WHERE minute >= %s AND minute < %s GROUP BY 1, 2",
            [since, until],
        )
        return {(gpu_id, hour): n for gpu_id, hour, n in cur.fetchall()}


def gpus_hours_with_samples(gpu_ids: Sequence[int], lo: datetime, hi: datetime) -> list[datetime]:
    """The hours within lo..hi (lo <= ts < hi) in which any of these GPUs has a sample, raw
    or compacted, oldest first."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT date_trunc('hour', ts) FROM {RAW}"
            " WHERE gpu_id = ANY(%(ids)s) AND ts >= %(lo)s AND ts < %(hi)s"
            " UNION SELECT hour FROM telemetry_gpusamplepacked"
            " WHERE gpu_id = ANY(%(ids)s) AND hour >= %(lo)s AND hour < %(hi)s ORDER BY 1",
            {"ids": list(gpu_ids), "lo": lo, "hi": hi},
        )
        return [r[0] for r in cur.fetchall()]
