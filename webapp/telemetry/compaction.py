"""Compaction: raw GPU samples older than VIGIL_COMPACT_AFTER_HOURS become one packed row per
GPU and hour (`packing.py`), losslessly, at about a sixth of their size.

A beat task runs `samples_compact`, bounded per run. Each chunk (up to COMPACT_GPUS_PER_CHUNK
GPUs of one hour) is one transaction: the raw rows are deleted and returned by one statement,
merged with the hour's packed row if it has one, and the packed rows upserted, with the pass's
progress (`CompactionState`). A crash anywhere rolls the whole chunk back: nothing is lost or
stored twice, and the next run does the chunk again.

Late samples (a collector's spool replayed after an outage) of an hour that may already be
packed land in raw like any other, and ingest records the GPUs and hours in `CompactDirty` in
the same transaction; the next run merges them into the packed row first. A redelivered
sample of a packed hour is dropped by ingest before it is stored (`late_rows_filter`), under
a shared advisory lock that a chunk takes exclusively, so the check and the store cannot
interleave with a chunk that packs the same hour: duplicate deliveries stay a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from django.db import OperationalError, connection, transaction

from webapp.telemetry.models import CompactDirty, CompactionState
from webapp.telemetry.packing import Unpacked, array_column, merge, pack_hour, unpack, unpack_hour
from webapp.telemetry.partitions import known_forget, partition_days, partition_ensure
from webapp.telemetry.samples import (
    FIELDS,
    HOT_FIELDS,
    REST_FIELDS,
    binary_cursor,
    compact_horizon,
    late_before,
)

_HOUR = timedelta(hours=1)
# GPU-hours per transaction: 500 x 240 samples (15 s) is 120,000 rows, about a second of
# work, short enough to hold the advisory lock that late ingest waits for.
COMPACT_GPUS_PER_CHUNK = 500
# Chunks per run (the beat runs it every minute): 20 x 500 = 10,000 GPU-hours a minute, so a
# 200,000-GPU fleet (200,000 GPU-hours an hour) keeps up at a third of that rate.
COMPACT_CHUNKS_PER_RUN = 20
# CompactDirty rows (late batches) merged per run, before the regular pass.
COMPACT_LATE_PER_RUN = 50
# Two-key advisory lock space 3 = "packed hours": ingest's late path shared, chunks exclusive.
_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(3, 0)"
_LOCK = "SELECT pg_advisory_xact_lock(3, 0)"

_NAMES = [n for n, _ in FIELDS]
_TAKE_RAW = f"""
WITH gone AS (
    DELETE FROM telemetry_gpusample
    WHERE gpu_id = ANY(%(gpus)s) AND ts >= %(lo)s AND ts < %(hi)s
    RETURNING *
)
SELECT gpu_id, array_agg(ts ORDER BY ts), {", ".join(f"array_agg({n} ORDER BY ts)" for n in _NAMES)}
FROM gone GROUP BY gpu_id
"""
_UPSERT = """
INSERT INTO telemetry_gpusamplepacked AS p (gpu_id, hour, n, first_ts, last_ts, hot, data)
SELECT * FROM unnest(%s::bigint[], %s::timestamptz[], %s::int[], %s::timestamptz[],
    %s::timestamptz[], %s::bytea[], %s::bytea[])
ON CONFLICT (gpu_id, hour) DO UPDATE SET
    n = excluded.n, first_ts = excluded.first_ts, last_ts = excluded.last_ts,
    hot = excluded.hot, data = excluded.data
