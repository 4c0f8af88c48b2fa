"""The characterization's GPU time of requeued jobs' earlier runs, at a real cluster's size.

    .venv/bin/python bench/characterization_requeue.py [--jobs 1000000] [--requeued 2000]

Starts its own embedded PostgreSQL in a temporary folder, migrates, and writes with SQL one
cluster of --jobs jobs (every fifth an 8-GPU job with its 8 allocation rows, 1.6 million rows
at the default; the rest 1-GPU jobs of an imported trace, which have none), --requeued of the
8-GPU jobs with an earlier run (8 closed allocations and a `requeued` event), the tallies
rebuilt and the tables analyzed. Where the jobs carry the earlier runs' GPU time
(`Job.earlier_runs_gpu_time_s`) it is filled as the migration fills existing rows (timed:
backfill_s). Then, each the median of three runs:
  - earlier_runs_join_s: the query the characterization ran before that column, its allocations
    joined to the cluster's GPU jobs (the baseline, measured in the same run);
  - earlier_runs_column_s: the sum of the column, where it exists;
  - characterization_s: `jobs_characterize` of the whole history, nothing cached;
  - gpu_hours_requeued: the GPU-hours the characterization credits the earlier runs, which
    both ways must agree on (8 GPUs x 1 h x --requeued).
Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site  # noqa: E402 (after the path)

# The characterization's earlier-runs query before the column (the baseline).
JOIN_SQL = (
    "SELECT j.job_type, j.state, sum(date_part('epoch', a.\"end\" - a.start)) "
    "FROM jobs_joballocation a JOIN "
    "(SELECT id, job_type, state, start_at FROM jobs_job WHERE cluster_id = %s "
    " AND gpus_requested > 0) j ON j.id = a.job_id "
    'WHERE a."end" IS NOT NULL AND (j.start_at IS NULL OR a.start < j.start_at) '
    "GROUP BY 1, 2"
)
COLUMN_SQL = (
    "SELECT job_type, state, sum(earlier_runs_gpu_time_s) FROM jobs_job "
    "WHERE cluster_id = %s AND gpus_requested > 0 AND earlier_runs_gpu_time_s > 0 "
    "GROUP BY 1, 2"
)

JOBS_SQL = """
INSERT INTO jobs_job (cluster_id, scheduler_id, name, "user", job_type, job_type_explicit,
    state, source, submit_at, start_at, end_at, gpus_requested, nodes_requested,
    cpus_requested)
SELECT %(cluster)s, i::text, 'job-' || i, 'u' || (i %% 97),
    (ARRAY['pretrain','sft','mllm','eval','debug','other'])[1 + i %% 6], true,
    (ARRAY['completed','failed','cancelled'])[1 + i %% 3], 'acmetrace',
    t, t + interval '60 seconds', t + interval '60 seconds' + (i %% 7200) * interval '1 second',
    CASE WHEN i %% 5 = 0 THEN 8 ELSE 1 END, 1, 8
FROM generate_series(1, %(jobs)s) i,
    LATERAL (SELECT timestamptz '2026-01-01' + i * interval '20 seconds' AS t) x
"""
# Each 8-GPU job's allocation on one of the nodes, its run from start to end.
ALLOCATIONS_SQL = """
INSERT INTO jobs_joballocation (job_id, node_id, gpu_index, start, "end")
SELECT j.id, n.ids[1 + (j.id %% array_length(n.ids, 1))], g, j.start_at, j.end_at
FROM jobs_job j, generate_series(0, 7) g,
    (SELECT array_agg(id ORDER BY id) ids FROM fleet_node WHERE cluster_id = %(cluster)s) n
WHERE j.cluster_id = %(cluster)s AND j.gpus_requested = 8
"""
# --requeued of them ran an hour before a requeue, half an hour before their last start.
REQUEUED_SQL = """
WITH r AS (SELECT id, start_at FROM jobs_job
           WHERE cluster_id = %(cluster)s AND gpus_requested = 8 ORDER BY id LIMIT %(n)s),
