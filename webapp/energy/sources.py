"""Where the energy rollup reads samples: telemetry's sample arrays (raw or compacted GPU
samples alike; node samples are never compacted), through `webapp.telemetry.selectors`.

Both readers return, per GPU (or node), numpy arrays ordered by time, and include the last
sample before `lo` (within PREVIOUS_LOOKBACK) so the interval that crosses into the window is
accounted in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from webapp.telemetry.selectors import gpus_sample_arrays, nodes_sample_arrays

# How far before a window the previous sample is looked for. A longer silence is a gap whose
# energy the counter alone could measure; one hour keeps the read to at most two partitions
# and covers collector restarts and short outages.
PREVIOUS_LOOKBACK = timedelta(hours=1)
_GPU_FIELDS = ("energy_mj", "power_w", "power_limit_w", "gpu_util")
_NODE_FIELDS = ("server_power_w", "cpu_util")


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


def gpu_series(gpu_ids: Sequence[int], lo: datetime, hi: datetime) -> dict[int, GpuSeries]:
    """GPU samples of [lo, hi) and the one before lo, per GPU id (absent: no samples), raw
    or compacted alike."""
    found = gpus_sample_arrays(gpu_ids, lo, hi, _GPU_FIELDS, previous=PREVIOUS_LOOKBACK)
    return {
        gpu_id: GpuSeries(a.ts, *(a.values[name] for name in _GPU_FIELDS))
        for gpu_id, a in found.items()
    }


def node_series(node_ids: Sequence[int], lo: datetime, hi: datetime) -> dict[int, NodeSeries]:
    """Node samples of [lo, hi) and the one before lo, per node id."""
    found = nodes_sample_arrays(node_ids, lo, hi, _NODE_FIELDS, previous=PREVIOUS_LOOKBACK)
    return {
        node_id: NodeSeries(a.ts, *(a.values[name] for name in _NODE_FIELDS))
        for node_id, a in found.items()
    }
