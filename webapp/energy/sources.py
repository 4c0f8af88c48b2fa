"""Where the energy rollup reads samples. GPU samples come through telemetry's one reader
(`webapp.telemetry.samples.gpu_samples`), raw or compacted alike; node samples are raw (they
are not compacted: one row per node, an eighth of the GPU rows).

Both readers return, per GPU (or node), numpy arrays ordered by time, and include the last
sample before `lo` (within PREVIOUS_LOOKBACK) so the interval that crosses into the window is
accounted in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from django.db import connection

from webapp.telemetry.packing import Column
from webapp.telemetry.samples import gpu_samples

# How far before a window the previous sample is looked for. A longer silence is a gap whose
# energy the counter alone could measure; one hour keeps the read to at most two partitions
# and covers collector restarts and short outages.
PREVIOUS_LOOKBACK = timedelta(hours=1)
_GPU_FIELDS = ("energy_mj", "power_w", "power_limit_w", "gpu_util")


@dataclass(frozen=True)
class GpuSeries:
    ts: np.ndarray  # epoch seconds
    energy_mj: np.ndarray  # NaN where the GPU had no counter
    power_w: np.ndarray
    power_limit_w: np.ndarray
    gpu_util: np.ndarray


@dataclass(frozen=True)
class NodeSeries:
    ts: np.ndarray
    server_power_w: np.ndarray  # NaN where IPMI gave nothing
    cpu_util: np.ndarray


_NODE_SQL = """
SELECT s.node_id, extract(epoch FROM s.ts)::float8, s.server_power_w, s.cpu_util
FROM telemetry_nodesample s
WHERE s.node_id = ANY(%(ids)s) AND s.ts >= %(lo)s AND s.ts < %(hi)s
UNION ALL
SELECT n, p.* FROM unnest(%(ids)s::bigint[]) AS n
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM s.ts)::float8, s.server_power_w, s.cpu_util
    FROM telemetry_nodesample s
    WHERE s.node_id = n AND s.ts < %(lo)s AND s.ts >= %(before)s
    ORDER BY s.ts DESC LIMIT 1
) p
"""


def _grouped(sql: str, ids: Sequence[int], lo: datetime, hi: datetime) -> dict[int, np.ndarray]:
    params = {"ids": list(ids), "lo": lo, "hi": hi, "before": lo - PREVIOUS_LOOKBACK}
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    if not rows:
        return {}
    arr = np.array(rows, dtype=np.float64)  # None -> NaN
    arr = arr[np.lexsort((arr[:, 1], arr[:, 0]))]
    keys, starts = np.unique(arr[:, 0], return_index=True)
    bounds = [*starts[1:], len(arr)]
    return {int(k): arr[s:e, 1:] for k, s, e in zip(keys, starts, bounds, strict=True)}


def gpu_series(gpu_ids: Sequence[int], lo: datetime, hi: datetime) -> dict[int, GpuSeries]:
    """GPU samples of [lo, hi) and the one before lo, per GPU id (absent: no samples), raw
    or compacted alike (telemetry's one reader of samples)."""
    found = gpu_samples(gpu_ids, lo - PREVIOUS_LOOKBACK, hi, _GPU_FIELDS)
    lo_us = int(lo.timestamp() * 1_000_000)
    out = {}
    for gpu_id, u in found.items():
        # From the last sample before lo on: the interval crossing lo belongs to this window.
        first = max(int(np.searchsorted(u.ts_us, lo_us)) - 1, 0)
        cols = [_float64(u.columns[name], first) for name in _GPU_FIELDS]
        out[gpu_id] = GpuSeries(u.ts_us[first:] / 1e6, *cols)
    return out


def _float64(column: Column, first: int) -> np.ndarray:
    """A sample column as float64 from index `first`, NaN where the sample had NULL."""
    values = column.values[first:].astype(np.float64)
    if column.valid is not None:
        values[~column.valid[first:]] = np.nan
    return values


def node_series(node_ids: Sequence[int], lo: datetime, hi: datetime) -> dict[int, NodeSeries]:
    """Raw node samples of [lo, hi) and the one before lo, per node id."""
    out = {}
    for node_id, a in _grouped(_NODE_SQL, node_ids, lo, hi).items():
        out[node_id] = NodeSeries(a[:, 0], a[:, 1], a[:, 2])
    return out
