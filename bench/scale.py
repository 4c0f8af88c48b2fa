"""What "now" costs at a fleet's size, at 1 h of data and at --hours, in one run.

    .venv/bin/python bench/scale.py [--gpus 4704] [--hours 4] [--step-s 15]

Starts its own embedded PostgreSQL and Redis in a temporary folder, migrates, and builds an
Acme-sized fleet with the ORM (2 clusters, 8 GPUs a node; running jobs of 2,048, 1,024 and
512 GPUs since the oldest sample, the rest in 64-GPU jobs; in the biggest, one straggling GPU
and one held idle as a spare, which must not be reported). Samples are bulk binary COPY
straight into telemetry_gpusample (a bench: ingest's own cost is bench/ingest.py), in
10-minute chunks, each followed by the 1-minute rollup of its minutes (the aggregates of
rollups_refresh, in one statement); the latest-values table and the RollupDirty rows of the
current minutes are filled as ingest fills them.

A day of Vigil as it runs: first 1 h of samples, measured; then the rest back to --hours,
and compaction run as its beat task runs it (every hour past VIGIL_COMPACT_AFTER_HOURS
packed, for the whole fleet), measured again. Each figure is the median of three runs:
  - latest_sql_ms: the query of gpus_latest() (the latest-values table), against
    latest_old_sql_ms: the query it replaced (DISTINCT ON over the raw samples of the stale
    window; at 1 h); latest_ms: gpus_latest() whole (its Python objects too);
  - rollup_refresh_ms: rollups_refresh() of one 15 s round (a dirty row per node for one
    complete minute: a cell per GPU, each folding a minute of samples; the median of five,
    each of another of the newest minutes); rollup_refresh_buffers: the shared buffers its
    statement touches (EXPLAIN ANALYZE BUFFERS), the work done, which must not grow with the
    data;
  - the same two over --hours of raw samples, before compaction, as a site with compaction
    off or a day behind would run (suffix _raw_day), with rollup_refresh_old_ms (the
    statement the refresh replaced, on the same dirty rows) and partition_count_ms (a plain
    count(*) of today's partition), which grow with the raw data (also at 1 h: suffix _1h);
  - stragglers_ms: stragglers_detect(), against stragglers_read_ms: its rollup read alone
    (stragglers_found: 1, the straggler and not the spare);
  - pages through a real HTTP server: gunicorn, 3 sync workers (as docker-compose.yml runs
    it) on a free port of 127.0.0.1, against the same embedded servers, asked with
    Accept-Encoding: gzip and a logged-in session (a session cookie made by Django's auth),
    each after one request per worker: overview_ms and overview_bytes (as sent, gzipped)
    for /api/v1/overview.json; node_day_ms, the straggler's node page over the last day
    (?range=1d, the rollup); job_page_ms, the page of the job of job_gpus (2,048) GPUs;
    metrics_ms, /metrics with its bearer key.
Storage: bytes_per_sample_raw (pg_total_relation_size of the raw
partitions over their rows, before compaction), bytes_per_gpu_hour_rollup (the same of the
1-minute rollup, per 60 of its rows) and bytes_per_sample_compacted (the same of the packed
table after compaction), with compaction's wall time and CPU per sample, and a read of
energy_mj and power_w of --read-gpus GPUs over the packed hours through gpu_samples() and a
scan of them through samples_relation() (what SQL readers pay), raw (before) and packed
(after). After each bulk copy, and after compaction, the sample and rollup tables are
VACUUM ANALYZEd, as autovacuum would have left them, so that no autovacuum competes with the
measurements. "Cost independent of the data kept" reads as: each figure at --hours within
noise of its 1 h figure, while the old queries and the count grow with the data. Last line:
JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site, static_without_manifest  # noqa: E402 (after the path)

GPUS_PER_NODE = 8
BIG_JOBS = (2048, 1024, 512)  # the rest of the fleet runs 64-GPU jobs
SMALL_JOB = 64


# The statements the bounded reads replaced, timed on the same data as their replacements.
def _old_latest_sql() -> str:
    from collectors.schema import GPU_FIELD_NAMES

    return f"""
