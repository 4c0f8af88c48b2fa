"""End-to-end ingest rate against raw binary COPY into the same table, in one run.

    .venv/bin/python bench/ingest.py [--batches 300] [--intervals 60] [--workers 2]

Starts its own embedded PostgreSQL and Redis in a temporary folder, migrates, registers
nodes, then:
  1. e2e: the collector's simulated source builds batches (8 GPUs x --intervals timestamps per
     node) and publishes them by task name to Redis; real Celery worker processes validate
     and store them (COPY + rollup); the clock stops when the last row is committed.
  2. baseline: the same number of rows, binary COPY straight into telemetry_gpusample, one
     commit per batch-sized chunk, from one connection.
Last line: JSON with e2e_samples_per_s, raw_copy_rows_per_s, ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--intervals", type=int, default=60, help="timestamps per batch")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="vigil-bench-")
    os.environ["VIGIL_DATA_DIR"] = tmp
    for var in ("DATABASE_URL", "CELERY_BROKER_URL"):
        os.environ.pop(var, None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from tests.helpers import WorkerProcess
    from webapp import embedded
    from webapp.fleet.services import node_token_issue

    try:
        call_command("migrate", verbosity=0)
        hostnames = [f"bench-node-{i:03d}" for i in range(args.nodes)]
        tokens = {h: node_token_issue("bench", h) for h in hostnames}
        batches = _build_batches(tokens, args.batches, args.intervals)
        expected = sum(b[1] for b in batches)
        print(f"{len(batches)} batches, {expected} GPU samples", file=sys.stderr)

        worker = WorkerProcess(
            os.environ["DATABASE_URL"],
            Path(tmp) / "worker.log",
            pool="prefork",
            concurrency=args.workers,
            visibility_timeout_s=600,
        )
        worker.start()
        from collectors.schema import INGEST_QUEUE, INGEST_TASK
        from webapp.celery import app

        t0 = time.perf_counter()
        with app.producer_or_acquire() as producer:
            for raw, _ in batches:
                app.send_task(INGEST_TASK, args=[raw], queue=INGEST_QUEUE, producer=producer)
        published = time.perf_counter() - t0
        while _count(connection) < expected:
            time.sleep(0.05)
            if time.perf_counter() - t0 > 600:
                raise SystemExit(f"timed out; worker log:\n{worker.log()[-3000:]}")
        e2e_s = time.perf_counter() - t0
        worker.stop()
        stored = _count(connection)

        raw_s = _raw_copy(connection, args.batches, args.intervals)
        result = {
            "e2e_samples_per_s": round(expected / e2e_s),
            "raw_copy_rows_per_s": round(expected / raw_s),
            "ratio": round((expected / e2e_s) / (expected / raw_s), 3),
            "samples": expected,
            "stored": stored,
            "batch_samples": 8 * args.intervals,
            "publish_per_s": round(len(batches) / published),
            "worker_processes": args.workers,
            "cpus": os.cpu_count(),
        }
        print(json.dumps(result))
    finally:
        embedded.stop_all()


def _build_batches(tokens: dict[str, str], count: int, intervals: int) -> list[tuple[str, int]]:
    """Wire batches (JSON text, sample count), 8 GPUs x `intervals` timestamps each."""
    from tests.helpers import make_batch

    hosts = list(tokens)
    rounds = -(-count // len(hosts))
    start = time.time() - rounds * intervals * 10 - 120
    out = []
    for i in range(count):
        host = hosts[i % len(hosts)]
        t0 = start + (i // len(hosts)) * intervals * 10
        batch = make_batch("bench", host, tokens[host], t0=t0, intervals=intervals)
        out.append((json.dumps(batch), len(batch["samples"])))
    return out


def _count(connection) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def _raw_copy(connection, count: int, intervals: int) -> float:
    """Binary COPY of count x (8 x intervals) rows into the same table; seconds taken."""
    from datetime import UTC, datetime

    from django.db import transaction

    from collectors.schema import GPU_FIELDS, GPU_FIELD_NAMES

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
        with transaction.atomic(), connection.cursor() as cur:
            with cur.copy(
                f"COPY telemetry_gpusample (gpu_id, ts, {cols}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
