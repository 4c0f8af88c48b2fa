"""Selectors: GPU status rules, the latest sample per GPU, summaries, series sources, and the
read API over (GPU, interval) lists (energy across counter resets, series, refused metrics),
and the sample arrays the energy rollup reads."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from tests.telemetry.conftest import partitions_of, plan_scans, seed_node
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Cluster, Gpu
from webapp.telemetry import selectors
from webapp.telemetry.choices import GpuStatus
from webapp.telemetry.partitions import partition_name, partitions_maintain
from webapp.telemetry.services import samples_ingest

NOW = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ts", "values", "expected"),
    [
        (None, {}, GpuStatus.STALE),
        (NOW, {"gpu_util": 10.0}, GpuStatus.BUSY),  # the threshold itself is busy
        (NOW, {"gpu_util": 9.9}, GpuStatus.IDLE),
        (NOW, {"gpu_util": None}, GpuStatus.IDLE),  # no utilization reported: not busy
        (NOW, {"gpu_util": 100.0, "ecc_dbe_vol": 3}, GpuStatus.ERRORING),
        (NOW, {"gpu_util": 100.0, "remap_pending": 1}, GpuStatus.ERRORING),
        (NOW, {"gpu_util": 0.0, "remap_failure": 1}, GpuStatus.ERRORING),
        # Aggregate and correctable counters never reset: they do not make a GPU red.
        (
            NOW,
            {"gpu_util": 50.0, "ecc_dbe_agg": 5, "ecc_sbe_vol": 9, "remap_corr": 2},
            GpuStatus.BUSY,
        ),
        (
            NOW,
            {"gpu_util": 50.0, "ecc_dbe_vol": 0, "remap_pending": 0, "remap_failure": 0},
            GpuStatus.BUSY,
        ),
    ],
)
def test_gpu_status(ts, values, expected):
    assert selectors.gpu_status(ts, values, busy_util_pct=10.0) == expected


def test_gpu_problems_name_each_cause():
    assert selectors.gpu_problems({"ecc_dbe_vol": 2, "remap_pending": 1, "remap_failure": 1}) == [
        "2 double-bit ECC errors since the last reset",
        "a row remap is pending: reset the GPU to activate it",
        "a row remap failed: RMA candidate",
    ]
    assert selectors.gpu_problems({"ecc_dbe_vol": None, "remap_pending": None}) == []


def test_latest_is_the_newest_sample_within_the_window(db):
    node = seed_node("alpha", "n1", utils=[77.0, 3.0], intervals=5)
    gpus = selectors.gpus_latest(node_id=node.id)
    assert [(g.index, g.value("gpu_util")) for g in gpus] == [(0, 77.0), (1, 3.0)]
    assert [g.status for g in gpus] == [GpuStatus.BUSY, GpuStatus.IDLE]
    # A window shorter than the age of the newest sample makes every GPU stale.
    assert all(
        g.ts is None and g.status == GpuStatus.STALE
        for g in selectors.gpus_latest(node_id=node.id, within_s=1)
    )


def test_latest_reads_only_the_fields_asked_for_with_the_exact_time(db):
    """The overview reads a narrow row (OVERVIEW_FIELDS); its time is the stored sample's to
    the microsecond, though it travels as epoch seconds."""
    t0 = int(time.time()) - 60 + 0.123457
    node = seed_node(
        "alpha", "n1", utils=[77.0, 3.0], t0=t0, intervals=1, latest={0: {"ecc_dbe_vol": 2}}
    )
    gpus = selectors.gpus_latest(node_id=node.id, fields=selectors.OVERVIEW_FIELDS)
    assert set(gpus[0].values) == set(selectors.OVERVIEW_FIELDS)
    assert [g.status for g in gpus] == [GpuStatus.ERRORING, GpuStatus.IDLE]
    for g in gpus:
        ts, values = selectors.gpu_sample_latest(g.gpu_id)
        assert g.ts == ts and g.ts.microsecond == 123457
        assert g.values == {f: values[f] for f in selectors.OVERVIEW_FIELDS}
    with pytest.raises(ValueError, match="not a GPU sample field: 'gpu_uptime'"):
        selectors.gpus_latest(fields=("gpu_uptime",))


def test_latest_lists_gpus_that_never_reported(db):
    seed_node("alpha", "n1", utils=[50.0] * 2, t0=time.time() - 3600)
    gpus = selectors.gpus_latest(Cluster.objects.get(name="alpha"))
    assert len(gpus) == 2 and {g.status for g in gpus} == {GpuStatus.STALE}
    ts, values = selectors.gpu_sample_latest(gpus[0].gpu_id)
    assert ts is not None and values["gpu_util"] == 50.0  # the GPU page still shows it


def test_clusters_overview_in_two_queries(db):
    seed_node("alpha", "n1", utils=[50.0] * 8)
    seed_node("beta", "n2", utils=[0.0] * 4, powers=[60.0] * 4)
    with CaptureQueriesContext(connection) as ctx:
        summaries, gpus = selectors.clusters_overview()
    assert len(ctx.captured_queries) == 2
    assert [(s.name, s.gpus, s.busy, s.idle) for s in summaries] == [
        ("alpha", 8, 8, 0),
        ("beta", 4, 0, 4),
    ]
    assert summaries[1].power_kw == pytest.approx(0.24)


def test_day_and_week_ranges_read_only_the_rollup(db):
    # Two hours ago, aligned so the six samples share one 10-minute bucket.
    t0 = (time.time() - 7200) // 600 * 600 + 5
    node = seed_node("alpha", "n1", utils=[70.0], t0=t0, intervals=6)
    gpu_id = selectors.gpus_latest(node_id=node.id)[0].gpu_id
    for key in ("1d", "7d"):
        with CaptureQueriesContext(connection) as ctx:
            series = selectors.gpus_series([gpu_id], selectors.RANGES[key])[gpu_id]
        sql = " ".join(q["sql"] for q in ctx.captured_queries)
        assert "telemetry_gpurollup1m" in sql and "telemetry_gpusample" not in sql
        # Means weighted by sample count: five samples at 1 % and one at 70 %.
        assert sum(series.values["gpu_util"]) / len(series.ts) <= 70.0
        if key == "7d":
            assert len(series.ts) == 1
            assert series.values["gpu_util"][0] == pytest.approx((5 * 1.0 + 70.0) / 6)


def test_hour_range_reads_raw_samples(db):
    node = seed_node("alpha", "n1", utils=[70.0], intervals=4)
    gpu_id = selectors.gpus_latest(node_id=node.id)[0].gpu_id
    with CaptureQueriesContext(connection) as ctx:
        series = selectors.gpus_series([gpu_id], selectors.RANGES["1h"])[gpu_id]
    assert "telemetry_gpusample" in ctx.captured_queries[0]["sql"]
    assert series.values["gpu_util"] == [1.0, 1.0, 1.0, 70.0]
    assert series.values["sm_active"] == pytest.approx([0.4] * 4)


# --- What each query reads: plans with three days of partitions present ---------------------


def _three_days() -> tuple[int, datetime]:
    """A GPU with samples today, yesterday and the day before, every partition made ahead too;
    (its id, the time of today's newest sample)."""
    now = time.time()
    for days_ago in (2, 1):
        seed_node("alpha", "n1", utils=[20.0 + days_ago], t0=now - days_ago * 86400)
    node = seed_node("alpha", "n1", utils=[77.0], t0=now - 60, intervals=4, step_s=10)
    partitions_maintain()
    gpu = selectors.gpus_latest(node_id=node.id)[0]
    return gpu.gpu_id, gpu.ts


def _day_partitions(table: str, since: datetime, until: datetime) -> set[str]:
    days = {since.date() + timedelta(days=k) for k in range((until.date() - since.date()).days + 1)}
    return {partition_name(table, day) for day in days}


def test_latest_reads_the_latest_table_and_no_sample_partition(db):
    gpu_id, newest = _three_days()
    for read in (selectors.gpus_latest, lambda: selectors.gpu_sample_latest(gpu_id)):
        with CaptureQueriesContext(connection) as ctx:
            read()
        relations = {rel for q in ctx.captured_queries for _, rel in plan_scans(q["sql"])}
        assert "telemetry_gpulatest" in relations
        assert not [rel for rel in relations if rel.startswith("telemetry_gpusample")]
    # And it is today's newest sample, not an older day's.
    [gpu] = selectors.gpus_latest()
    assert (gpu.ts, gpu.value("gpu_util")) == (newest, 77.0)
    assert selectors.gpu_sample_latest(gpu_id)[1]["gpu_util"] == 77.0


@pytest.mark.parametrize(
    ("key", "table"), [("1h", "telemetry_gpusample"), ("1d", "telemetry_gpurollup1m")]
)
def test_series_read_only_the_partitions_of_their_window(db, key, table):
    gpu_id, _ = _three_days()
    until = timezone.now()
    since = until - timedelta(seconds=selectors.RANGES[key].seconds)
    with CaptureQueriesContext(connection) as ctx:
        series = selectors.gpus_series([gpu_id], selectors.RANGES[key], until=until)[gpu_id]
    [query] = ctx.captured_queries
    scanned = partitions_of(table, plan_scans(query["sql"]))
    assert scanned == _day_partitions(table, since, until)
    # Two days ago and the days made ahead are never read.
    assert partition_name(table, (until - timedelta(days=2)).date()) not in scanned
    assert partition_name(table, (until + timedelta(days=1)).date()) not in scanned
    assert series.ts and (key == "1d" or series.values["gpu_util"][-1] == 77.0)


# --- The read API over (GPU, interval) lists ---------------------------------------------------


def _one_gpu_with_a_counter_reset(cluster: str) -> tuple[int, datetime]:
    """One GPU sampled every 10 s for 200 s (21 samples); its energy counter rises 1e6 mJ a
    sample and restarts from zero before sample 15 (reading 5e5 there)."""
    t0 = float(int(time.time()) - 600)
    token = fleet_services.node_token_issue(cluster, "e1")
    batch = make_batch(cluster, "e1", token, t0=t0, intervals=21, step_s=10.0, gpus=1)
    col = 2 + GPU_FIELD_NAMES.index("energy_mj")
    for k, row in enumerate(batch["samples"]):
        row[col] = k * 1_000_000 if k < 15 else (k - 15) * 1_000_000 + 500_000
    samples_ingest(json.dumps(batch))
    gpu = Gpu.objects.get(node__cluster__name=cluster, node__hostname="e1", index=0)
    return gpu.id, datetime.fromtimestamp(t0, UTC)


BUDGET = selectors.ReadBudget(timedelta(hours=3), 1024.0, 4096.0)


def test_two_intervals_of_one_gpu_each_get_their_own_energy_across_a_counter_reset(db):
    gpu_id, t0 = _one_gpu_with_a_counter_reset("energy-api")
    at = lambda k: t0 + timedelta(seconds=10 * k)  # noqa: E731
    first = selectors.GpuInterval("first", gpu_id, at(0), at(9))
    second = selectors.GpuInterval("second", gpu_id, at(10), at(20))
    method, energy = selectors.intervals_energy(
        [first, second], lo=at(0), hi=at(20), now=timezone.now(), budget=BUDGET
    )
    assert "from raw samples" in method and "counter reset" in method
    assert energy["first"] == selectors.CounterEnergy(10, 9_000_000.0, 0)
    # 10 -> 14 (4e6), the reset (the reading after it, 5e5), then 15 -> 20 (5e6).
    assert energy["second"] == selectors.CounterEnergy(11, 9_500_000.0, 1)
    # A GPU nobody sampled reads nothing rather than zero.
    _, none = selectors.intervals_energy(
        [selectors.GpuInterval("x", gpu_id + 10_000, at(0), at(20))],
        lo=at(0),
        hi=at(20),
        now=timezone.now(),
        budget=BUDGET,
    )
    assert none == {}


def test_a_series_of_an_interval_holds_only_its_samples_and_says_where_they_came_from(db):
    gpu_id, t0 = _one_gpu_with_a_counter_reset("series-api")
    lo, hi = t0 + timedelta(seconds=50), t0 + timedelta(seconds=100)
    resolution, series = selectors.intervals_series(
        [selectors.GpuInterval(7, gpu_id, lo, hi)],
        ["power_w", "energy_mj"],
        lo=lo,
        hi=hi,
        now=timezone.now(),
        budget=BUDGET,
    )
    assert resolution.label == "raw samples" and resolution.bucket_s is None
    assert series[7].ts == [lo + timedelta(seconds=10 * k) for k in range(6)]
    assert series[7].values["energy_mj"][0] == 5_000_000


def test_a_read_of_an_unknown_metric_is_refused_by_name(db):
    gpu_id, t0 = _one_gpu_with_a_counter_reset("bad-api")
    with pytest.raises(ValueError, match="gpu_utilisation"):
        selectors.intervals_series(
            [selectors.GpuInterval(1, gpu_id, t0, t0 + timedelta(seconds=60))],
            ["gpu_utilisation"],
            lo=t0,
            hi=t0 + timedelta(seconds=60),
            now=timezone.now(),
            budget=BUDGET,
        )


def test_sample_arrays_of_a_window_begin_with_the_sample_before_it(db):
    """What the energy rollup reads: the window's samples and the one before, so the interval
    crossing into the window is accounted in it; and the hours that hold samples."""
    gpu_id, t0 = _one_gpu_with_a_counter_reset("arrays-api")
    at = lambda k: t0 + timedelta(seconds=10 * k)  # noqa: E731
    arrays = selectors.gpus_sample_arrays(
        [gpu_id, gpu_id + 10_000], at(5), at(10), ["energy_mj"], previous=timedelta(minutes=1)
    )
    assert list(arrays) == [gpu_id]  # a GPU without samples is absent
    got = arrays[gpu_id]
    assert list(got.ts) == [at(k).timestamp() for k in range(4, 10)]
    assert list(got.values["energy_mj"]) == [k * 1_000_000.0 for k in range(4, 10)]
    hours = {at(k).replace(minute=0, second=0, microsecond=0) for k in range(21)}
    assert selectors.gpus_hours_with_samples([gpu_id], at(0), at(21)) == sorted(hours)


def test_node_sample_arrays_refuse_a_field_nodes_do_not_report(db):
    with pytest.raises(ValueError, match="not a node sample field: 'gpu_util'"):
        selectors.nodes_sample_arrays(
            [1], NOW, NOW + timedelta(hours=1), ["gpu_util"], previous=timedelta(hours=1)
        )