a AS (INSERT INTO jobs_joballocation (job_id, node_id, gpu_index, start, "end")
      SELECT r.id, (SELECT min(id) FROM fleet_node WHERE cluster_id = %(cluster)s), g,
          r.start_at - interval '90 minutes', r.start_at - interval '30 minutes'
      FROM r, generate_series(0, 7) g)
INSERT INTO jobs_jobevent (job_id, kind, ts, state, detail)
SELECT id, 'requeued', start_at - interval '30 minutes', 'pending', '{}'::jsonb FROM r
"""


def _median_s(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requeued", type=int, default=2000)
    args = parser.parse_args()

    with bench_site("vigil-bench-requeue-"):
        from django.core.cache import cache
        from django.db import connection

        from webapp.core.windows import Window
        from webapp.fleet.models import Cluster, Node
        from webapp.jobs.characterization import jobs_characterize
        from webapp.jobs.models import Job
        from webapp.jobs.services import job_tallies_rebuild

        cluster = Cluster.objects.create(name="bench")
        Node.objects.bulk_create(
            Node(cluster=cluster, hostname=f"gpu-{i:04d}", token_hash="") for i in range(250)
        )
        params = {"cluster": cluster.id, "jobs": args.jobs, "n": args.requeued}
        start = time.perf_counter()
        with connection.cursor() as cur:
            cur.execute("SELECT set_config('vigil.job_tally', 'off', false)")
            cur.execute(JOBS_SQL, params)
            cur.execute(ALLOCATIONS_SQL, params)
            cur.execute(REQUEUED_SQL, params)
            cur.execute("SELECT set_config('vigil.job_tally', 'on', false)")
        job_tallies_rebuild(cluster.id)
        out: dict = {"jobs": args.jobs, "requeued": args.requeued}
        out["allocations"] = (
            connection.cursor().execute("SELECT count(*) FROM jobs_joballocation").fetchone()[0]
        )
        has_column = hasattr(Job, "earlier_runs_gpu_time_s")
        if has_column:
            from importlib import import_module

            migration = import_module("webapp.jobs.migrations.0007_job_earlier_runs_gpu_time")
            start_fill = time.perf_counter()
            with connection.cursor() as cur:
                migration.earlier_runs_fill(cur)
            out["backfill_s"] = round(time.perf_counter() - start_fill, 2)
        with connection.cursor() as cur:
            cur.execute("ANALYZE jobs_job")
            cur.execute("ANALYZE jobs_joballocation")
            cur.execute("ANALYZE jobs_jobevent")
        print(f"built in {time.perf_counter() - start:.1f} s", file=sys.stderr)

        def run(sql: str) -> None:
            with connection.cursor() as cur:
                cur.execute(sql, [cluster.id])
                cur.fetchall()

        out["earlier_runs_join_s"] = _median_s(lambda: run(JOIN_SQL))
        if has_column:
            out["earlier_runs_column_s"] = _median_s(lambda: run(COLUMN_SQL))
            out["ratio"] = round(out["earlier_runs_join_s"] / out["earlier_runs_column_s"], 1)
        window = Window(cluster)

        def characterize() -> None:
            cache.clear()
            jobs_characterize(window)

        out["characterization_s"] = _median_s(characterize)
        with_earlier = jobs_characterize(window).total.gpu_time_s
        with connection.cursor() as cur:
            cur.execute(
                "SELECT sum(date_part('epoch', end_at - start_at) * gpus_requested) "
                "FROM jobs_job WHERE cluster_id = %s",
                [cluster.id],
            )
            last_runs = cur.fetchone()[0]
        out["gpu_hours_requeued"] = round((with_earlier - last_runs) / 3600, 3)
        print(json.dumps(out))


if __name__ == "__main__":
    main()
