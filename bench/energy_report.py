"""The monthly energy report from the hourly rollup, against recomputing it from raw samples,
in one run.

    .venv/bin/python bench/energy_report.py [--gpus 1000] [--raw-hours 6] [--repeat 3]

Starts its own embedded PostgreSQL (bench/common.py), migrates, and builds a 30-day month
(November 2026) of a cluster of --gpus GPUs (8 a node) at 15 s resolution: node-long jobs of
2-48 hours with idle gaps between them, five teams, all job types and outcomes.

A month of 1,000 GPUs at 15 s is 173M raw rows, too slow to COPY here; so:
  - the first --raw-hours hours are real raw samples (COPY into the sample partitions: NVML
    counter, power, utilization; a few counter resets), turned into hourly rows by Vigil's own
    rollup (`energy_rollups_rebuild`, timed as rebuild_s);
  - the rest of the month's hourly rows are written with COPY directly, as the rollup would
    write them for the same synthetic draw (constant power per GPU-hour).
Measured:
  - rollup_s: the month's report (`energy_report`) from the rollup, best of --repeat;
  - raw_s: the baseline, the raw span's report recomputed from raw samples in one SQL pass
    (counter deltas by window function, power integration where the counter went backwards
    or jumped, joined to allocations by time), best of --repeat; raw_s_month_estimate scales
    it to the month's rows (it grows with the rows; compacted raw samples, webapp/telemetry,
    would be read instead once that lands);
  - max_rel_diff: the largest relative difference between the rollup's and the raw
    recomputation's figures of the raw span (total, idle, each team, job type and outcome).
Also timed: trends_s (`energy_trends`, 12 months ending with the built one), daily_csv_s
(`energy_daily_rows`, the month's daily CSV rows) and metrics_totals_s (`energy_totals`, what
/metrics' energy counters sum: every hour the rollup holds, here the one month). Last line: JSON
with rollup_s, raw_s, raw_s_month_estimate, rebuild_s, trends_s, daily_csv_s, daily_csv_rows,
max_rel_diff, gpus, rollup_rows, raw_rows, raw_hours. Goals: rollup_s < 1, max_rel_diff < 0.001.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_site  # noqa: E402

GPUS_PER_NODE = 8
STEP_S = 15
MONTH_LO = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 30 * 24
TEAMS = ("llm", "vision", "speech", "agents", "infra")
TYPES = ("pretrain", "sft", "eval", "debug", "other")
STATES = ("completed", "completed", "cancelled", "failed", "node_fail")
IDLE_W, LIMIT_W = 60.0, 400.0
IPMI_PER_GPU_W = 1.5  # node IPMI = 1.5 x its GPUs (reference §2's ratio), on half the nodes

_RAW_SQL = """
WITH d AS (
    SELECT s.gpu_id, s.ts, s.power_w, s.gpu_util,
        s.energy_mj - lag(s.energy_mj) OVER w AS de_mj,
        lag(s.power_w) OVER w AS p0,
        extract(epoch FROM s.ts - lag(s.ts) OVER w) AS dt
    FROM telemetry_gpusample s
    WHERE s.ts >= %(lo)s AND s.ts < %(hi)s
    WINDOW w AS (PARTITION BY s.gpu_id ORDER BY s.ts)
), e AS (
    SELECT d.gpu_id, d.ts, d.gpu_util,
        CASE WHEN d.de_mj >= 0 AND d.de_mj / 1000.0 / d.dt <= 2 * %(limit)s
            THEN d.de_mj / 1000.0 ELSE (d.power_w + d.p0) / 2 * d.dt END AS j
    FROM d WHERE d.dt IS NOT NULL
)
SELECT coalesce(a.job_id, 0), sum(e.j)
FROM e
LEFT JOIN jobs_joballocation a
    ON a.gpu_id = e.gpu_id AND e.ts >= a.start AND (a."end" IS NULL OR e.ts < a."end")
