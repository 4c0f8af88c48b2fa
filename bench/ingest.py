"""End-to-end ingest rate against raw binary COPY into the same table, in one run.

    .venv/bin/python bench/ingest.py [--batches 300] [--intervals 60] [--workers 2]

Starts its own embedded PostgreSQL and Redis in a temporary folder, migrates, registers
nodes, then:
  0. warm-up (not timed): a few batches per worker, so each has imported what it needs and
     opened its database connection;
  1. e2e: the collector's simulated source and agent build batches (8 GPUs x --intervals
     timestamps per node; built before the clock starts, bench/collector.py measures that
     part) and the collector's transport publishes them by task name to Redis; real Celery
     worker processes validate and COPY them, up to VIGIL_INGEST_GROUP batches per
     transaction; the clock stops when the last row is committed. The rollup refresh that
     follows is timed separately.
  2. baseline: the same number of rows, binary COPY straight into telemetry_gpusample, one
     commit per batch-sized chunk, from one connection.
Last line: JSON with e2e_samples_per_s, raw_copy_rows_per_s, ratio, and the CPU microseconds
per sample of each process role during the timed part (publisher, workers, postgres, redis).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site  # noqa: E402 (after the path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--intervals", type=int, default=60, help="timestamps per batch")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--pool", default="solo", choices=["solo", "prefork", "threads"])
    args = parser.parse_args()

    # Production settings, as a deployed worker runs (no DEBUG cursor wrapper, no query log).
    with bench_site() as tmp:
        from django.conf import settings
        from django.db import connection

        from tests.helpers import WorkerProcess

        warmup = args.nodes  # a batch of every node: first contact registers its GPUs
        _tokens, batches = _build_batches(args.nodes, args.batches + warmup, args.intervals)
        warmup_batches, batches = batches[:warmup], batches[warmup:]
        expected = sum(n for _, n in batches)
        print(f"{len(batches)} batches, {expected} GPU samples", file=sys.stderr)

        # Separate solo-pool worker processes: no hand-off of each 100 KB batch from the
        # prefork parent to a child over a pipe.
        workers = [
            WorkerProcess(
                os.environ["DATABASE_URL"],
                Path(tmp) / f"worker{i}.log",
                pool=args.pool,
                concurrency=1,
                visibility_timeout_s=600,
            )
            for i in range(args.workers)
        ]
        for worker in workers:
            worker.start()
        import redis

        from collectors.transport import Transport

        transport = Transport(os.environ["CELERY_BROKER_URL"], Path(tmp) / "spool")
        broker = redis.Redis(
            unix_socket_path=os.environ["CELERY_BROKER_URL"].removeprefix("redis+socket://")
        )

        def drained(since: float) -> None:
            # Watch the broker, not the table: a count(*) every few ms would steal the CPU
            # being measured. Done = queue empty and nothing unacknowledged.
            while broker.llen("ingest") or broker.hlen("unacked"):
                time.sleep(0.01)
                if time.perf_counter() - since > 600:
                    raise SystemExit(f"timed out; worker log:\n{workers[0].log()[-3000:]}")

        # Warm-up, not timed: each worker's first tasks import modules lazily, open their
        # database connection and build validators; the figure is the steady state.
        for raw, _ in warmup_batches:
            transport.send(raw)
        drained(time.perf_counter())
        warm_rows = _count(connection)

        cpu0 = _cpu_by_role(workers)
        t0 = time.perf_counter()
        for raw, _ in batches:
            if not transport.send(raw):
                raise SystemExit("the broker refused a batch")
        published = time.perf_counter() - t0
        transport.close()
        drained(t0)
        e2e_s = time.perf_counter() - t0
        cpu1 = _cpu_by_role(workers)
        for worker in workers:
            worker.stop()
        stored = _count(connection) - warm_rows
        if stored != expected:
            raise SystemExit(f"stored {stored} of {expected} samples")
        # CPU microseconds per stored sample, by process role (where the 2 cores went).
        cpu_us = {role: round((cpu1[role] - cpu0[role]) / expected * 1e6, 1) for role in cpu1}
        # How busy the whole machine was while timed (100 = every core): if it is well below,
        # the pipeline waited on round trips; if "all_processes" is well above the sum of the
        # roles, something else was running.
        busy_pct = (cpu1["all_processes"] - cpu0["all_processes"]) / (e2e_s * os.cpu_count())

        from webapp.telemetry.services import rollups_refresh

        r0 = time.perf_counter()
        _batches_done, cells = rollups_refresh(max_rounds=10_000)
        rollup_s = time.perf_counter() - r0

        raw_s = _raw_copy(connection, args.batches, args.intervals)
        result = {
            "e2e_samples_per_s": round(expected / e2e_s),
            "raw_copy_rows_per_s": round(expected / raw_s),
            "ratio": round((expected / e2e_s) / (expected / raw_s), 3),
            "samples": expected,
            "stored": stored,
            "batch_samples": 8 * args.intervals,
            "rollup_samples_per_s": round(expected / rollup_s),
            "rollup_cells": cells,
            "publish_per_s": round(len(batches) / published),
            "cpu_us_per_sample": cpu_us,
            "machine_busy_pct": round(100 * busy_pct),
            "worker_processes": args.workers,
            "ingest_group": settings.VIGIL_INGEST_GROUP,
            "pool": args.pool,
            "cpus": os.cpu_count(),
        }
        print(json.dumps(result))


def _build_batches(
    nodes: int, count: int, intervals: int
) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """Tokens for the simulated nodes, and `count` wire batches (JSON text, sample count)
    exactly as the collector builds them: the simulated source in backfill mode, batched by
    the agent, 8 GPUs x `intervals` timestamps per batch."""
    from collectors.agent import Agent
    from collectors.backends.simulated import SimulatedBackend
    from webapp.fleet.services import node_token_issue

    backend = SimulatedBackend(["bench"], nodes_per_cluster=nodes, gpus_per_node=8, seed=7)
    tokens = {node: node_token_issue(cluster, node) for cluster, node in backend.node_ids}
    out: list[tuple[str, int]] = []
    agent = Agent(
        backend,
        lambda cluster, node: tokens[node],
        lambda _id, text: out.append((text, len(json.loads(text)["samples"]))),
        interval_s=10,
        intervals_per_batch=intervals,
    )
    agent.run(count=-(-count // nodes) * intervals, backfill=True)
    return tokens, out[:count]


def _cpu_by_role(workers) -> dict[str, float]:
    """CPU seconds used so far by this process (the publisher), the workers, PostgreSQL and
    Redis. Only processes alive now count, so take it before and after the timed part."""
    import psutil

    def cpu(proc: psutil.Process) -> float:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            return 0.0
        return times.user + times.system

    roles = {"publisher": 0.0, "workers": 0.0, "postgres": 0.0, "redis": 0.0}
    machine = psutil.cpu_times()
    roles["all_processes"] = machine.user + machine.system + machine.nice
    roles["publisher"] = cpu(psutil.Process())
    for worker in workers:
        proc = psutil.Process(worker.proc.pid)
        roles["workers"] += cpu(proc) + sum(cpu(c) for c in proc.children(recursive=True))
    # Only this run's servers (their command lines name its data folder), not other
    # PostgreSQL or Redis instances on the machine.
    data_dir = os.environ["VIGIL_DATA_DIR"]
    for proc in psutil.process_iter(["name", "cmdline"]):
        name = proc.info["name"] or ""
        if data_dir not in " ".join(proc.info["cmdline"] or []):
            continue
        if name.startswith("postgres"):
            roles["postgres"] += cpu(proc) + sum(cpu(c) for c in proc.children(recursive=True))
        elif name.startswith("redis"):
            roles["redis"] += cpu(proc)
    return roles


def _count(connection) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def _raw_copy(connection, count: int, intervals: int) -> float:
    """Binary COPY of count x (8 x intervals) rows into the same table; seconds taken."""
    from datetime import UTC, datetime

    from django.db import transaction

    from collectors.schema import GPU_FIELD_NAMES, GPU_FIELDS

    types = ["int8", "timestamptz", *("real" if m.kind == "float" else "int8" for m in GPU_FIELDS)]
    values = [50.0 if m.kind == "float" else 1000 for m in GPU_FIELDS]
    start = time.time() - count * intervals * 10 - 120
    cols = ", ".join(GPU_FIELD_NAMES)
    # GPU ids far from the registered ones: no conflict with the e2e rows.
    chunks = [
        [
            (10_000_000 + g, datetime.fromtimestamp(start + (c * intervals + k) * 10, UTC), *values)
            for k in range(intervals)
            for g in range(8)
        ]
        for c in range(count)
    ]
    from webapp.telemetry.partitions import partition_ensure

    for day in {row[1].date() for rows in chunks for row in rows}:
        partition_ensure("telemetry_gpusample", day)
    t0 = time.perf_counter()
    for rows in chunks:
        with (
            transaction.atomic(),
            connection.cursor() as cur,
            cur.copy(
                f"COPY telemetry_gpusample (gpu_id, ts, {cols}) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