SELECT g.id, g.index, g.uuid, g.model, n.id, n.hostname, c.id, c.name, s.ts,
    {", ".join("s." + name for name in GPU_FIELD_NAMES)}
FROM fleet_gpu g
JOIN fleet_node n ON n.id = g.node_id
JOIN fleet_cluster c ON c.id = n.cluster_id
LEFT JOIN (
    SELECT DISTINCT ON (gpu_id) *
    FROM telemetry_gpusample
    WHERE ts > now() - %s * interval '1 second'
    ORDER BY gpu_id, ts DESC
) s ON s.gpu_id = g.id
ORDER BY c.name, n.hostname, g.index
"""


def _old_refresh_sql() -> str:
    from webapp.telemetry.services import _ROLLUP_AGGS, _ROLLUP_COLS, _ROLLUP_SET

    return f"""
WITH claimed AS (
    DELETE FROM telemetry_rollupdirty
    WHERE id IN (SELECT id FROM telemetry_rollupdirty ORDER BY id LIMIT 2000)
    RETURNING gpu_ids, lo, hi
), cells AS (
    SELECT DISTINCT g AS gpu_id, m AS minute
    FROM claimed, unnest(gpu_ids) AS g,
        generate_series(lo, hi - interval '1 minute', interval '1 minute') AS m
), upserted AS (
    INSERT INTO telemetry_gpurollup1m AS r
        (gpu_id, minute, n, energy_mj_min, energy_mj_max, {_ROLLUP_COLS})
    SELECT s.gpu_id, c.minute, count(*), min(energy_mj), max(energy_mj), {_ROLLUP_AGGS}
    FROM cells c
    JOIN telemetry_gpusample s
        ON s.gpu_id = c.gpu_id AND s.ts >= c.minute AND s.ts < c.minute + interval '1 minute'
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (gpu_id, minute) DO UPDATE SET {_ROLLUP_SET}
    RETURNING 1
)
SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM upserted)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4704)
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--step-s", type=int, default=15, help="seconds between samples")
    parser.add_argument(
        "--read-gpus",
        type=int,
        default=512,
        help="GPUs whose hours past the compaction horizon are read before and after packing",
    )
    args = parser.parse_args()
    if args.gpus < sum(BIG_JOBS) + SMALL_JOB or args.gpus % GPUS_PER_NODE:
        raise SystemExit(f"--gpus: need a multiple of 8 of at least {sum(BIG_JOBS) + SMALL_JOB}")
    if args.hours < 1:
        raise SystemExit("--hours: at least 1 (the first measurement is at 1 h)")

    os.environ["VIGIL_METRICS_KEY"] = metrics_key = secrets.token_urlsafe(16)
    started = time.perf_counter()
    with bench_site():
        now = time.time()
        end = now - now % args.step_s
        fleet = _fleet(args.gpus, datetime.fromtimestamp(end - args.hours * 3600, UTC))
        print(f"{args.gpus} GPUs, {len(fleet['nodes'])} nodes", file=sys.stderr)
        _copy(fleet, end - 3600, end + args.step_s, args.step_s)
        _settle()
        with _server() as port:
            web = _Web(port, fleet["user"], metrics_key)
            at_1h = _measure(fleet, args.step_s, web)
            print(f"1 h: {json.dumps(at_1h)}", file=sys.stderr)
            _copy(fleet, end - args.hours * 3600, end - 3600, args.step_s)
            _settle()
            # The raw day as compaction would find it if it were off or a day behind: the
            # refresh and the statements it replaced over --hours of raw samples.
            at_raw = _refresh_figures(fleet, _topup(fleet, args.step_s), old=True)
            print(f"{args.hours} h raw: {json.dumps(at_raw)}", file=sys.stderr)
            storage = _storage(fleet, args.read_gpus)
            print(f"storage: {json.dumps(storage)}", file=sys.stderr)
            _settle()
            at_full = _measure(fleet, args.step_s, web, old=False)
            print(f"{args.hours} h: {json.dumps(at_full)}", file=sys.stderr)
        result = {
            "gpus": args.gpus,
            "hours": args.hours,
            "step_s": args.step_s,
            **{f"{k}_1h": v for k, v in at_1h.items()},
            **{f"{k}_raw_day": v for k, v in at_raw.items()},
            **at_full,
            **storage,
            "bench_s": round(time.perf_counter() - started),
            "cpus": os.cpu_count(),
        }
        print(json.dumps(result))


