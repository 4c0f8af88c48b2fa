"""The fleet overview's payload at any fleet size: only what the page draws, once.

The overview composes telemetry (each GPU's latest sample), fleet (each node's state) and jobs
(which job holds each GPU now), so it lives above all three.

The page (static/telemetry/overview.js) draws one heatmap per cluster from a compact grid: per
cell the few numbers its colour and hover need, as flat arrays. Hover text, cell positions and
the node links are built in the browser from those, so no string is sent once per cell, and
nothing is sent that no cell shows (UUIDs, models).

Up to GPU_CELLS_MAX GPUs in a cluster there is one cell per GPU, one row per node, labelled
with its hostname (and its state when it is not up), in `columns` columns of nodes side by
side. Above it one cell per node (its GPUs' mean utilization, and how many are busy, idle,
erroring and stale), in rows of `per_row` nodes, and a click on a node opens its page, where
every GPU is. A 4,704-GPU fleet (two clusters of 2,352) stays per GPU; at 47,040 GPUs a cell per
GPU is 23,520 cells of a few pixels each that no one can point at, and the payload is ten times
larger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from webapp.core.charts import plain
from webapp.core.units import GIB, iso_utc
from webapp.fleet.choices import SCHEDULER_OUT_OF_SERVICE, NodeState
from webapp.fleet.selectors import node_state_now
from webapp.jobs.selectors import GpuHolder
from webapp.telemetry.choices import GpuStatus
from webapp.telemetry.selectors import ClusterSummary, LatestGpu, gpu_status

GPU_CELLS_MAX = 8192
# Columns of nodes at the GPU level: each node a labelled row of its GPUs; four columns of 8
# GPUs and a hostname fill a 1,280 px card with cells about 20 px wide.
GPU_LEVEL_COLUMNS = 4
# Node cells per heatmap row at the node level (a row is labelled with its first and last node).
NODE_LEVEL_PER_ROW = 64
# One letter per GPU status in the payload (overview.js has the same table).
STATUS_CODES: dict[str, str] = {
    GpuStatus.BUSY: "b",
    GpuStatus.IDLE: "i",
    GpuStatus.ERRORING: "e",
    GpuStatus.STALE: "s",
}
# Idle GPUs a job holds: a colour the utilization scale (Viridis) does not have, so a held GPU
# doing nothing cannot pass for a free one.
HELD_IDLE_COLOUR = "#e377c2"


def _round(value: float | int | None, digits: int = 0) -> float | int | None:
    if value is None:
        return None
    return round(value) if digits == 0 else round(value, digits)


@dataclass(frozen=True)
class _Node:
    id: int
    hostname: str
    state: str  # "" when up, else the NodeState value (drained, draining, down, stale, ...)
    gpus: list[LatestGpu]


def _nodes(gpus: list[LatestGpu], now: datetime, holders: dict[int, GpuHolder]) -> list[_Node]:
    by_node: dict[int, list[LatestGpu]] = {}
    for g in gpus:
        by_node.setdefault(g.node_id, []).append(g)
    nodes = []
    for node_id, mine in by_node.items():
        first = mine[0]
        runs_jobs = any(g.gpu_id in holders for g in mine)
        state = node_state_now(first.node_state, first.node_seen, now, runs_jobs=runs_jobs)
        nodes.append(
            _Node(
                node_id,
                first.hostname,
                "" if state == NodeState.UP else str(state),
                sorted(mine, key=lambda g: g.index),
            )
        )
    return sorted(nodes, key=lambda n: n.hostname)


def gpu_grid(
    gpus: list[LatestGpu], busy_util_pct: float, holders: dict[int, GpuHolder], now: datetime
) -> dict:
    """One cell per GPU: `width` slots per node (the most GPUs on any node), flat arrays of
    nodes x width in node order; an empty slot is null (and "-" in `status`). `held` gives a
    slot's job as an index into `jobs` ([scheduler id, name, user]), null when no job holds it."""
    nodes = _nodes(gpus, now, holders)
    width = max((g.index for g in gpus), default=-1) + 1
    slots = len(nodes) * width
    util: list[float | None] = [None] * slots
    sm: list[float | None] = [None] * slots
    power: list[float | None] = [None] * slots
    temp: list[float | None] = [None] * slots
    mem: list[float | None] = [None] * slots
    held: list[int | None] = [None] * slots
    jobs: dict[int, int] = {}  # job id -> its index in `jobs_out`
    jobs_out: list[list[str]] = []
    status = ["-"] * slots
    for n, node in enumerate(nodes):
        for g in node.gpus:
            i = n * width + g.index
            holder = holders.get(g.gpu_id)
            if holder is not None:
                if holder.job_id not in jobs:
                    jobs[holder.job_id] = len(jobs_out)
                    # Shown in Plotly hover text, which reads <a href>, <b>: escaped.
                    jobs_out.append(
                        [plain(holder.scheduler_id), plain(holder.name), plain(holder.user)]
                    )
                held[i] = jobs[holder.job_id]
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
        "columns": GPU_LEVEL_COLUMNS,
        "width": width,
        "hosts": [plain(n.hostname) for n in nodes],
        "node_ids": [n.id for n in nodes],
        "states": [n.state for n in nodes],
        "status": "".join(status),
        "util": util,
        "sm": sm,
        "power": power,
        "temp": temp,
        "mem": mem,
        "held": held,
        "jobs": jobs_out,
    }


