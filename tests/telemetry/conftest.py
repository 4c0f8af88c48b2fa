"""Telemetry fixtures: a small fleet seeded through the real ingest path (the factory's
`samples_send`), and what PostgreSQL plans for a query."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest
from django.db import connection, transaction

from tests.factory import rollups_current as rollups_current  # used by tests/jobs/helpers.py
from tests.factory import samples_send
from webapp.fleet.models import Gpu, Node

MODEL = "NVIDIA H100 80GB HBM3"  # the GPU name tests.helpers.make_batch reports

# The names the telemetry and jobs tests use for the factory's sample path.
seed_node = samples_send


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