def _fleet(gpus: int, started: datetime) -> dict:
    """Two clusters of 8-GPU nodes, running jobs over every GPU since `started` (the oldest
    sample: a job's page spans the data); ids for the COPY."""
    from django.contrib.auth import get_user_model

    from webapp.fleet.models import Cluster, Gpu, Node
    from webapp.jobs.choices import JobState
    from webapp.jobs.models import Job, JobAllocation

    nodes_n = gpus // GPUS_PER_NODE
    clusters = [Cluster.objects.create(name=n) for n in ("acme-seren", "acme-kalos")]
    nodes = Node.objects.bulk_create(
        Node(
            cluster=clusters[k % 2],
            hostname=f"node-{k:05d}",
            state="up",
            token_hash=secrets.token_hex(32),
        )
        for k in range(nodes_n)
    )
    gpu_rows = Gpu.objects.bulk_create(
        Gpu(node=n, index=i, uuid=f"GPU-{n.hostname}-{i}", model="NVIDIA A100-SXM4-80GB")
        for n in nodes
        for i in range(GPUS_PER_NODE)
    )
    sizes = [*BIG_JOBS]
    while sum(sizes) + SMALL_JOB <= gpus:
        sizes.append(SMALL_JOB)
    # Jobs fill nodes in order within a cluster's GPUs, as a scheduler packs them.
    order = sorted(gpu_rows, key=lambda g: (g.node.cluster_id, g.node_id, g.index))
    allocations, at, jobs = [], 0, []
    for k, size in enumerate(sizes):
        job = Job.objects.create(
            cluster_id=order[at].node.cluster_id,
            scheduler_id=str(1000 + k),
            state=JobState.RUNNING,
            start_at=started,
            gpus_requested=size,
        )
        jobs.append(job)
        allocations += [
            JobAllocation(job=job, node=g.node, gpu=g, gpu_index=g.index, start=started)
            for g in order[at : at + size]
        ]
        at += size
    JobAllocation.objects.bulk_create(allocations)
    user = get_user_model().objects.create_user("bench", password=secrets.token_urlsafe(12))
    user.is_staff = user.is_superuser = True
    user.save()
    return {
        "nodes": {n.id: [g.id for g in gpu_rows if g.node_id == n.id] for n in nodes},
        "gpu_ids": [g.id for g in gpu_rows],
        "straggler": order[5].id,  # GPU 5 of the 2,048-GPU job's first node
        # GPU 6 there is held and left idle (a spare): not a straggler, however slow it looks.
        "spare": order[6].id,
        "node": order[0].node_id,  # the node page measured: the straggler's
        "job": jobs[0].id,  # the 2,048-GPU job
        "job_gpus": sizes[0],
        "user": user,
        "last_copied": None,
    }


