"""The fleet overview's payload at any fleet size: only what the page draws, once.

The page (static/telemetry/overview.js) draws one heatmap per cluster from a compact grid: the
nodes in rows of `per_row`, and per cell the few numbers its colour and hover need, as flat
arrays. Hover text, cell positions and the node links are built in the browser from those, so
no string is sent once per cell, and nothing is sent that no cell shows (UUIDs, models).

Up to GPU_CELLS_MAX GPUs in a cluster there is one cell per GPU; above it one cell per node
(its GPUs' mean utilization, and how many are busy, idle, erroring and stale), and a click on a
node opens its page, where every GPU is. A 4,704-GPU fleet (two clusters of
2,352) stays per GPU; at 47,040 GPUs a cell per GPU is 23,520 cells of a few pixels each that
no one can point at, and the payload is ten times larger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webapp.core.units import GIB, iso_utc
from webapp.telemetry.choices import GpuStatus
from webapp.telemetry.selectors import ClusterSummary, LatestGpu, gpu_status

GPU_CELLS_MAX = 8192
# Nodes per heatmap row: 16 nodes of 8 GPUs (plus a gap column each) are 144 cells, about 8 px
# each on a 1,280 px wide card; 64 node cells per row at the node level.
GPU_LEVEL_PER_ROW = 16
NODE_LEVEL_PER_ROW = 64
# One letter per GPU status in the payload (overview.js has the same table).
STATUS_CODES: dict[str, str] = {
    GpuStatus.BUSY: "b",
    GpuStatus.IDLE: "i",
    GpuStatus.ERRORING: "e",
    GpuStatus.STALE: "s",
}


def _round(value: float | int | None, digits: int = 0) -> float | int | None:
    if value is None:
        return None
    return round(value) if digits == 0 else round(value, digits)


@dataclass(frozen=True)
class _Node:
    id: int
    hostname: str
    gpus: list[LatestGpu]


def _nodes(gpus: list[LatestGpu]) -> list[_Node]:
    by_node: dict[int, list[LatestGpu]] = {}
    names: dict[int, str] = {}
    for g in gpus:
        by_node.setdefault(g.node_id, []).append(g)
        names[g.node_id] = g.hostname
    return [
        _Node(node_id, names[node_id], sorted(mine, key=lambda g: g.index))
        for node_id, mine in sorted(by_node.items(), key=lambda kv: names[kv[0]])
    ]


def gpu_grid(gpus: list[LatestGpu], busy_util_pct: float) -> dict:
    """One cell per GPU: `width` slots per node (the most GPUs on any node), flat arrays of
    nodes x width in node order; an empty slot is null (and "-" in `status`)."""
    nodes = _nodes(gpus)
    width = max((g.index for g in gpus), default=-1) + 1
    slots = len(nodes) * width
    util: list[float | None] = [None] * slots
    sm: list[float | None] = [None] * slots
    power: list[float | None] = [None] * slots
    temp: list[float | None] = [None] * slots
    mem: list[float | None] = [None] * slots
    status = ["-"] * slots
    for n, node in enumerate(nodes):
        for g in node.gpus:
            i = n * width + g.index
            st = gpu_status(g.ts, g.values, busy_util_pct)
            status[i] = STATUS_CODES[st]
            if st == GpuStatus.STALE:
                continue
            util[i] = _round(g.value("gpu_util"))
            s = g.value("sm_active")
            sm[i] = _round(s * 100 if s is not None else None)
            power[i] = _round(g.value("power_w"))
            temp[i] = _round(g.value("gpu_temp_c"))
            m = g.value("fb_used_bytes")
            mem[i] = _round(m / GIB if m is not None else None, 1)
    return {
        "level": "gpu",
        "per_row": GPU_LEVEL_PER_ROW,
        "width": width,
        "hosts": [n.hostname for n in nodes],
        "node_ids": [n.id for n in nodes],
        "status": "".join(status),
        "util": util,
        "sm": sm,
        "power": power,
        "temp": temp,
        "mem": mem,
    }


def node_grid(gpus: list[LatestGpu], busy_util_pct: float) -> dict:
    """One cell per node: mean utilization of its reporting GPUs, its GPUs per status (as
    [busy, idle, erroring, stale]) and its GPUs' power now (W)."""
    nodes = _nodes(gpus)
    util: list[float | None] = []
    counts: list[list[int]] = []
    power: list[int] = []
    codes = list(STATUS_CODES)
    for node in nodes:
        by_status = dict.fromkeys(codes, 0)
        shown, shown_n, power_w = 0.0, 0, 0.0
        for g in node.gpus:
            st = gpu_status(g.ts, g.values, busy_util_pct)
            by_status[st] += 1
            if st == GpuStatus.STALE:
                continue
            u = g.values.get("gpu_util")
            if u is not None:
                shown += u
                shown_n += 1
            power_w += g.values.get("power_w") or 0
        util.append(round(shown / shown_n) if shown_n else None)
        counts.append([by_status[s] for s in codes])
        power.append(round(power_w))
    return {
        "level": "node",
        "per_row": NODE_LEVEL_PER_ROW,
        "width": 1,
        "hosts": [n.hostname for n in nodes],
        "node_ids": [n.id for n in nodes],
        "util": util,
        "counts": counts,
        "power": power,
    }


def overview_payload(
    summaries: list[ClusterSummary],
    gpus: list[LatestGpu],
    *,
    node_url: Callable[[int], str],
    generated_at: str,
    busy_util_pct: float,
    stale_after_s: int,
    gpu_cells_max: int = GPU_CELLS_MAX,
) -> dict:
    """Counts and one grid per cluster; `node_url` (the URL of node 0) is sent once."""
    by_cluster: dict[int, list[LatestGpu]] = {}
    for g in gpus:
        by_cluster.setdefault(g.cluster_id, []).append(g)
    clusters = []
    for s in summaries:
        mine = by_cluster.get(s.id, [])
        grid = (gpu_grid if len(mine) <= gpu_cells_max else node_grid)(mine, busy_util_pct)
        clusters.append(
            {
                "name": s.name,
                "gpus": s.gpus,
                "nodes": s.nodes,
                "busy": s.busy,
                "idle": s.idle,
                "erroring": s.erroring,
                "stale": s.stale,
                "power_kw": round(s.power_kw, 3),
                "grid": grid,
            }
        )
    return {
        "generated_at": generated_at,
        "busy_util_pct": busy_util_pct,
        "stale_after_s": stale_after_s,
        "node_url": node_url(0),
        "clusters": clusters,
    }


def gpus_list(gpus: list[LatestGpu], node_url: Callable[[int], str], metrics: tuple) -> list:
    """Every GPU with its latest values, for scripts (`overview.json?gpus=1`); the page does not
    read it."""
    return [
        {
            "cluster": g.cluster,
            "node": g.hostname,
            "node_url": node_url(g.node_id),
            "index": g.index,
            "uuid": g.uuid,
            "model": g.model,
            "status": g.status,
            "ts": iso_utc(g.ts),
            **{name: g.value(name) for name in metrics},
        }
        for g in gpus
    ]