"""


def _from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us // 1_000_000, UTC) + timedelta(microseconds=us % 1_000_000)


def _compact(cur, gpu_ids: Sequence[int], hour: datetime) -> tuple[int, int]:
    """Move the raw samples of these GPUs in `hour` into their packed rows, in the caller's
    transaction (which holds the exclusive lock); (GPU-hours written, samples moved)."""
    cur.execute(_TAKE_RAW, {"gpus": list(gpu_ids), "lo": hour, "hi": hour + _HOUR}, binary=True)
    taken = cur.fetchall()
    if not taken:
        return 0, 0
    fresh: dict[int, Unpacked] = {}
    moved = 0
    for gpu_id, ts, *arrays in taken:
        fresh[gpu_id] = Unpacked(
            array_column(ts, "timestamptz").values,
            {
                name: array_column(a, "float4" if kind == "float" else "int8")
                for (name, kind), a in zip(FIELDS, arrays, strict=True)
            },
        )
        moved += len(fresh[gpu_id])
    cur.execute(
        "SELECT gpu_id, hot, data FROM telemetry_gpusamplepacked "
        "WHERE gpu_id = ANY(%s) AND hour = %s",
        [sorted(fresh), hour],
        binary=True,
    )
    for gpu_id, hot, data in cur.fetchall():
        # The packed samples were stored first: where both hold a timestamp, they win.
        packed = unpack_hour(hot, data, HOT_FIELDS, REST_FIELDS)
        fresh[gpu_id] = merge(packed, fresh[gpu_id], FIELDS)
    ids = sorted(fresh)
    blobs = [pack_hour(fresh[g].ts_us, fresh[g].columns, HOT_FIELDS, REST_FIELDS) for g in ids]
    cur.execute(
        _UPSERT,
        [
            ids,
            [hour] * len(ids),
            [len(fresh[g]) for g in ids],
            [_from_us(int(fresh[g].ts_us[0])) for g in ids],
            [_from_us(int(fresh[g].ts_us[-1])) for g in ids],
            [hot for hot, _ in blobs],
            [rest for _, rest in blobs],
        ],
    )
    return len(ids), moved


def gpu_hours_compact(gpu_ids: Sequence[int], hour: datetime) -> int:
    """Pack these GPUs' raw samples of one hour now, whatever the horizon, in one transaction
    (the bench measures packed bytes on a subset of its fleet this way); samples moved."""
    partition_ensure("telemetry_gpusamplepacked", hour.date())
    with transaction.atomic(), binary_cursor() as cur:
        cur.execute(_LOCK)
        return _compact(cur, gpu_ids, hour)[1]


def _hours(lo: datetime, hi: datetime) -> list[datetime]:
    out, h = [], lo.replace(minute=0, second=0, microsecond=0)
    while h < hi:
        out.append(h)
        h += _HOUR
    return out


def _state(horizon: datetime) -> CompactionState:
    state = CompactionState.objects.select_for_update().order_by("id").first()
    if state is None:
        state = CompactionState.objects.create(hour=_first_hour(horizon), gpu_after=0)
    return state


def _first_hour(horizon: datetime) -> datetime:
    """Where the first run starts: the oldest raw partition's day (the horizon when none)."""
    days = sorted(partition_days("telemetry_gpusample").values())
    start = datetime(days[0].year, days[0].month, days[0].day, tzinfo=UTC) if days else horizon
    return min(start, horizon)


def samples_compact(
    *, max_chunks: int = COMPACT_CHUNKS_PER_RUN, now: datetime | None = None
) -> dict[str, int]:
    """One bounded run: late batches' hours first, then the pass, oldest hour first, up to
    `max_chunks` chunks. Returns what it did and `lag_hours`, the hours left to compact."""
    try:
        return _compact_run(max_chunks, now)
    except Exception:
        known_forget()  # a partition made in a rolled-back chunk is gone again
        raise


def _compact_run(max_chunks: int, now: datetime | None) -> dict[str, int]:
    horizon = compact_horizon(now)
    report = {"late": 0, "gpu_hours": 0, "samples": 0, "chunks": 0}
    for dirty in CompactDirty.objects.order_by("id")[:COMPACT_LATE_PER_RUN]:
        _dirty_partitions(dirty, horizon)
        with transaction.atomic(), binary_cursor() as cur:
            cur.execute(_LOCK)
            _compact_dirty(cur, dirty, horizon, report)
    while report["chunks"] < max_chunks:
        state = CompactionState.objects.order_by("id").first()
        if state is not None and state.hour + _HOUR <= horizon:
            # Outside the chunk's transaction: a partition made in a transaction that rolls
            # back would stay in this process's cache of partitions that exist.
            partition_ensure("telemetry_gpusamplepacked", state.hour.date())
        with transaction.atomic(), binary_cursor() as cur:
            state = _state(horizon)
            if state.hour + _HOUR > horizon:
                break
            partition_ensure("telemetry_gpusamplepacked", state.hour.date())
            cur.execute(
                "SELECT id FROM fleet_gpu WHERE id > %s ORDER BY id LIMIT %s",
                [state.gpu_after, COMPACT_GPUS_PER_CHUNK],
            )
            gpus = [r[0] for r in cur.fetchall()]
            if gpus:
                cur.execute(_LOCK)
                g, s = _compact(cur, gpus, state.hour)
                report["gpu_hours"] += g
                report["samples"] += s
                state.gpu_after = gpus[-1]
            if len(gpus) < COMPACT_GPUS_PER_CHUNK:
                state.hour, state.gpu_after = state.hour + _HOUR, 0
            state.save()
        report["chunks"] += 1
    report["raw_days_truncated"] = len(_raw_days_reclaim(horizon, report))
    report["lag_hours"] = compaction_lag_hours(horizon)
    return report


def _dirty_partitions(dirty: CompactDirty, horizon: datetime) -> None:
    for hour in _hours(dirty.lo, min(dirty.hi, horizon)):
        partition_ensure("telemetry_gpusamplepacked", hour.date())