def _copy(fleet: dict, t_from: float, t_to: float, step_s: int) -> None:
    """Samples of every GPU for t_from <= ts < t_to, binary COPY in 10-minute chunks."""
    import numpy as np
    from django.db import connection, transaction

    from collectors.schema import GPU_FIELD_NAMES, GPU_FIELDS
    from webapp.core import pgcopy
    from webapp.telemetry.partitions import partition_ensure

    gpu_ids = np.array(fleet["gpu_ids"], dtype=np.int64)
    straggler = gpu_ids == fleet["straggler"]
    spare = gpu_ids == fleet["spare"]
    rng = np.random.default_rng(17)
    cols = ", ".join(GPU_FIELD_NAMES)
    chunk_s = 600
    for start in np.arange(t_from, t_to, chunk_s):
        stamps = np.arange(start, min(start + chunk_s, t_to), step_s)
        for day in {datetime.fromtimestamp(t, UTC).date() for t in (stamps[0], stamps[-1])}:
            for table in ("telemetry_gpusample", "telemetry_nodesample", "telemetry_gpurollup1m"):
                partition_ensure(table, day)
        # GPU-major (primary-key order), as ingest writes.
        gpu = np.repeat(gpu_ids, len(stamps))
        ts = np.tile(stamps, len(gpu_ids))
        rows = len(gpu)
        columns = {
            "gpu_id": pgcopy.Fixed("int8", gpu),
            "ts": pgcopy.Fixed(
                "timestamptz", ((ts - pgcopy.PG_EPOCH_UNIX_S) * 1_000_000).astype(np.int64)
            ),
        }
        slow = np.repeat(straggler, len(stamps))
        idle = np.repeat(spare, len(stamps))
        for m in GPU_FIELDS:
            if m.kind == "float":
                values = rng.uniform(0.6, 0.8, rows).astype(np.float32)
                if m.name == "sm_active":
                    values[slow] = 0.2
                elif m.name in ("gpu_util",):
                    values *= 100
                elif m.name in ("power_w", "sm_clock_mhz"):
                    values *= 900
                # An idle A100: no kernels, about 60 W, clocks down at 210 MHz.
                if m.name in ("gpu_util", "sm_active"):
                    values[idle] = 0.0
                elif m.name == "power_w":
                    values[idle] = 60.0
                elif m.name == "sm_clock_mhz":
                    values[idle] = 210.0
                columns[m.name] = pgcopy.Fixed("float4", values)
            elif m.name == "energy_mj":
                columns[m.name] = pgcopy.Fixed("int8", (ts * 400_000).astype(np.int64))
            else:
                columns[m.name] = pgcopy.Fixed("int8", 0)
        with transaction.atomic(), connection.cursor() as cur:
            sql = f"COPY telemetry_gpusample (gpu_id, ts, {cols}) FROM STDIN (FORMAT BINARY)"
            with cur.copy(sql) as copy:
                for buf in pgcopy.copy_binary(rows, columns):
                    copy.write(buf)
            _rollup(cur, float(stamps[0]), float(stamps[-1]) + step_s)
    with transaction.atomic():
        _hourly(t_from, t_to)
    if fleet["last_copied"] is None or t_to > fleet["last_copied"]:
        fleet["last_copied"] = t_to
    fleet["first_copied"] = min(t_from, fleet.get("first_copied") or t_from)


def _rollup(cur, lo: float, hi: float) -> None:
    """The 1-minute rollup of every minute that samples in lo <= ts < hi touch, as the beat
    makes it from the RollupDirty rows ingest writes (the same aggregates; in one statement,
    since the refresh folds samples older than the compaction horizon one batch at a time)."""
    from webapp.telemetry.services import _ROLLUP_AGGS, _ROLLUP_COLS, _ROLLUP_SET

    lo_min = datetime.fromtimestamp(lo - lo % 60, UTC)
    hi_min = datetime.fromtimestamp(hi - hi % 60 + (60 if hi % 60 else 0), UTC)
    cur.execute(
        f"""
        INSERT INTO telemetry_gpurollup1m AS r
            (gpu_id, minute, n, energy_mj_min, energy_mj_max, {_ROLLUP_COLS})
        SELECT gpu_id, date_trunc('minute', ts), count(*), min(energy_mj), max(energy_mj),
            {_ROLLUP_AGGS}
        FROM telemetry_gpusample WHERE ts >= %s AND ts < %s
        GROUP BY 1, 2
        ON CONFLICT (gpu_id, minute) DO UPDATE SET {_ROLLUP_SET}
        """,
        [lo_min, hi_min],
    )


