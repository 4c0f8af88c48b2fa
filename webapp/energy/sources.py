"""Where the energy rollup reads raw samples: the one place to switch when old raw samples
are compacted (webapp/telemetry: one reader for raw and compacted samples).

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

# How far before a window the previous sample is looked for. A longer silence is a gap whose
# energy the counter alone could measure; one hour keeps the read to at most two partitions
# and covers collector restarts and short outages.
PREVIOUS_LOOKBACK = timedelta(hours=1)


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


_GPU_SQL = """
SELECT s.gpu_id, extract(epoch FROM s.ts)::float8, s.energy_mj::float8, s.power_w,
    s.power_limit_w, s.gpu_util
FROM telemetry_gpusample s
WHERE s.gpu_id = ANY(%(ids)s) AND s.ts >= %(lo)s AND s.ts < %(hi)s
UNION ALL
SELECT g, p.* FROM unnest(%(ids)s::bigint[]) AS g
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM s.ts)::float8, s.energy_mj::float8, s.power_w, s.power_limit_w,
        s.gpu_util
    FROM telemetry_gpusample s
    WHERE s.gpu_id = g AND s.ts < %(lo)s AND s.ts >= %(before)s
    ORDER BY s.ts DESC LIMIT 1
) p
"""

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
    """Raw GPU samples of [lo, hi) and the one before lo, per GPU id (absent: no samples)."""
    out = {}
    for gpu_id, a in _grouped(_GPU_SQL, gpu_ids, lo, hi).items():
        out[gpu_id] = GpuSeries(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4])
    return out


def node_series(node_ids: Sequence[int], lo: datetime, hi: datetime) -> dict[int, NodeSeries]:
    """Raw node samples of [lo, hi) and the one before lo, per node id."""
    out = {}
    for node_id, a in _grouped(_NODE_SQL, node_ids, lo, hi).items():
        out[node_id] = NodeSeries(a[:, 0], a[:, 1], a[:, 2])
    return out
