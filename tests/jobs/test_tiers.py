"""Job pages, the characterization and evaluation phases read the retention tier that still
holds their span (webapp/telemetry/tiers.py): a job older than the 1-minute rollup's 35 days
is drawn from the hourly rollup, a quarter's characterization too, compacted samples give the
same bands as raw ones, and every page says which resolution it shows."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.db import connection

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from webapp.core.units import GIB
from webapp.core.windows import Window
from webapp.evaluation.phases import eval_phases
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Gpu, Node
from webapp.jobs.characterization import PERCENTILES, telemetry_cdfs
from webapp.jobs.models import Job, JobAllocation
from webapp.telemetry import compaction, tiers
from webapp.telemetry.partitions import known_forget, partitions_maintain
from webapp.telemetry.rollup_hourly import rollups_hourly_refresh
from webapp.telemetry.services import rollups_refresh, samples_ingest

HOUR = 3600
DAY = 86400


def _col(name: str) -> int:
    return 2 + GPU_FIELD_NAMES.index(name)  # a wire row is [index, ts, *GPU_FIELDS]


def _ingest_old(
    settings,
    cluster: str,
    hostname: str,
    *,
    t0: float,
    intervals: int,
    step_s: float,
    gpus: int,
    values: Callable[[int, int], dict[str, float | int]],
) -> Node:
    """Samples from long ago, rolled up by minute and hour while retention still allowed
    them (as they were when they were new); the caller then applies today's retention."""
    settings.VIGIL_RETENTION_DAYS = 400
    settings.VIGIL_ROLLUP_RETENTION_DAYS = 400
    token = fleet_services.node_token_issue(cluster, hostname)
    batch = make_batch(
        cluster, hostname, token, t0=t0, intervals=intervals, step_s=step_s, gpus=gpus
    )
    for row in batch["samples"]:
        i, k = row[0], round((row[1] - t0) / step_s)
        for name, value in values(i, k).items():
            row[_col(name)] = value
    assert samples_ingest(json.dumps(batch)).samples_stored == gpus * intervals
    while rollups_refresh() != (0, 0):
        pass
    while rollups_hourly_refresh()["late"]:
        pass
    return Node.objects.get(cluster__name=cluster, hostname=hostname)


def _apply_retention(settings) -> dict[str, list[str]]:
    """Today's retention (14 days of samples, 35 of 1-minute rollup), run as the beat does
    until nothing is left to drop; returns the partitions dropped per table."""
    settings.VIGIL_RETENTION_DAYS = 14
    settings.VIGIL_ROLLUP_RETENTION_DAYS = 35
    dropped: dict[str, list[str]] = {}
    while True:
        report = partitions_maintain()
        for table, r in report.items():
            dropped.setdefault(table, []).extend(r["dropped"])
        if not any(r["dropped"] for r in report.values()):
            break
    known_forget()
    return dropped


def _rows(table: str, since: datetime, until: datetime, ts: str = "ts") -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table} WHERE {ts} >= %s AND {ts} < %s", [since, until])
        return cur.fetchone()[0]


def _job(
    node: Node, sid: str, indices: list[int], start: datetime, end: datetime, kind: str = "pretrain"
) -> Job:
    job = Job.objects.create(
        cluster=node.cluster, scheduler_id=sid, name=f"job-{sid}", job_type=kind,
        state="completed", submit_at=start, start_at=start, end_at=end,
        gpus_requested=len(indices),
    )  # fmt: skip
    JobAllocation.objects.bulk_create(
        JobAllocation(
            job=job,
            node=node,
            gpu=Gpu.objects.get(node=node, index=i),
            gpu_index=i,
            start=start,
            end=end,
        )  # fmt: skip
        for i in indices
    )
    return job


# --- A job older than the 1-minute rollup keeps ----------------------------------------------

GPUS = 20  # more than SERIES_GPUS_MAX: the big job's page draws bands
STEP_S = 300.0


def _util(i: int) -> float:
    return 5.0 if i == GPUS - 1 else 60.0 + i % 4  # the last GPU idles: an outlier