def _hourly(lo: float, hi: float) -> None:
    """The hourly rollup of the hours that samples in lo <= ts < hi touch, as its beat task
    folds them from the 1-minute rollup (rollup_hourly.py)."""
    from webapp.telemetry.rollup_hourly import _refresh

    lo_h = datetime.fromtimestamp(lo - lo % 3600, UTC)
    hi_h = datetime.fromtimestamp(hi - hi % 3600 + (3600 if hi % 3600 else 0), UTC)
    _refresh(lo_h, hi_h)


def _topup(fleet: dict, step_s: int) -> float:
    """Samples up to now (the stale window is minutes), the latest table as ingest keeps it,
    and the rollup current; the newest ts."""
    from django.db import connection

    from collectors.schema import GPU_FIELD_NAMES
    from webapp.telemetry.services import rollups_refresh

    now = time.time()
    newest = now - now % step_s
    first = fleet["last_copied"]
    if newest >= first:
        _copy(fleet, first, newest + step_s, step_s)
    cols = ", ".join(GPU_FIELD_NAMES)
    sets = ", ".join(f"{c} = excluded.{c}" for c in GPU_FIELD_NAMES)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO telemetry_gpulatest (gpu_id, ts, {cols})
            SELECT DISTINCT ON (gpu_id) gpu_id, ts, {cols} FROM telemetry_gpusample
            WHERE ts >= to_timestamp(%s) ORDER BY gpu_id, ts DESC
            ON CONFLICT (gpu_id) DO UPDATE SET ts = excluded.ts, {sets}
            """,
            [newest],
        )
    # The rollup of the straggler window and more, as the beat keeps it.
    minute = newest - newest % 60
    _dirty(fleet, minute - 15 * 60, minute + 60)
    while rollups_refresh() != (0, 0):
        pass
    return newest


def _dirty(fleet: dict, lo: float, hi: float) -> None:
    """A RollupDirty row per node for the minutes lo..hi, as a node's batch writes one."""
    from webapp.telemetry.models import RollupDirty

    lo_dt, hi_dt = datetime.fromtimestamp(lo, UTC), datetime.fromtimestamp(hi, UTC)
    RollupDirty.objects.bulk_create(
        RollupDirty(gpu_ids=ids, lo=lo_dt, hi=hi_dt) for ids in fleet["nodes"].values()
    )


def _refresh_buffers(fleet: dict, minute: float) -> int:
    """Shared buffers (hit or read) of the refresh statement on the dirty rows of `minute`, by
    EXPLAIN (ANALYZE, BUFFERS), rolled back: the work the refresh does, which must not grow
    with the data kept (its time also moves with how much of the data the CPU caches hold)."""
    from django.db import connection, transaction

    from webapp.telemetry.services import (
        _ROLLUP_PICK,
        _ROLLUP_REFRESH,
        ROLLUP_CELLS_PER_STATEMENT,
        ROLLUP_CLAIM_LIMIT,
    )

    _dirty(fleet, minute, minute + 60)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            _ROLLUP_PICK,
            {
                "rows": ROLLUP_CLAIM_LIMIT,
                "cells": ROLLUP_CELLS_PER_STATEMENT,
                "late": datetime.fromtimestamp(minute, UTC),
            },
        )
        ids, lo, hi = cur.fetchone()
        cur.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _ROLLUP_REFRESH,
            {"ids": ids, "lo": lo, "hi": hi},
        )
        plan = cur.fetchone()[0]
        transaction.set_rollback(True)
    top = (plan[0] if isinstance(plan, list) else json.loads(plan)[0])["Plan"]
    print(f"refresh plan, buffers by node: {json.dumps(list(_plan_buffers(top)))}", file=sys.stderr)
    return int(top["Shared Hit Blocks"] + top["Shared Read Blocks"])


