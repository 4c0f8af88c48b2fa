"""The hourly rollup (`telemetry_gpurollup1h`), folded from the 1-minute rollup, for views of
months and years: kept VIGIL_HOURLY_ROLLUP_RETENTION_DAYS (three years), where
the 1-minute rollup is kept about a month.

A beat task (every 5 minutes) recomputes every GPU's current hour (and the previous one in the first
quarter of an hour), which the 1-minute refresh is still filling, plus the hours `Rollup1hDirty`
names: those whose minutes changed later (late samples). Each cell is recomputed whole from its
minutes (sums of sums, counts of counts, lowest of lows), so a rerun or an overlap changes nothing.
Its cost per run is the minutes of an hour or two of the fleet, never the table's size.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

from webapp.telemetry.models import ROLLUP_METRICS, Rollup1hDirty
from webapp.telemetry.partitions import partition_ensure

_HOUR = timedelta(hours=1)
_COLS = ", ".join(f"{m}_min, {m}_max, {m}_sum, {m}_cnt" for m in ROLLUP_METRICS)
_AGGS = ", ".join(f"min({m}_min), max({m}_max), sum({m}_sum), sum({m}_cnt)" for m in ROLLUP_METRICS)
_SET = ", ".join(
    f"{c} = excluded.{c}" for c in ["n", "energy_mj_min", "energy_mj_max", *_COLS.split(", ")]
)
# date_bin, not date_trunc: it does not depend on the session's time zone.
_REFRESH = f"""
INSERT INTO telemetry_gpurollup1h AS r (gpu_id, hour, n, energy_mj_min, energy_mj_max, {_COLS})
SELECT gpu_id, date_bin('1 hour', minute, timestamptz '2000-01-01'), sum(n),
    min(energy_mj_min), max(energy_mj_max), {_AGGS}
FROM telemetry_gpurollup1m
WHERE minute >= %(lo)s AND minute < %(hi)s {{gpus}}
GROUP BY 1, 2
ORDER BY 1, 2
ON CONFLICT (gpu_id, hour) DO UPDATE SET {_SET}
"""
PREVIOUS_HOUR_FOR = timedelta(minutes=15)
# Late-hour rows recomputed per run, oldest first.
ROLLUP1H_DIRTY_PER_RUN = 100


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _refresh(lo: datetime, hi: datetime, gpu_ids: list[int] | None = None) -> int:
    day = lo.date()
    while day <= (hi - timedelta(microseconds=1)).date():
        partition_ensure("telemetry_gpurollup1h", day)
        day += timedelta(days=1)
    with connection.cursor() as cur:
        sql = _REFRESH.format(gpus="AND gpu_id = ANY(%(ids)s)" if gpu_ids is not None else "")
        cur.execute(sql, {"lo": lo, "hi": hi, "ids": gpu_ids})
        return cur.rowcount


def rollups_hourly_refresh(now: datetime | None = None) -> dict[str, int]:
    """Recompute the current and previous hour of every GPU, and the late hours recorded;
    returns the cells written and the late rows done."""
    now = now or datetime.now(UTC)
    current = _hour(now)
    cells = late = 0
    with transaction.atomic():
        cells += _refresh(hourly_window(now), current + _HOUR)
    for dirty in Rollup1hDirty.objects.order_by("id")[:ROLLUP1H_DIRTY_PER_RUN]:
        with transaction.atomic():
            cells += _refresh(dirty.lo, dirty.hi, list(dirty.gpu_ids))
            Rollup1hDirty.objects.filter(id=dirty.id).delete()
        late += 1
    return {"cells": cells, "late": late}


def hourly_window(now: datetime) -> datetime:
    """The first hour every run recomputes: the current one, and the previous one while its
    last minutes may still be folding in (the 1-minute refresh runs every 15 s; a quarter of
    an hour covers a backlog of dozens of its runs)."""
    current = _hour(now)
    return current - _HOUR if now - current < PREVIOUS_HOUR_FOR else current


def rollup1h_mark_late(gpu_ids: list[int], lo: datetime, hi: datetime, now: datetime) -> None:
    """Record that the 1-minute rollup of these GPUs changed in [lo, hi): hours before the
    hourly window go on the hourly refresh's late list (it redoes the window every run)."""
    window = hourly_window(now)
    if lo >= window:
        return
    Rollup1hDirty.objects.create(gpu_ids=gpu_ids, lo=_hour(lo), hi=min(_hour(hi) + _HOUR, window))
