"""A small fleet seeded through the real ingest path (`samples_ingest` + `make_batch`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest
from django.db import connection, transaction

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Gpu, Node
from webapp.telemetry import services as telemetry_services
from webapp.telemetry.services import samples_ingest

MODEL = "NVIDIA H100 80GB HBM3"


def _col(name: str) -> int:
    return 2 + GPU_FIELD_NAMES.index(name)  # a wire row is [index, ts, *GPU_FIELDS]


def seed_node(
    cluster: str,
    hostname: str,
    *,
    utils: list[float],
    powers: list[float] | None = None,
    t0: float | None = None,
    intervals: int = 3,
    step_s: float = 10.0,
    latest: dict[int, dict[str, float | int]] | None = None,
) -> Node:
    """Ingest `intervals` samples per GPU; only the newest carries `utils`, `powers`, `latest`.

    Older samples show util 1 % and 100 W, so a page showing them instead of the newest one
    is caught.
    """
    token = fleet_services.node_token_issue(cluster, hostname)
    batch = make_batch(
        cluster,
        hostname,
        token,
        t0=t0,
        intervals=intervals,
        step_s=step_s,
        gpus=len(utils),
        uuid_prefix=f"GPU-{cluster}-{hostname}",
    )
    newest = max(row[1] for row in batch["samples"])
    for row in batch["samples"]:
        index = row[0]
        if row[1] == newest:
            row[_col("gpu_util")] = utils[index]
            row[_col("power_w")] = powers[index] if powers else 300.0
            for name, value in (latest or {}).get(index, {}).items():
                row[_col(name)] = value
        else:
            row[_col("gpu_util")] = 1.0
            row[_col("power_w")] = 100.0
    samples_ingest(json.dumps(batch))
    rollups_current()
    return Node.objects.get(cluster__name=cluster, hostname=hostname)


def rollups_current() -> None:
    """Bring the 1-minute rollup up to date, as the periodic refresh does in production.

    Ingest folds samples into the rollup in its own transaction today; where the rollup is
    refreshed by a separate service (`rollups_refresh`), call it, so day-range views see data.
    """
    refresh = getattr(telemetry_services, "rollups_refresh", None)
    if refresh is not None:
        refresh()


@dataclass
class SmallFleet:
    """alpha: a-01 fresh (4 busy, 2 idle, 2 erroring), a-02 stale (8); beta: b-01 4 busy."""

    a01: Node
    a02: Node
    b01: Node

    def gpu(self, node: Node, index: int) -> Gpu:
        return Gpu.objects.get(node=node, index=index)


def seed_small_fleet() -> SmallFleet:
    a01 = seed_node(
        "alpha",
        "gpu-a-01",
        utils=[95, 90, 85, 80, 5, 0, 60, 70],
        powers=[650, 640, 630, 620, 90, 80, 500, 510],
        # GPU 2: double-bit ECC errors since reset; GPU 3: a row remap waits for a reset.
        latest={2: {"ecc_dbe_vol": 1}, 3: {"remap_pending": 1}},
    )
    # Last heard from 15 minutes ago: every GPU is stale.
    a02 = seed_node("alpha", "gpu-a-02", utils=[50] * 8, t0=time.time() - 900)
    b01 = seed_node("beta", "gpu-b-01", utils=[100] * 4, powers=[700] * 4)
    return SmallFleet(a01, a02, b01)


@pytest.fixture
def small_fleet(db) -> SmallFleet:
    return seed_small_fleet()


def plan_json(sql: str, *, index_only: bool = False) -> dict:
    """The plan PostgreSQL makes for `sql` (EXPLAIN, not run), as its JSON root node.

    With `index_only`, sequential and bitmap scans are priced out for this one EXPLAIN: on
    the tiny tables of a test the planner's choice between a whole-partition scan and an index
    range depends on statistics autovacuum may or may not have gathered yet, so a test that
    wants to know whether a query *can* be served by an index range asks this way. A query
    whose conditions no index can serve still plans a Seq Scan (at a disabled cost), so the
    assertion keeps its teeth."""
    with transaction.atomic(), connection.cursor() as cur:
        if index_only:
            cur.execute("SET LOCAL enable_seqscan = off")
            cur.execute("SET LOCAL enable_bitmapscan = off")
        cur.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        plan = cur.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]["Plan"]


def plan_scans(sql: str, *, index_only: bool = False) -> list[tuple[str, str]]:
    """(node type, relation) of every scan in the plan PostgreSQL makes for `sql` (EXPLAIN,
    not run): which tables and partitions a query reads, and how."""
    plan = plan_json(sql, index_only=index_only)
    scans: list[tuple[str, str]] = []

    def walk(node: dict) -> None:
        if "Relation Name" in node:
            scans.append((node["Node Type"], node["Relation Name"]))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    return scans


def partitions_of(table: str, scans: list[tuple[str, str]]) -> set[str]:
    """The partitions of `table` among `scans`."""
    return {rel for _, rel in scans if rel.startswith(f"{table}_p")}