def _plan_buffers(node: dict, depth: int = 0) -> Iterator[str]:
    """Each plan node's shared buffers (its children's included), as "type(relation) n"."""
    name = node["Node Type"] + (f"({node['Relation Name']})" if "Relation Name" in node else "")
    yield f"{'.' * depth}{name} {node['Shared Hit Blocks'] + node['Shared Read Blocks']}"
    for child in node.get("Plans", []):
        yield from _plan_buffers(child, depth + 1)


def _settle() -> None:
    """VACUUM (ANALYZE) the sample and rollup tables after a bulk copy, as autovacuum leaves a
    day-old partition, so that no autovacuum of the copied rows runs during the measurements
    (on two cores it would take one of them)."""
    from django.db import connection

    with connection.cursor() as cur:
        for table in ("telemetry_gpusample", "telemetry_gpurollup1m", "telemetry_gpurollup1h"):
            cur.execute(f"VACUUM (ANALYZE) {table}")
        cur.execute("CHECKPOINT")  # the pages VACUUM dirtied, written now, not while measuring


def _timed(fn, runs: int = 3) -> float:
    """Median milliseconds of `runs` calls."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def _sql(statement: str, params: list | None = None):
    """A call that runs the statement and fetches its rows."""
    from django.db import connection

    def run():
        with connection.cursor() as cur:
            cur.execute(statement, params or [])
            cur.fetchall()

    return run


def _refresh_figures(fleet: dict, newest: float, *, old: bool) -> dict:
    """The rollup refresh below `newest`; `old`: the statement it replaced, and a count of
    the day's partition, too.

    Each refresh folds one complete minute (a dirty row per node: a cell per GPU, each a
    whole minute of samples), a different one each time, newest first, as the beat folds
    each minute a few times and then never again: the current minute would hold one to four
    samples a cell by where in the minute the bench stands, and refolding one minute over
    and over lengthens its rows' update chains."""
    from django.db import connection, transaction

    from webapp.telemetry.partitions import partition_name
    from webapp.telemetry.services import rollups_refresh

    minute = newest - newest % 60
    done = [minute - 60 * k for k in range(1, 10)]

    def refresh_new(at: float) -> float:
        _dirty(fleet, at, at + 60)
        t0 = time.perf_counter()
        rollups_refresh()
        return time.perf_counter() - t0

    def refresh_old(at: float) -> float:
        _dirty(fleet, at, at + 60)
        t0 = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(_old_refresh_sql())
        return time.perf_counter() - t0

    out = {
        "rollup_refresh_ms": round(statistics.median(map(refresh_new, done[:5])) * 1000, 1),
        "rollup_refresh_buffers": _refresh_buffers(fleet, done[5]),
    }
    if old:
        out["rollup_refresh_old_ms"] = round(
            statistics.median(map(refresh_old, done[6:])) * 1000, 1
        )
        today = partition_name("telemetry_gpusample", datetime.fromtimestamp(newest, UTC).date())
        out["partition_count_ms"] = _timed(_sql(f'SELECT count(*) FROM "{today}"'), runs=1)
    return out


