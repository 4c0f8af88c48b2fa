"""The hourly rollup: folded from the 1-minute rollup, the newest hours every run, late hours
when their minutes change (also after compaction), and the same result when run again."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from django.db import connection

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from webapp.telemetry import compaction
from webapp.telemetry.models import GpuRollup1h, Rollup1hDirty
from webapp.telemetry.rollup_hourly import rollups_hourly_refresh
from webapp.telemetry.samples import samples_relation
from webapp.telemetry.services import rollups_refresh, samples_ingest

HOUR = 3600
POWER = 2 + GPU_FIELD_NAMES.index("power_w")  # a wire row is [index, ts, *GPU_FIELDS]


def _from_samples(gpu_ids: list[int], hour: datetime) -> dict[int, tuple]:
    """Per GPU, what the hour's samples (raw or packed) say: count, lowest and highest power,
    lowest and highest energy reading."""
    with (
        samples_relation(gpu_ids, hour, hour + timedelta(hours=1)) as rel,
        connection.cursor() as cur,
    ):
        cur.execute(
            f"SELECT gpu_id, count(*), min(power_w), max(power_w), min(energy_mj), "
            f"max(energy_mj) FROM {rel} s WHERE ts >= %s AND ts < %s GROUP BY gpu_id",
            [hour, hour + timedelta(hours=1)],
        )
        return {r[0]: r[1:] for r in cur.fetchall()}


def _cells(hour: datetime) -> dict[int, tuple]:
    return {
        c.gpu_id: (c.n, c.power_w_min, c.power_w_max, c.energy_mj_min, c.energy_mj_max)
        for c in GpuRollup1h.objects.filter(hour=hour)
    }


def _ingest(node_token, t0: float, intervals: int, step_s: float, k0: int = 0) -> dict:
    cluster, node, token = node_token
    batch = make_batch(cluster, node, token, t0=t0, intervals=intervals, step_s=step_s, gpus=2)
    for k, row in enumerate(batch["samples"]):
        row[POWER] = 200.0 + (k + k0) % 7 * 10  # power_w varies: min and max mean something
    assert samples_ingest(json.dumps(batch)).samples_stored == 2 * intervals
    return batch


def _hour_of(t: float) -> datetime:
    return datetime.fromtimestamp(t - t % HOUR, UTC)


def test_the_newest_hours_fold_their_minutes(node_token):
    now = time.time()
    batch = _ingest(node_token, now - 90 * 60, intervals=18, step_s=300)
    rollups_refresh()
    rollups_hourly_refresh()
    gpus = sorted({c.gpu_id for c in GpuRollup1h.objects.all()})
    assert len(gpus) == 2
    for hour in {_hour_of(row[1]) for row in batch["samples"]}:
        assert _cells(hour) == _from_samples(gpus, hour)
    before = {h: _cells(h) for h in GpuRollup1h.objects.values_list("hour", flat=True)}
    rollups_hourly_refresh()  # again: the same cells
    assert {h: _cells(h) for h in before} == before


def test_a_late_hour_is_recomputed_when_its_minutes_change(node_token):
    t = time.time() - 4 * HOUR  # older than the two hours every run redoes
    _ingest(node_token, t - t % HOUR + 60, intervals=6, step_s=300)
    rollups_refresh()
    assert Rollup1hDirty.objects.count() == 1
    result = rollups_hourly_refresh()
    assert result["late"] == 1 and Rollup1hDirty.objects.count() == 0
    hour = _hour_of(t)
    gpus = sorted(_cells(hour))
    assert len(gpus) == 2 and _cells(hour) == _from_samples(gpus, hour)


def test_a_late_sample_of_a_packed_hour_reaches_the_hourly_rollup(node_token):
    t = time.time() - 9 * HOUR  # past the 6 h compaction horizon
    start = t - t % HOUR
    _ingest(node_token, start + 60, intervals=6, step_s=300)
    rollups_refresh()
    rollups_hourly_refresh()
    compaction.samples_compact()
    hour = _hour_of(t)
    gpus = sorted(_cells(hour))
    assert all(n == 6 for n, *_ in _cells(hour).values())
    # A spooled sample of that hour arrives late, with a power no other sample had.
    cluster, node, token = node_token
    late = make_batch(cluster, node, token, t0=start + 3000, intervals=1, gpus=2)
    for row in late["samples"]:
        row[POWER] = 999.0
    samples_ingest(json.dumps(late))
    rollups_refresh()
    rollups_hourly_refresh()
    cells = _cells(hour)
    assert all(n == 7 and hi == 999.0 for n, _, hi, _, _ in cells.values())
    assert cells == _from_samples(gpus, hour)


def test_the_gpu_page_draws_a_year_from_the_hourly_rollup(node_token, operator_client):
    from webapp.fleet.models import Gpu

    t = time.time() - 3 * HOUR
    _ingest(node_token, t - t % HOUR + 60, intervals=6, step_s=300)
    rollups_refresh()
    rollups_hourly_refresh()
    gpu = Gpu.objects.filter(node__hostname=node_token[1]).order_by("index").first()
    cell = GpuRollup1h.objects.get(gpu=gpu, hour=_hour_of(t))
    response = operator_client.get(f"/gpus/{gpu.id}/?range=1y")
    assert response.status_code == 200
    assert "hourly rollup" in response.content.decode()
    power = [
        trace for trace in response.context["figures"]["series"]["data"] if trace["yaxis"] == "y4"
    ]
    assert power and power[0]["y"] == [cell.power_w_sum / cell.power_w_cnt]