def node_grid(
    gpus: list[LatestGpu], busy_util_pct: float, holders: dict[int, GpuHolder], now: datetime
) -> dict:
    """One cell per node: mean utilization of its reporting GPUs, its GPUs per status (as
    [busy, idle, erroring, stale]), how many of its idle GPUs a job holds, its GPUs' power now
    (W) and its state ("" when up)."""
    nodes = _nodes(gpus, now, holders)
    util: list[float | None] = []
    counts: list[list[int]] = []
    held_idle: list[int] = []
    power: list[int] = []
    codes = list(STATUS_CODES)
    for node in nodes:
        by_status = dict.fromkeys(codes, 0)
        shown, shown_n, power_w, idle_held = 0.0, 0, 0.0, 0
        for g in node.gpus:
            st = gpu_status(g.ts, g.values, busy_util_pct)
            by_status[st] += 1
            if st == GpuStatus.STALE:
                continue
            if st == GpuStatus.IDLE and g.gpu_id in holders:
                idle_held += 1
            u = g.values.get("gpu_util")
            if u is not None:
                shown += u
                shown_n += 1
            power_w += g.values.get("power_w") or 0
        util.append(round(shown / shown_n) if shown_n else None)
        counts.append([by_status[s] for s in codes])
        held_idle.append(idle_held)
        power.append(round(power_w))
    return {
        "level": "node",
        "per_row": NODE_LEVEL_PER_ROW,
        "width": 1,
        "hosts": [plain(n.hostname) for n in nodes],
        "node_ids": [n.id for n in nodes],
        "states": [n.state for n in nodes],
        "util": util,
        "counts": counts,
        "held_idle": held_idle,
        "power": power,
    }


def overview_payload(
    summaries: list[ClusterSummary],
    gpus: list[LatestGpu],
    *,
    holders: dict[int, GpuHolder],
    now: datetime,
    node_url: Callable[[int], str],
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
        grid = (gpu_grid if len(mine) <= gpu_cells_max else node_grid)(
            mine, busy_util_pct, holders, now
        )
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
        "generated_at": now.isoformat(),
        "busy_util_pct": busy_util_pct,
        "stale_after_s": stale_after_s,
        "node_url": node_url(0),
        "out_of_service": list(SCHEDULER_OUT_OF_SERVICE),
        "clusters": clusters,
    }


def gpus_list(
    gpus: list[LatestGpu],
    holders: dict[int, GpuHolder],
    now: datetime,
    node_url: Callable[[int], str],
    metrics: tuple,
) -> list:
    """Every GPU with its latest values, its node's state and the job holding it, for scripts
    (`overview.json?gpus=1`); the page does not read it."""
    out = []
    running_nodes = {g.node_id for g in gpus if g.gpu_id in holders}
    for g in gpus:
        holder = holders.get(g.gpu_id)
        out.append(
            {
                "cluster": g.cluster,
                "node": g.hostname,
                "node_url": node_url(g.node_id),
                "node_state": node_state_now(
                    g.node_state, g.node_seen, now, runs_jobs=g.node_id in running_nodes
                ),
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "status": g.status,
                "job": holder.scheduler_id if holder else None,
                "ts": iso_utc(g.ts),
                **{name: g.value(name) for name in metrics},
            }
        )
    return out