def _measure(fleet: dict, step_s: int, web: _Web, *, old: bool = True) -> dict:
    """Every figure over the data as it stands; `old`: the replaced statements too."""
    from django.conf import settings

    from webapp.failures.models import FailureEvent
    from webapp.failures.stragglers import IDLE_METRIC, STRAGGLER_METRICS, stragglers_detect
    from webapp.jobs.models import JobAllocation
    from webapp.telemetry.selectors import gpus_latest, gpus_minute_grid, latest_sql

    newest = _topup(fleet, step_s)
    stale = settings.VIGIL_STALE_AFTER_S
    out: dict = {}

    # The query alone (fetched, no Python objects), then gpus_latest() whole.
    out["latest_sql_ms"] = _timed(_sql(latest_sql(), [stale]))
    if old:
        out["latest_old_sql_ms"] = _timed(_sql(_old_latest_sql(), [stale]))
    out["latest_ms"] = _timed(gpus_latest)
    fresh = sum(g.ts is not None for g in gpus_latest())

    out.update(_refresh_figures(fleet, newest, old=old))

    # Samples up to now again: the old statements above take a minute at 24 h, and a page or
    # pass measured over stale data would measure less than a live one does.
    newest = _topup(fleet, step_s)
    minute = newest - newest % 60

    def stragglers():
        FailureEvent.objects.filter(kind="performance").delete()
        return stragglers_detect()

    out["stragglers_ms"] = _timed(stragglers)
    out["stragglers_found"] = stragglers()
    end = datetime.fromtimestamp(minute, UTC)
    gpu_ids = list(JobAllocation.objects.filter(end__isnull=True).values_list("gpu_id", flat=True))
    n = settings.VIGIL_STRAGGLER_MINUTES
    out["stragglers_read_ms"] = _timed(
        lambda: gpus_minute_grid(
            gpu_ids,
            end - timedelta(minutes=n),
            end - timedelta(minutes=1),
            (*STRAGGLER_METRICS, IDLE_METRIC),
        )
    )

    # The pages through the HTTP server, as a browser (or Prometheus) asks for them.
    out["metrics_ms"], _ = web.timed("/metrics", key=True)
    out["overview_ms"], body = web.timed("/api/v1/overview.json")
    out["overview_bytes"] = len(body)  # as sent: gzip
    out["node_day_ms"], _ = web.timed(f"/nodes/{fleet['node']}/?range=1d")
    out["job_page_ms"], _ = web.timed(f"/jobs/{fleet['job']}/")
    out["job_gpus"] = fleet["job_gpus"]
    out["gpus_fresh"] = fresh
    out["samples"] = _count() + _count_packed()
    return out


