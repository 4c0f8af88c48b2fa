"""Compaction of raw GPU samples into packed GPU-hours: bit-exact, late and duplicate samples,
a crash mid-chunk, the readers before and after, partition pruning, retention tiers."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.db import connection

from collectors.schema import GPU_FIELD_NAMES, GPU_FIELDS
from tests.helpers import make_batch
from tests.telemetry.conftest import plan_scans
from webapp.telemetry import compaction
from webapp.telemetry.models import CompactDirty, GpuRollup1m
from webapp.telemetry.packing import Column, PackError, pack, pack_hour, unpack, unpack_hour
from webapp.telemetry.samples import (
    FIELDS,
    HOT_FIELDS,
    REST_FIELDS,
    gpu_samples,
    samples_relation,
)
from webapp.telemetry.selectors import RANGES, gpus_series
from webapp.telemetry.services import rollups_refresh, samples_ingest

HOUR = 3600


# --- Packing, without Django -----------------------------------------------------------------


def _columns(n: int, rng: np.random.Generator) -> dict[str, Column]:
    cols = {}
    for k, (name, kind) in enumerate(FIELDS):
        if kind == "float":
            values = rng.uniform(-1e6, 1e6, n).astype(np.float32)
            values[:4] = [-0.0, np.float32(1e-45), np.finfo(np.float32).max, 0.0]
        else:
            values = rng.integers(0, 2**63 - 17, n, dtype=np.int64)
            values[:3] = [0, 2**63 - 17, 5]  # extreme jumps both ways
        valid = None
        if k % 3 == 1:
            valid = rng.random(n) > 0.3  # some NULL
        elif k % 3 == 2 and k % 2:
            valid = np.zeros(n, bool)  # all NULL
        if valid is not None:
            values = values.copy()
            values[~valid] = np.nan if kind == "float" else 0
        cols[name] = Column(values, valid)
    return cols


def test_pack_round_trips_every_bit_null_and_microsecond():
    rng = np.random.default_rng(5)
    n = 240
    ts = 1_700_000_000_000_000 + np.cumsum(rng.integers(1, 30_000_000, n))  # jittered µs
    cols = _columns(n, rng)
    back = unpack(pack(ts, cols, FIELDS), FIELDS)
    assert np.array_equal(back.ts_us, ts)
    for name, col in cols.items():
        got = back.columns[name]
        assert np.array_equal(got.present(), col.present()), name
        present = col.present()
        assert np.array_equal(
            got.values[present].view(np.uint8), col.values[present].view(np.uint8)
        )


def test_an_hour_is_two_blobs_and_energy_reads_only_the_small_one():
    rng = np.random.default_rng(6)
    n = 240
    ts = 1_700_000_000_000_000 + np.arange(n) * 15_000_000
    cols = _columns(n, rng)
    hot, rest = pack_hour(ts, cols, HOT_FIELDS, REST_FIELDS)
    assert len(hot) * 5 < len(rest)
    energy = unpack_hour(hot, None, HOT_FIELDS, REST_FIELDS, {"energy_mj", "power_w"})
    assert np.array_equal(energy.ts_us, ts)
    assert np.array_equal(energy.columns["energy_mj"].values, cols["energy_mj"].values)
    whole = unpack_hour(hot, rest, HOT_FIELDS, REST_FIELDS)
    assert set(whole.columns) == {name for name, _ in FIELDS}
    for name, col in cols.items():
        present = col.present()
        assert np.array_equal(whole.columns[name].present(), present), name
        assert np.array_equal(
            whole.columns[name].values[present].view(np.uint8), col.values[present].view(np.uint8)
        )
    with pytest.raises(PackError, match="rest of the GPU-hour"):
        unpack_hour(hot, None, HOT_FIELDS, REST_FIELDS, {"gpu_util"})


def test_pack_refuses_unordered_time_and_keeps_even_a_nan_bit_pattern():
    n = 3
    cols = {
        name: Column(np.zeros(n, np.float32 if k == "float" else np.int64)) for name, k in FIELDS
    }
    with pytest.raises(PackError, match="ascending"):
        pack(np.array([3, 2, 1]), cols, FIELDS)
    # Ingest refuses NaN, but a NaN written by other means must not stop compaction: its
    # exact bits come back, as a present value (not NULL).
    odd_nan = np.array([0x7FC01234], np.uint32).view(np.float32)[0]
    cols["power_w"] = Column(np.array([1, odd_nan, 2], np.float32))
    back = unpack(pack(np.array([1, 2, 3]), cols, FIELDS), FIELDS).columns["power_w"]
    assert back.valid is None and back.values.view(np.uint32)[1] == 0x7FC01234


def test_ingest_never_stores_nan(node_token):
    from collectors.schema import BatchError

    cluster, node, token = node_token
    batch = make_batch(cluster, node, token)
    batch["samples"][0][2 + GPU_FIELD_NAMES.index("power_w")] = float("nan")
    with pytest.raises(BatchError):
        samples_ingest(json.dumps(batch))
    assert _count("telemetry_gpusample") == 0


# --- Compaction in PostgreSQL ------------------------------------------------------------------


def _hour_start(hours_ago: float) -> float:
    now = time.time()
    return (now - now % HOUR) - hours_ago * HOUR


def _raw_rows() -> list[tuple]:
    """Every stored sample, raw or packed, through the SQL reader, as PostgreSQL prints it
    (float4 as its shortest exact text: a changed bit changes the text)."""
    with connection.cursor() as cur:
        cur.execute("SELECT array_agg(id ORDER BY id) FROM fleet_gpu")
        gpus = cur.fetchone()[0] or []
    lo, hi = datetime(2000, 1, 1, tzinfo=UTC), datetime.now(UTC) + timedelta(hours=1)
    cols = ", ".join(f"s.{n}::text" for n in GPU_FIELD_NAMES)
    with samples_relation(gpus, lo, hi) as rel, connection.cursor() as cur:
        cur.execute(f"SELECT s.gpu_id, s.ts, {cols} FROM {rel} s ORDER BY 1, 2")
        return cur.fetchall()


def _count(table: str) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        return cur.fetchone()[0]


@pytest.fixture
def old_samples(node_token):
    """Two hours of an 8-GPU node, 10 h ago (older than the 6 h compaction horizon), with
    NULLs, extreme counters and floats that are not round in binary."""
    cluster, node, token = node_token
    batch = make_batch(
        cluster, node, token, t0=_hour_start(10) + 0.123456, intervals=48, step_s=150
    )
    for k, row in enumerate(batch["samples"]):
        row[2 + GPU_FIELD_NAMES.index("ecc_sbe_agg")] = 2**63 - 17 - k
        row[2 + GPU_FIELD_NAMES.index("power_w")] = 300.1 + k / 7
        if k % 5 == 0:
            row[2 + GPU_FIELD_NAMES.index("gpu_temp_c")] = None
    result = samples_ingest(json.dumps(batch))
    assert result.samples_stored == 8 * 48
    return batch


def test_compaction_is_lossless_and_moves_every_sample(old_samples):
    before = _raw_rows()
    report = compaction.samples_compact()
    assert report["samples"] == 8 * 48 and report["gpu_hours"] == 16
    assert _count("telemetry_gpusample") == 0
    assert _count("telemetry_gpusamplepacked") == 16
    assert _raw_rows() == before
    # Again: nothing left to do, nothing changes.
    assert compaction.samples_compact()["samples"] == 0
    assert _raw_rows() == before


def test_numpy_reader_reads_packed_and_raw_bit_exactly(old_samples):
    gpus = sorted({r[0] for r in _raw_rows()})
    lo, hi = datetime.now(UTC) - timedelta(hours=12), datetime.now(UTC)
    fields = ("energy_mj", "power_w", "gpu_temp_c")
    before = gpu_samples(gpus, lo, hi, fields)
    compaction.samples_compact()
    after = gpu_samples(gpus, lo, hi, fields)
    assert sorted(after) == sorted(before) == gpus
    for g in gpus:
        assert np.array_equal(after[g].ts_us, before[g].ts_us)
        assert len(after[g]) == 48
        for f in fields:
            a, b = after[g].columns[f], before[g].columns[f]
            assert np.array_equal(a.present(), b.present())
            assert np.array_equal(a.values.view(np.uint8), b.values.view(np.uint8))
    assert not after[gpus[0]].columns["gpu_temp_c"].present().all()  # NULLs stay NULL


def test_duplicate_and_late_samples_of_a_packed_hour(old_samples, node_token):
    cluster, node, token = node_token
    compaction.samples_compact()
    before = _raw_rows()
    # A redelivered batch of a packed hour stores nothing.
    again = samples_ingest(json.dumps({**old_samples, "batch_id": old_samples["batch_id"]}))
    assert (again.samples, again.samples_stored, again.duplicates) == (384, 0, 384)
    assert _count("telemetry_gpusample") == 0
    assert _raw_rows() == before
    # A late sample between two packed ones lands in raw, is read with them at once...
    late_t = old_samples["samples"][0][1] + 30  # the minute of a packed sample
    late = make_batch(cluster, node, token, t0=late_t, intervals=1)
    assert samples_ingest(json.dumps(late)).samples_stored == 8
    assert CompactDirty.objects.count() == 1
    assert len(_raw_rows()) == len(before) + 8
    # ... and its minute's rollup counts the packed samples of the minute too.
    rollups_refresh()
    minute = datetime.fromtimestamp(late_t - late_t % 60, UTC)
    cell = GpuRollup1m.objects.filter(minute=minute).first()
    in_minute = sum(
        1
        for r in _raw_rows()
        if r[0] == cell.gpu_id and minute <= r[1] < minute + timedelta(minutes=1)
    )
    assert cell.n == in_minute == 2
    # The next run merges it into the packed hour: raw is empty again, nothing lost.
    merged = _raw_rows()
    assert compaction.samples_compact()["late"] == 1
    assert _count("telemetry_gpusample") == 0 and CompactDirty.objects.count() == 0
    assert _raw_rows() == merged


def test_a_crash_mid_chunk_loses_and_duplicates_nothing(old_samples, monkeypatch):
    before = _raw_rows()
    calls = []

    def failing_pack(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("worker killed mid-chunk")
        return pack_hour(*args, **kwargs)

    monkeypatch.setattr(compaction, "pack_hour", failing_pack)
    with pytest.raises(RuntimeError):
        compaction.samples_compact()
    assert _count("telemetry_gpusamplepacked") == 0
    assert _raw_rows() == before
    monkeypatch.setattr(compaction, "pack_hour", pack_hour)
    compaction.samples_compact()
    assert _count("telemetry_gpusample") == 0
    assert _raw_rows() == before


def test_node_series_reads_the_same_numbers_after_compaction(old_samples):
    gpus = [r[0] for r in _raw_rows()[:1]]
    until = datetime.fromtimestamp(_hour_start(9), UTC)
    before = gpus_series(gpus, RANGES["1h"], until=until)
    assert len(before[gpus[0]].ts) == 24
    compaction.samples_compact()
    after = gpus_series(gpus, RANGES["1h"], until=until)
    assert after[gpus[0]].ts == before[gpus[0]].ts
    assert after[gpus[0]].values == before[gpus[0]].values


def test_the_packed_read_prunes_partitions(old_samples):
    compaction.samples_compact()
    day = datetime.fromtimestamp(_hour_start(10), UTC)
    # One hour, [day, day + 1 h): it lies in one day's partition at any time of day (up to
    # and including the next hour would reach the next day's when the hour is 23:00).
    scans = plan_scans(
        "SELECT gpu_id, data FROM telemetry_gpusamplepacked WHERE gpu_id = ANY('{1,2}') "
        f"AND hour >= '{day.isoformat()}' AND hour < '{(day + timedelta(hours=1)).isoformat()}'"
    )
    relations = {rel for _, rel in scans if rel.startswith("telemetry_gpusamplepacked")}
    assert relations == {f"telemetry_gpusamplepacked_p{day:%Y%m%d}"}


def test_a_sql_reader_of_packed_hours_still_prunes_raw_partitions(old_samples):
    from webapp.telemetry.partitions import partition_days, partition_ensure
    from webapp.telemetry.samples import UNPACKED, samples_source

    compaction.samples_compact()
    for days in (3, 4):  # partitions the plan must leave out
        partition_ensure("telemetry_gpusample", (datetime.now(UTC) - timedelta(days=days)).date())
    gpus = sorted({r[0] for r in _raw_rows()})
    lo = datetime.fromtimestamp(_hour_start(10), UTC)
    hi = lo + timedelta(hours=2)
    source = samples_source(gpus, lo, hi)
    assert UNPACKED in source
    scans = plan_scans(
        f"SELECT count(*) FROM {source} s "
        f"WHERE s.ts >= '{lo.isoformat()}' AND s.ts <= '{hi.isoformat()}'"
    )
    raw = {rel for _, rel in scans if rel.startswith("telemetry_gpusample_p")}
    existing = partition_days("telemetry_gpusample")
    assert raw == {n for n, d in existing.items() if lo.date() <= d <= hi.date()}
    assert len(existing) > len(raw)  # the days around were pruned
    assert UNPACKED in {rel for _, rel in scans}
    with pytest.raises(ValueError, match="'gpu_utilisation'"):
        samples_source(gpus, lo, hi, ["gpu_utilisation"])


def test_metric_fields_cover_the_schema():
    assert [n for n, _ in FIELDS] == [m.name for m in GPU_FIELDS]


def _job_over(batch: dict, node_name: str):
    """A completed job that held every GPU of the node over the batch's samples (2 h: the
    job page reads samples, not the rollup)."""
    from webapp.fleet.models import Cluster, Gpu
    from webapp.jobs.models import Job, JobAllocation

    ts = [row[1] for row in batch["samples"]]
    start = datetime.fromtimestamp(min(ts), UTC)
    end = datetime.fromtimestamp(max(ts), UTC)
    job = Job.objects.create(
        cluster=Cluster.objects.get(name=batch["cluster"]),
        scheduler_id="4242",
        name="compacted-job",
        job_type="pretrain",
        state="completed",
        submit_at=start,
        start_at=start,
        end_at=end,
        gpus_requested=8,
        nodes_requested=1,
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, node=g.node, gpu=g, gpu_index=g.index, start=start, end=end)
        for g in Gpu.objects.filter(node__hostname=node_name).select_related("node")
    )
    return job


def _figures(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    # The traces (the layout's axis range follows the clock).
    traces = {name: fig["data"] for name, fig in response.context["figures"].items()}
    return json.dumps(traces, sort_keys=True, default=str)


def test_job_page_shows_the_same_numbers_after_compaction(old_samples, node_token, operator_client):
    job = _job_over(old_samples, node_token[1])
    before = _figures(operator_client, f"/jobs/{job.id}/")
    assert "compacted" not in before and '"y": [' in before
    compaction.samples_compact()
    assert _count("telemetry_gpusample") == 0
    assert _figures(operator_client, f"/jobs/{job.id}/") == before


def test_characterization_cdfs_are_the_same_after_compaction(old_samples):
    from webapp.fleet.models import Cluster
    from webapp.jobs.characterization import telemetry_cdfs

    ts = [row[1] for row in old_samples["samples"]]
    since = datetime.fromtimestamp(min(ts) - 60, UTC)
    until = datetime.fromtimestamp(max(ts) + 60, UTC)
    cluster = Cluster.objects.get(name=old_samples["cluster"])
    before = telemetry_cdfs(cluster, since, until)
    assert before.rows == 8 * 48 and before.source == "raw samples"
    compaction.samples_compact()
    after = telemetry_cdfs(cluster, since, until)
    assert (after.rows, after.curves) == (before.rows, before.curves)


def test_pages_of_compacted_hours_need_a_login(old_samples, node_token, client):
    job = _job_over(old_samples, node_token[1])
    compaction.samples_compact()
    response = client.get(f"/jobs/{job.id}/")
    assert response.status_code == 302 and "/login" in response["Location"]


def test_node_page_shows_the_same_numbers_after_compaction(node_token, operator_client, settings):
    # The last hour's samples, packed: a horizon of 0 h, as seen from an hour ahead.
    settings.VIGIL_COMPACT_AFTER_HOURS = 0
    cluster, node, token = node_token
    batch = make_batch(cluster, node, token, t0=time.time() - 55 * 60, intervals=50, step_s=60)
    samples_ingest(json.dumps(batch))
    from webapp.fleet.models import Node

    url = f"/nodes/{Node.objects.get(hostname=node).id}/?range=1h"
    before = _figures(operator_client, url)
    report = compaction.samples_compact(now=datetime.now(UTC) + timedelta(hours=1), max_chunks=100)
    assert report["samples"] == 8 * 50 and _count("telemetry_gpusample") == 0
    assert _figures(operator_client, url) == before


def test_a_compacted_raw_day_is_truncated_and_still_read(node_token):
    cluster, node, token = node_token
    t0 = _hour_start(24 * 2 + 3)  # three hours before midnight two days ago: a finished day
    batch = make_batch(cluster, node, token, t0=t0, intervals=4, step_s=HOUR / 2)
    samples_ingest(json.dumps(batch))
    before = _raw_rows()
    day = datetime.fromtimestamp(t0, UTC).date()
    name = f"telemetry_gpusample_p{day:%Y%m%d}"

    def size() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_relation_size(%s::regclass)", [name])
            return cur.fetchone()[0]

    assert size() > 0
    report = compaction.samples_compact(max_chunks=500)
    assert report["raw_days_truncated"] >= 1 and report["lag_hours"] == 0
    assert size() == 0
    assert _raw_rows() == before


def test_lag_reads_hours_left_until_the_pass_catches_up(old_samples):
    from webapp.telemetry.metrics import FleetCollector

    assert compaction.compaction_lag_hours() > 0
    compaction.samples_compact(max_chunks=500)
    assert compaction.compaction_lag_hours() == 0
    assert b"\nvigil_compaction_lag_hours 0.0\n" in FleetCollector().exposition()


def test_retention_drops_each_tier_at_its_own_age(db, settings):
    from webapp.telemetry.partitions import partition_days, partition_ensure, partitions_maintain

    settings.VIGIL_RETENTION_DAYS = 3
    settings.VIGIL_ROLLUP_RETENTION_DAYS = 10
    settings.VIGIL_HOURLY_ROLLUP_RETENTION_DAYS = 100
    today = datetime.now(UTC).date()
    for table in ("telemetry_gpusamplepacked", "telemetry_gpurollup1m", "telemetry_gpurollup1h"):
        for age in (5, 20, 200):
            partition_ensure(table, today - timedelta(days=age))
    partitions_maintain(today)

    def ages(table: str) -> set[int]:
        left = set()
        for day in partition_days(table).values():
            for age in (5, 20, 200):
                if day <= today - timedelta(days=age) < day + timedelta(days=32):
                    left.add(age)
        return left

    assert ages("telemetry_gpusamplepacked") == set()  # samples: 3 days
    assert ages("telemetry_gpurollup1m") == {5}  # 1-minute rollup: 10 days
    assert ages("telemetry_gpurollup1h") >= {5, 20}  # hourly: 100 days, monthly partitions
    assert 200 not in ages("telemetry_gpurollup1h")