@pytest.fixture
def old_jobs(db, settings):
    """Two 4-hour jobs that ended 60 days ago on one 20-GPU node: one on GPU 0, one on all
    20. Samples every 5 min; energy rises 1e6 mJ per sample on every GPU."""
    t0 = float(int(time.time() // DAY) * DAY - 60 * DAY)
    node = _ingest_old(
        settings, "tiers", "gpu-old-01", t0=t0, intervals=49, step_s=STEP_S, gpus=GPUS,
        values=lambda i, k: {"gpu_util": _util(i), "energy_mj": 10**9 + k * 1_000_000},
    )  # fmt: skip
    start = datetime.fromtimestamp(t0, UTC)
    end = start + timedelta(hours=4)
    small = _job(node, "old-1", [0], start, end)
    big = _job(node, "old-20", list(range(GPUS)), start, end)
    dropped = _apply_retention(settings)
    # The samples and the 1-minute rollup of those days are gone; the hourly rollup stays.
    assert dropped["telemetry_gpusample"] and dropped["telemetry_gpurollup1m"]
    assert _rows("telemetry_gpurollup1m", start, end, "minute") == 0
    assert _rows("telemetry_gpurollup1h", start, end, "hour") == GPUS * 4
    return small, big


def test_a_job_older_than_35_days_still_has_its_utilization_on_its_page(operator_client, old_jobs):
    small, _ = old_jobs
    response = operator_client.get(f"/jobs/{small.id}/")
    assert response.status_code == 200
    html = response.content.decode()
    telemetry = response.context["telemetry"]
    assert telemetry.source == "hourly rollup" and "(hourly rollup)" in html
    series = telemetry.series["gpu-old-01 GPU 0"]
    # Hours 0-3 and the hour the job ended at (its last sample, 4 h after the first).
    assert len(series.ts) == 5 and set(series.values["gpu_util"]) == {60.0}
    assert "No samples from the job" not in html
    assert response.context["figures"]["series"]["data"][0]["y"] == [60.0] * 5
    energy = response.context["energy"]
    assert "hourly rollup" in energy.method and "hourly rollup" in html
    assert energy.per_gpu[0].energy_mj == 48 * 1_000_000  # the same as the raw samples said


def test_a_large_old_job_draws_its_bands_and_outlier_from_the_hourly_rollup(
    operator_client, old_jobs
):
    _, big = old_jobs
    response = operator_client.get(f"/jobs/{big.id}/")
    assert response.status_code == 200
    bands = response.context["bands"]
    assert bands.source == "hourly rollup" and bands.bucket_s == HOUR
    assert len(bands.ts) == 5 and bands.gpus == [GPUS] * 5
    util = bands.bands["gpu_util"]
    assert util.lo == [5.0] * 5 and util.hi == [63.0] * 5
    assert [(o.metric, o.allocation.gpu_index) for o in bands.outliers] == [("gpu_util", GPUS - 1)]
    assert bands.lines[bands.outliers[0].allocation.id][1]["gpu_util"] == [5.0] * 5
    total = sum(n.kwh for n in response.context["nodes"])
    assert total == pytest.approx(GPUS * 48e6 / 3.6e9)


# --- Compacted samples give the same bands --------------------------------------------------


def test_a_job_page_whose_samples_are_compacted_shows_the_same_bands(operator_client, db):
    t0 = float(int(time.time() // HOUR) * HOUR - 10 * HOUR)  # past the 6 h horizon
    token = fleet_services.node_token_issue("tiers", "gpu-cmp-01")
    batch = make_batch("tiers", "gpu-cmp-01", token, t0=t0, intervals=61, step_s=60, gpus=GPUS)
    for row in batch["samples"]:
        i, k = row[0], round((row[1] - t0) / 60)
        row[_col("gpu_util")] = _util(i) + (k % 5)
        row[_col("power_w")] = 300.0 + 7 * i + k % 3
    samples_ingest(json.dumps(batch))
    node = Node.objects.get(cluster__name="tiers", hostname="gpu-cmp-01")
    start = datetime.fromtimestamp(t0, UTC)
    job = _job(node, "cmp-20", list(range(GPUS)), start, start + timedelta(hours=1))

    def bands() -> tuple:
        response = operator_client.get(f"/jobs/{job.id}/")
        assert response.status_code == 200
        b = response.context["bands"]
        outliers = [(o.metric, o.allocation.id, o.mean, o.median) for o in b.outliers]
        return b.source, b.ts, b.gpus, b.bands, b.means, outliers, b.lines

    before = bands()
    assert before[0].startswith("raw samples") and len(before[1]) == 61
    assert before[5]  # the idle GPU is named
    compaction.samples_compact()
    assert _rows("telemetry_gpusample", start, start + timedelta(hours=2)) == 0
    assert bands() == before


# --- A characterization across the 1-minute rollup's horizon ----------------------------------


def test_a_characterization_across_the_horizon_equals_the_one_from_raw_data(db, settings):
    """Four days of 4 GPUs, the first two older than the 1-minute rollup keeps: the window is
    read from the hourly rollup whole. Each GPU-hour's samples share one value, so per-hour
    means are the samples' values and the CDF must match the raw samples' within the hourly
    rows' percentile resolution; the older days' values are all low and the newer ones high,
    so a reader that left out the older part (or drew nothing) fails."""
    now = time.time()
    t0 = float(int((now - 37 * DAY) // DAY) * DAY)
    hours = 4 * 24
    rng = np.random.default_rng(7)
    util = {(i, h): float(rng.integers(0, 40) if h < 48 else rng.integers(60, 101))
            for i in range(4) for h in range(hours)}  # fmt: skip
    power = {
        (i, h): 100.0 + 5 * float(rng.integers(0, 100)) for i in range(4) for h in range(hours)
    }
    node = _ingest_old(
        settings, "tiers-q", "gpu-q-01", t0=t0, intervals=hours * 4, step_s=900.0, gpus=4,
        values=lambda i, k: {"gpu_util": util[(i, k // 4)], "power_w": power[(i, k // 4)]},
    )  # fmt: skip
    since = datetime.fromtimestamp(t0, UTC)
    until = since + timedelta(hours=hours)
    _apply_retention(settings)
    assert since < tiers.MINUTE.kept_since() < until  # the window spans the boundary
    assert _rows("telemetry_gpurollup1m", since, since + timedelta(days=1), "minute") == 0

    result = telemetry_cdfs(node.cluster, since, until)
    assert result.source == "hourly rollup (per-hour means)"
    assert result.rows == 4 * hours and result.sampled_pct is None
    for metric, values in (("gpu_util", util), ("power_w", power)):
        raw = np.repeat(np.array(list(values.values())), 4)  # four samples per GPU-hour
        curve = result.curves[metric]
        assert len(curve) == len(PERCENTILES)
        resolution = 1.5 / (4 * hours)  # a rank of the hourly rows, and rounding
        for value, p in curve:
            lo = np.quantile(raw, max(p - resolution, 0.0))
            hi = np.quantile(raw, min(p + resolution, 1.0))
            assert lo - 1e-9 <= value <= hi + 1e-9, (metric, p, value, lo, hi)
    # Its lowest tenth is the older days' utilization, which only the hourly rollup holds.
    assert dict((p, v) for v, p in result.curves["gpu_util"])[0.1] < 40


# --- Evaluation phases older than samples are kept ---------------------------------------------


def test_evaluation_phases_older_than_samples_come_from_the_minute_rollup(db, settings):
    """An evaluation 20 days ago (samples dropped, 1-minute rollup kept): loading 3 min with
    memory rising, inference 5 min, metrics 2 min, read to the minute."""
    t0 = float(int((time.time() - 20 * DAY) // HOUR) * HOUR)

    def profile(i: int, k: int) -> dict:  # every 10 s; minutes 0-2 load, 3-7 infer, 8-9 idle
        minute = k // 6
        if minute < 3:
            return {"sm_active": 0.0, "fb_used_bytes": minute * 8 * GIB}
        return {"sm_active": 0.7 if minute < 8 else 0.0, "fb_used_bytes": 24 * GIB}

    node = _ingest_old(
        settings, "tiers-ev", "gpu-ev-01", t0=t0, intervals=60, step_s=10.0, gpus=1,
        values=profile,
    )  # fmt: skip
    start = datetime.fromtimestamp(t0, UTC)
    _job(node, "ev-1", [0], start, start + timedelta(minutes=10), kind="eval")
    _apply_retention(settings)
    assert _rows("telemetry_gpusample", start, start + timedelta(hours=1)) == 0

    e = eval_phases(Window(node.cluster))
    assert (e.jobs, e.allocations, e.from_rollup) == (1, 1, 1)
    assert e.gpu_s == {"load": 180.0, "infer": 300.0, "metrics": 120.0, "idle": 0.0}