def _compact_dirty(cur, dirty: CompactDirty, horizon: datetime, report: dict) -> None:
    """Merge the late raw samples a CompactDirty row names into their packed hours and
    delete the row, in the caller's transaction (which holds the exclusive lock). Hours not
    past the horizon yet are left to the pass."""
    for hour in _hours(dirty.lo, min(dirty.hi, horizon)):
        for k in range(0, len(dirty.gpu_ids), COMPACT_GPUS_PER_CHUNK):
            g, s = _compact(cur, dirty.gpu_ids[k : k + COMPACT_GPUS_PER_CHUNK], hour)
            report["gpu_hours"] += g
            report["samples"] += s
    CompactDirty.objects.filter(id=dirty.id).delete()
    report["late"] += 1


# TRUNCATE of a raw day takes an ACCESS EXCLUSIVE lock on that partition; past this wait (a
# reader of that day holds it) the day is left for the next run (PostgreSQL docs,
# "lock_timeout"), as partitions.py does for drops.
RAW_TRUNCATE_LOCK_TIMEOUT = "2s"


def _raw_days_reclaim(horizon: datetime, report: dict) -> list[str]:
    """Empty the raw partitions of days the pass has finished, with TRUNCATE: the DELETEs of
    compaction leave their heap and index pages allocated until VACUUM, and their index
    never shrinks, so without this a compacted day would keep most of its raw size until
    retention dropped it.

    Safe because every raw row of a finished hour was moved by the pass, or arrived later
    through ingest's late path, which records it in CompactDirty under the shared lock: with
    the exclusive lock held no such write is in flight, and the day's CompactDirty rows are
    merged in the same transaction before the TRUNCATE. At most one day per run."""
    state = CompactionState.objects.order_by("id").first()
    if state is None:
        return []
    done = []
    for name, day in sorted(partition_days("telemetry_gpusample").items(), key=lambda i: i[1]):
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        end = start + timedelta(days=1)
        if end > state.hour:
            break
        with connection.cursor() as cur:
            cur.execute("SELECT pg_relation_size(%s::regclass)", [name])
            if cur.fetchone()[0] == 0:
                continue  # empty already
        dirty = list(CompactDirty.objects.filter(lo__lt=end, hi__gt=start).order_by("id"))
        for row in dirty:
            _dirty_partitions(row, horizon)
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(_LOCK)
                cur.execute(
                    "SELECT set_config('lock_timeout', %s, true)", [RAW_TRUNCATE_LOCK_TIMEOUT]
                )
                cur.execute(f'LOCK TABLE "{name}" IN ACCESS EXCLUSIVE MODE')
                with binary_cursor() as bcur:
                    for row in CompactDirty.objects.filter(lo__lt=end, hi__gt=start):
                        _compact_dirty(bcur, row, horizon, report)
                cur.execute(f'TRUNCATE "{name}"')
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "55P03":  # lock_not_available
                raise
            break
        done.append(name)
        break
    return done


def compaction_lag_hours(horizon: datetime | None = None) -> int:
    """Whole hours older than the horizon that the pass has not finished (0: caught up)."""
    horizon = horizon or compact_horizon()
    state = CompactionState.objects.order_by("id").first()
    first = state.hour if state is not None else _first_hour(horizon)
    return max(0, int((horizon - first) // _HOUR))


# --- Ingest's late path --------------------------------------------------------------------


def late_rows_filter(groups: list[list[tuple]]) -> list[list[tuple]]:
    """GPU rows (gpu id, ts, values...) of batches with samples older than `late_before()`,
    without those a packed hour already holds (a redelivery), in the caller's transaction;
    and the GPUs and hours of the late rows kept recorded in CompactDirty, so the next run
    merges them. Takes the shared lock that compaction chunks take exclusively."""
    with connection.cursor() as cur:
        cur.execute(_LOCK_SHARED)
    cutoff = datetime.fromtimestamp(late_before(), UTC)
    late = [(r[0], r[1]) for rows in groups for r in rows if r[1] < cutoff]
    if not late:
        return groups
    gpus = sorted({g for g, _ in late})
    lo = min(t for _, t in late).replace(minute=0, second=0, microsecond=0)
    hi = max(t for _, t in late)
    stored: set[tuple[int, int]] = set()
    with binary_cursor() as cur:
        cur.execute(
            "SELECT gpu_id, hot FROM telemetry_gpusamplepacked "
            "WHERE gpu_id = ANY(%s) AND hour >= %s AND hour <= %s",
            [gpus, lo, hi],
            binary=True,
        )
        for gpu_id, hot in cur.fetchall():
            stored.update((gpu_id, int(t)) for t in unpack(hot, HOT_FIELDS, set()).ts_us)
    if stored:
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        us = timedelta(microseconds=1)
        groups = [
            [r for r in rows if (r[0], (r[1] - epoch) // us) not in stored] for rows in groups
        ]
    kept = [(r[0], r[1]) for rows in groups for r in rows if r[1] < cutoff]
    if kept:
        CompactDirty.objects.create(
            gpu_ids=sorted({g for g, _ in kept}),
            lo=min(t for _, t in kept).replace(minute=0, second=0, microsecond=0),
            hi=max(t for _, t in kept).replace(minute=0, second=0, microsecond=0) + _HOUR,
        )
    return groups
