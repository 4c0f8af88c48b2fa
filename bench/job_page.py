"""The 2,048-GPU job page in-process, at a job length of --hours: its view's time,
and cProfile's top entries with --profile.

    .venv/bin/python bench/job_page.py [--hours 8] [--gpus 2048] [--renders 3] [--profile]

Starts its own embedded PostgreSQL and Redis in a temporary folder, makes one running job of
--gpus GPUs (8 per node) started --hours ago, and fills the 1-minute rollup of every minute of
it straight from generate_series (GPU util, SM activity, power ... uniform noise; GPU 5 of the
first node slow, GPU 6 idle) and the hourly rollup from it (rollup_hourly's refresh), plus raw
samples of the last 10 minutes. Prints the median and the fastest of --renders renders of
/jobs/<id>/ (after one), in ms, and the page's source line. Last line: JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site  # noqa: E402 (after the path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument("--gpus", type=int, default=2048)
    parser.add_argument("--profile", action="store_true")
    # On a shared machine a render's time swings with the neighbours' load: more renders and
    # their minimum give a steadier figure than the median of three.
    parser.add_argument("--renders", type=int, default=3)
    args = parser.parse_args()
    with bench_site("vigil-jobpage-"):
        from django.test import Client

        t0 = time.perf_counter()
        job_id, user = _fill(args.gpus, args.hours)
        print(f"filled in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        client = Client()
        client.force_login(user)
        page = client.get(f"/jobs/{job_id}/")
        assert page.status_code == 200, page.status_code
        times = []
        for _ in range(max(args.renders, 1)):
            t0 = time.perf_counter()
            client.get(f"/jobs/{job_id}/")
            times.append((time.perf_counter() - t0) * 1000)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            client.get(f"/jobs/{job_id}/")
            prof.disable()
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
        text = page.content.decode()
        i = text.find("rollup")
        print(text[max(0, i - 200) : i + 200], file=sys.stderr)
        print(
            json.dumps(
                {
                    "gpus": args.gpus,
                    "hours": args.hours,
                    "job_page_ms": round(statistics.median(times), 1),
                    "job_page_min_ms": round(min(times), 1),
                    "bytes": len(page.content),
                }
            )
        )


def _fill(gpus: int, hours: float) -> tuple[int, object]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from webapp.fleet.models import Cluster, Gpu, Node
    from webapp.jobs.choices import JobState
    from webapp.jobs.models import Job, JobAllocation
    from webapp.telemetry.models import ROLLUP_METRICS
    from webapp.telemetry.partitions import partition_ensure
    from webapp.telemetry.rollup_hourly import _refresh

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    started = now - timedelta(hours=hours)
    cluster = Cluster.objects.create(name="acme-seren")
    nodes = Node.objects.bulk_create(
        Node(
            cluster=cluster, hostname=f"node-{k:05d}", state="up", token_hash=secrets.token_hex(32)
        )
        for k in range(gpus // 8)
    )
    rows = Gpu.objects.bulk_create(
        Gpu(node=n, index=i, uuid=f"GPU-{n.hostname}-{i}", model="NVIDIA A100-SXM4-80GB")
        for n in nodes
        for i in range(8)
    )
    job = Job.objects.create(
        cluster=cluster,
        scheduler_id="1000",
        state=JobState.RUNNING,
        start_at=started,
        gpus_requested=gpus,
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, node=g.node, gpu=g, gpu_index=g.index, start=started) for g in rows
    )
    day = started.date()
    while day <= now.date():
        for table in ("telemetry_gpusample", "telemetry_gpurollup1m", "telemetry_gpurollup1h"):
            partition_ensure(table, day)
        day += timedelta(days=1)
    slow, idle = rows[5].id, rows[6].id
    scale = {
        "gpu_util": 100,
        "power_w": 900,
        "sm_clock_mhz": 2000,
        "fb_used_bytes": 8e10,
        "gpu_temp_c": 80,
    }
    cols, vals = [], []
    for m in ROLLUP_METRICS:
        k = scale.get(m, 1)
        v = (
            f"(CASE WHEN g = {idle} THEN 0 WHEN g = {slow} AND '{m}' = 'sm_active' THEN 0.2 "
            f"ELSE 0.6 + 0.2 * random() END) * {k}"
        )
        cols += [f"{m}_min", f"{m}_max", f"{m}_sum", f"{m}_cnt"]
        vals += [f"{v} * 0.95", f"{v} * 1.05", f"({v}) * 4", "4"]
    ids = [g.id for g in rows]
    with connection.cursor() as cur:
        step = 3600
        t = started
        while t < now:
            hi = min(t + timedelta(seconds=step), now + timedelta(minutes=1))
            cur.execute(
                f"""INSERT INTO telemetry_gpurollup1m (gpu_id, minute, n, energy_mj_min,
                    energy_mj_max, {", ".join(cols)})
                SELECT g, m, 4, (extract(epoch FROM m) * 400000)::bigint,
                    (extract(epoch FROM m) * 400000 + 18000000)::bigint, {", ".join(vals)}
                FROM unnest(%s::bigint[]) g,
                    generate_series(%s::timestamptz, %s::timestamptz - interval '1 minute',
                    interval '1 minute') m
                ORDER BY 1, 2""",
                [ids, t, hi],
            )
            t = hi
        _refresh(started.replace(minute=0), now + timedelta(hours=1))
        cur.execute("ANALYZE telemetry_gpurollup1m")
        cur.execute("ANALYZE telemetry_gpurollup1h")
    user = get_user_model().objects.create_user("bench", password=secrets.token_urlsafe(12))
    user.is_staff = user.is_superuser = True
    user.save()
    return job.id, user


if __name__ == "__main__":
    main()