def _table_bytes(table: str) -> int:
    """pg_total_relation_size (heap, TOAST, indexes) summed over the table's partitions."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
            "WHERE inhparent = %s::regclass",
            [table],
        )
        return int(cur.fetchone()[0])


def _storage(fleet: dict, read_gpus: int) -> dict:
    """Bytes per GPU sample raw (the whole fleet's raw partitions); then compaction as its
    beat task does it (`samples_compact`, run after run until no hour past the horizon is
    left raw: every GPU of the fleet), with its CPU per sample; then bytes per compacted
    sample. A read of energy_mj and power_w of the first `read_gpus` GPUs over the packed
    hours, through gpu_samples() and through samples_relation(), before (raw) and after
    (packed)."""
    from django.db import connection

    from webapp.telemetry.compaction import compact_horizon, samples_compact
    from webapp.telemetry.samples import gpu_samples, samples_relation

    first = datetime.fromtimestamp(fleet["first_copied"], UTC)
    raw_rows = _count()
    out = {"bytes_per_sample_raw": round(_table_bytes("telemetry_gpusample") / raw_rows, 1)}
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpurollup1m")
        cells = cur.fetchone()[0]
    # The rollup of every copied minute: a row per GPU and minute, 60 to a GPU-hour.
    out["bytes_per_gpu_hour_rollup"] = round(
        _table_bytes("telemetry_gpurollup1m") / max(cells, 1) * 60
    )
    gpus = sorted(fleet["gpu_ids"])[:read_gpus]
    lo = first.replace(minute=0, second=0, microsecond=0)
    hi = compact_horizon()
    if hi <= lo:
        return {**out, "bytes_per_sample_compacted": None, "compacted_samples": 0}
    fields = ("energy_mj", "power_w")

    def sql_read() -> None:
        # What a SQL reader pays (job page, characterization): the relation, then a scan.
        with samples_relation(gpus, lo, hi, ["power_w"]) as rel, connection.cursor() as cur:
            cur.execute(
                f"SELECT count(*), sum(power_w) FROM {rel} s WHERE ts >= %s AND ts < %s", [lo, hi]
            )

    read_raw = _timed(lambda: gpu_samples(gpus, lo, hi, fields))
    sql_raw = _timed(sql_read)
    moved, runs, t0, cpu0 = 0, 0, time.perf_counter(), time.process_time()
    while True:
        report = samples_compact()
        moved += report["samples"]
        runs += 1
        if not report["chunks"] and not report["raw_days_truncated"]:
            break
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(sum(n), 0), count(*) FROM telemetry_gpusamplepacked")
        packed, gpu_hours = map(int, cur.fetchone())
    read_packed = _timed(lambda: gpu_samples(gpus, lo, hi, fields))
    sql_packed = _timed(sql_read)
    return {
        **out,
        "bytes_per_sample_compacted": round(_table_bytes("telemetry_gpusamplepacked") / packed, 1),
        "compacted_samples": packed,
        "compacted_gpu_hours": gpu_hours,
        "compact_runs": runs,
        "compact_s": round(wall),
        "compact_us_per_sample": round(cpu / max(moved, 1) * 1e6, 2),
        "raw_samples_left": _count(),
        "read_gpus": len(gpus),
        "read_energy_raw_ms": read_raw,
        "read_energy_packed_ms": read_packed,
        "sql_read_raw_ms": sql_raw,
        "sql_read_packed_ms": sql_packed,
    }


def wsgi():
    """The app as gunicorn serves it here (`scale:wsgi()`): production settings, static URLs
    without collectstatic's manifest (the bench measures pages, not static files)."""
    import django

    django.setup()
    static_without_manifest()
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


WEB_WORKERS = 3  # as docker-compose.yml's web service runs gunicorn


@contextlib.contextmanager
def _server() -> Iterator[int]:
    """gunicorn with WEB_WORKERS sync workers on a free port of 127.0.0.1, against this run's
    embedded PostgreSQL and Redis (settings put their URLs in the environment it inherits)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(Path(os.environ["VIGIL_DATA_DIR"]) / "gunicorn.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--workers",
            str(WEB_WORKERS),
            "--bind",
            f"127.0.0.1:{port}",
            "--timeout",
            "300",
            "--pythonpath",
            str(ROOT / "bench"),
            "scale:wsgi()",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"gunicorn exited ({proc.returncode}): see {log.name}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("gunicorn did not listen within 120 s") from None
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


class _Web:
    """GETs to the bench's HTTP server: pages with a logged-in session (a session cookie made
    with Django's auth), /metrics with its bearer key; gzip accepted, as a browser does."""

    def __init__(self, port: int, user, metrics_key: str) -> None:
        from django.conf import settings
        from django.test import Client

        client = Client()
        client.force_login(user)  # a session row in the database the server reads
        self.port = port
        self.cookie = (
            f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        )
        self.metrics_key = metrics_key

    def get(self, path: str, *, key: bool = False) -> bytes:
        """The body as sent (still gzipped when the server gzipped it)."""
        headers = {"Accept-Encoding": "gzip"}
        if key:
            headers["Authorization"] = f"Bearer {self.metrics_key}"
        else:
            headers["Cookie"] = self.cookie
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise SystemExit(f"{path}: HTTP {response.status}")
        return body

    def timed(self, path: str, *, key: bool = False) -> tuple[float, bytes]:
        """Median ms of three GETs after one per worker (each process's first request of a
        page pays its imports and templates), and the last body."""
        for _ in range(WEB_WORKERS):
            body = self.get(path, key=key)
        ms = _timed(lambda: self.get(path, key=key))
        return ms, body


def _count() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def _count_packed() -> int:
    """Samples held in packed GPU-hours."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(sum(n), 0) FROM telemetry_gpusamplepacked")
        return int(cur.fetchone()[0])


if __name__ == "__main__":
    main()