GROUP BY 1
"""


def plan(gpus: int, seed: int = 7):
    """Per node: jobs as (start hour, end hour, team, type, state, power W)."""
    rng = np.random.default_rng(seed)
    nodes = gpus // GPUS_PER_NODE
    out = []
    for _ in range(nodes):
        h, jobs = int(rng.integers(0, 4)), []
        while h < HOURS:
            length = int(rng.integers(2, 49))
            end = min(HOURS, h + length)
            jobs.append((h, end, TEAMS[rng.integers(5)], TYPES[rng.integers(5)],
                         STATES[rng.integers(5)], float(rng.uniform(200, 450))))  # fmt: skip
            h = end + int(rng.integers(0, 7))
        out.append(jobs)
    return out


def power_per_hour(node_jobs) -> tuple[np.ndarray, np.ndarray]:
    """(power W per hour, job index per hour or -1) for one node's plan."""
    power = np.full(HOURS, IDLE_W)
    job = np.full(HOURS, -1)
    for k, (a, b, *_rest, p) in enumerate(node_jobs):
        power[a:b] = p
        job[a:b] = k
    return power, job


def build(gpus: int, raw_hours: int) -> dict:
    from django.db import connection

    from webapp.fleet.models import Cluster, Gpu, Node
    from webapp.jobs.models import Job, JobAllocation
    from webapp.telemetry.partitions import partition_ensure

    cluster = Cluster.objects.create(name="bench")
    nodes_plan = plan(gpus)
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"n{i:04d}", token_hash="x") for i in range(len(nodes_plan))
    )
    gpu_rows = Gpu.objects.bulk_create(
        Gpu(node=n, index=g, uuid=f"GPU-bench-{n.hostname}-{g}", model="NVIDIA A100-SXM4-80GB")
        for n in nodes
        for g in range(GPUS_PER_NODE)
    )
    Gpu.objects.update(first_seen=MONTH_LO)
    gpu_ids = np.array([g.id for g in gpu_rows]).reshape(len(nodes), GPUS_PER_NODE)
    jobs, allocs, job_ids = [], [], {}
    for ni, node_jobs in enumerate(nodes_plan):
        for k, (a, b, team, jtype, state, _p) in enumerate(node_jobs):
            start, end = MONTH_LO + timedelta(hours=a), MONTH_LO + timedelta(hours=b)
            jobs.append(Job(cluster=cluster, scheduler_id=f"{ni}-{k}", name=f"job-{ni}-{k}",
                            user=f"u{(ni + k) % 40}", team=team, job_type=jtype, state=state,
                            submit_at=start, start_at=start, end_at=end, gpus_requested=8,
                            last_checkpoint_at=end - timedelta(minutes=30)))  # fmt: skip
    Job.objects.bulk_create(jobs, batch_size=5000)
    for j in Job.objects.filter(cluster=cluster).values("id", "scheduler_id"):
        job_ids[j["scheduler_id"]] = j["id"]
    for ni, node_jobs in enumerate(nodes_plan):
        for k, (a, b, *_rest) in enumerate(node_jobs):
            for g in range(GPUS_PER_NODE):
                allocs.append(JobAllocation(job_id=job_ids[f"{ni}-{k}"], node=nodes[ni],
                                            gpu_id=int(gpu_ids[ni, g]), gpu_index=g,
                                            start=MONTH_LO + timedelta(hours=a),
                                            end=MONTH_LO + timedelta(hours=b)))  # fmt: skip
    JobAllocation.objects.bulk_create(allocs, batch_size=20000)

    # Raw samples of the first raw_hours (plus none before: the month starts the counter).
    for d in range(raw_hours // 24 + 1):
        partition_ensure("telemetry_gpusample", (MONTH_LO + timedelta(days=d)).date())
        partition_ensure("telemetry_nodesample", (MONTH_LO + timedelta(days=d)).date())
    rng = np.random.default_rng(3)
    steps = raw_hours * 3600 // STEP_S
    t = MONTH_LO.timestamp() + np.arange(steps) * STEP_S
    raw_rows = 0
    t_copy = time.perf_counter()
    with connection.cursor() as cur:
        for ni, node_jobs in enumerate(nodes_plan):
            power_h, job_h = power_per_hour(node_jobs)
            hour = (np.arange(steps) * STEP_S) // 3600
            rows = []
            for g in range(GPUS_PER_NODE):
                p = power_h[hour] * rng.uniform(0.9, 1.1, steps)
                util = np.where(job_h[hour] >= 0, 85.0, 0.0)
                e = np.concatenate([[0.0], np.cumsum((p[1:] + p[:-1]) / 2 * STEP_S)]) * 1000
                e += 5e9 * g
                if ni % 10 == 0 and g == 0 and steps > 200:
                    e[steps // 2 :] -= e[steps // 2] - 1000  # a driver reload mid-span
                gid = int(gpu_ids[ni, g])
                rows.extend(
                    (gid, datetime.fromtimestamp(ts, UTC), float(pw), LIMIT_W, int(en), float(u))
                    for ts, pw, en, u in zip(t, p, e, util, strict=True)
                )
            with cur.cursor.copy(
                "COPY telemetry_gpusample (gpu_id, ts, power_w, power_limit_w, energy_mj, gpu_util)"
                " FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(row)
            raw_rows += len(rows)
            ipmi = ni % 2 == 0
            with cur.cursor.copy(
                "COPY telemetry_nodesample (node_id, ts, server_power_w, cpu_util) FROM STDIN"
            ) as copy:
                for ts, hr in zip(t, hour, strict=True):
                    w = IPMI_PER_GPU_W * GPUS_PER_NODE * power_h[hr] if ipmi else None
                    copy.write_row((nodes[ni].id, datetime.fromtimestamp(ts, UTC), w, 30.0))
    print(f"raw: {raw_rows:,} rows in {time.perf_counter() - t_copy:.1f} s", file=sys.stderr)

    # The rest of the month: hourly rows with COPY, as the rollup writes them.
    now = datetime.now(UTC)
    rollup_rows = 0
    t_copy = time.perf_counter()
    with connection.cursor() as cur:
        with cur.cursor.copy(
            "COPY energy_gpuenergyhour (cluster_id, node_id, gpu_id, hour, job_id, counter_j,"
            " integrated_j, model_j, covered_s, idle_j, idle_s, samples, hour_samples,"
            " computed_at) FROM STDIN"
        ) as copy:
            for ni, node_jobs in enumerate(nodes_plan):
                power_h, job_h = power_per_hour(node_jobs)
                for h in range(raw_hours, HOURS):
                    hour = MONTH_LO + timedelta(hours=h)
                    k = job_h[h]
                    job_id = job_ids[f"{ni}-{k}"] if k >= 0 else None
                    j = power_h[h] * 3600
                    for g in range(GPUS_PER_NODE):
                        copy.write_row((cluster.id, nodes[ni].id, int(gpu_ids[ni, g]), hour,
                                        job_id, j, 0.0, 0.0, 3600.0, 0.0, 0.0, 240, 240, now))  # fmt: skip
                        rollup_rows += 1
        with cur.cursor.copy(
            "COPY energy_nodeenergyhour (cluster_id, node_id, hour, ipmi_j, ipmi_s, model_j,"
            " gpu_j, computed_at) FROM STDIN"
        ) as copy:
            for ni, node_jobs in enumerate(nodes_plan):
                power_h, _ = power_per_hour(node_jobs)
                for h in range(raw_hours, HOURS):
                    gpu_j = GPUS_PER_NODE * power_h[h] * 3600
                    it = IPMI_PER_GPU_W * gpu_j
                    ipmi = ni % 2 == 0
                    copy.write_row((cluster.id, nodes[ni].id, MONTH_LO + timedelta(hours=h),
                                    it if ipmi else 0.0, 3600.0 if ipmi else 0.0,
                                    0.0 if ipmi else it, gpu_j, now))  # fmt: skip
        # The job-hour sums the rollup keeps beside its GPU-hour rows (services.py).
        cur.execute(
            "INSERT INTO energy_jobenergyhour (cluster_id, hour, job_id, gpus, counter_j,"
            " integrated_j, model_j, covered_s, idle_j, idle_s)"
            " SELECT cluster_id, hour, job_id, count(*), sum(counter_j), sum(integrated_j),"
            " sum(model_j), sum(covered_s), sum(idle_j), sum(idle_s) FROM energy_gpuenergyhour"
            " GROUP BY cluster_id, hour, job_id"
        )
        cur.execute("ANALYZE energy_gpuenergyhour; ANALYZE energy_nodeenergyhour;")
        cur.execute("ANALYZE energy_jobenergyhour;")
        cur.execute("ANALYZE telemetry_gpusample; ANALYZE jobs_joballocation;")
    print(f"hourly: {rollup_rows:,} rows in {time.perf_counter() - t_copy:.1f} s", file=sys.stderr)
    return {"cluster": cluster, "raw_rows": raw_rows, "rollup_rows": rollup_rows}


def raw_figures(lo: datetime, hi: datetime) -> dict[str, float]:
    """The baseline: GPU kWh of the raw span by job (one SQL pass), grouped as the report."""
    from django.db import connection

    from webapp.jobs.models import Job

    with connection.cursor() as cur:
        cur.execute(_RAW_SQL, {"lo": lo, "hi": hi, "limit": LIMIT_W})
        by_job = dict(cur.fetchall())
    meta = {
        j["id"]: j
        for j in Job.objects.filter(id__in=list(by_job)).values("id", "team", "job_type", "state")
    }
    out: dict[str, float] = {
        "total": sum(by_job.values()) / 3.6e6,
        "idle": by_job.get(0, 0.0) / 3.6e6,
    }
    for job_id, j in by_job.items():
        if job_id == 0:
            continue
        m = meta[job_id]
        for key in (f"team:{m['team']}", f"type:{m['job_type']}", f"state:{m['state']}"):
            out[key] = out.get(key, 0.0) + j / 3.6e6
    return out


def rollup_figures(r) -> dict[str, float]:
    out = {"total": r.gpu_kwh, "idle": r.idle_kwh}
    # The raw side groups by the job's account (the bench's "five teams"; no Team rules).
    for prefix, lines in (("team", r.by_account), ("type", r.by_type)):
        for x in lines:
            out[f"{prefix}:{x.key}"] = x.gpu_kwh
    return out


def best(fn, repeat: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--raw-hours", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with bench_site("vigil-bench-energy-", unset=("VIGIL_CACHE_URL",)):
        from webapp.energy.daily import energy_daily_rows
        from webapp.energy.selectors import energy_report, energy_totals
        from webapp.energy.services import energy_rollups_rebuild
        from webapp.energy.trends import energy_trends

        built = build(args.gpus, args.raw_hours)
        cluster = built["cluster"]
        lo, hi = MONTH_LO, MONTH_LO + timedelta(hours=args.raw_hours)
        t0 = time.perf_counter()
        energy_rollups_rebuild(cluster.id, lo, hi)
        rebuild_s = time.perf_counter() - t0
        now = MONTH_LO + timedelta(hours=HOURS)
        rollup_s, month = best(lambda: energy_report(cluster, MONTH_LO, now, now=now), args.repeat)
        # The report's other reads of the rollup: 12 months of trends (the one month built
        # here, and eleven empty ones) and the daily CSV's rows.
        trends_s, _ = best(lambda: energy_trends(cluster, f"{MONTH_LO:%Y-%m}"), args.repeat)
        daily_s, daily = best(lambda: energy_daily_rows(cluster, MONTH_LO, now), args.repeat)
        # /metrics' energy counters: every hour the rollup holds, summed again (a month here).
        totals_s, _ = best(energy_totals, args.repeat)
        raw_s, raw = best(lambda: raw_figures(lo, hi), args.repeat)
        span = rollup_figures(energy_report(cluster, lo, hi, now=now))
        diffs = {
            k: abs(span.get(k, 0.0) - v) / v
            for k, v in raw.items()
            if k.startswith(("total", "idle", "team", "type")) and v
        }
        worst = max(diffs, key=diffs.get)
        print(f"month: {month.gpu_kwh / 1000:.1f} MWh GPU, {month.facility_kwh / 1000:.1f} MWh facility; "
              f"worst figure {worst} ({diffs[worst]:.2e})", file=sys.stderr)  # fmt: skip
        result = {
            "rollup_s": round(rollup_s, 3),
            "raw_s": round(raw_s, 3),
            "raw_s_month_estimate": round(raw_s * HOURS / args.raw_hours, 1),
            "rebuild_s": round(rebuild_s, 2),
            "trends_s": round(trends_s, 3),
            "daily_csv_s": round(daily_s, 3),
            "daily_csv_rows": len(daily),
            "metrics_totals_s": round(totals_s, 3),
            "max_rel_diff": float(f"{diffs[worst]:.3g}"),
            "gpus": args.gpus,
            "rollup_rows": built["rollup_rows"],
            "raw_rows": built["raw_rows"],
            "raw_hours": args.raw_hours,
            "month_gpu_mwh": round(month.gpu_kwh / 1000, 2),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
