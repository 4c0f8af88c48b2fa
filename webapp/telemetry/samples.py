"""The one reader of GPU samples, raw or compacted.

Raw rows live in `telemetry_gpusample`; hours older than VIGIL_COMPACT_AFTER_HOURS are packed,
one row per GPU and hour, in `telemetry_gpusamplepacked` (`packing.py`). Two ways in:

- `gpu_samples(gpu_ids, lo, hi, fields)`: NumPy arrays per GPU, raw and packed merged (the
  fast path for many GPU-hours of a few fields: energy accounting's energy_mj and power_w);
- `samples_relation(gpu_ids, lo, hi)`: for SQL readers, the name of a relation with the
  columns of telemetry_gpusample that holds every sample of those GPUs in that window. While
  none of the window is packed (live pages) it is `telemetry_gpusample` itself, at no cost;
  otherwise the packed hours are unpacked into a session temp table and the relation is raw
  UNION ALL that table, so the reader's SQL (window functions, percentiles) runs unchanged.

A sample is in raw or in packed, never both: compaction moves rows in one transaction, and
ingest drops a redelivered sample of a packed hour before it stores it (`compaction.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import ParamSpec

import numpy as np
import psycopg
from django.conf import settings
from django.db import connection

from collectors.schema import GPU_FIELDS
from webapp.core import pgcopy
from webapp.telemetry.packing import (
    PG_EPOCH_US,
    Column,
    Unpacked,
    array_column,
    merge,
    unpack_hour,
)

FIELDS: tuple[tuple[str, str], ...] = tuple((m.name, m.kind) for m in GPU_FIELDS)
_KIND = dict(FIELDS)
# The fields kept with the timestamps in a packed hour's small `hot` blob: what energy
# accounting reads over many GPU-hours (the counter, and power to integrate across its gaps).
HOT_FIELDS: tuple[tuple[str, str], ...] = tuple(
    f for f in FIELDS if f[0] in ("power_w", "energy_mj")
)
REST_FIELDS: tuple[tuple[str, str], ...] = tuple(f for f in FIELDS if f not in HOT_FIELDS)
_REST = {n for n, _ in REST_FIELDS}
RAW = "telemetry_gpusample"
UNPACKED = "vigil_unpacked_samples"

# Binary array OIDs (PostgreSQL's pg_type): float4[], int8[], timestamptz[].
_ARRAY_OIDS = {1021: "float4", 1016: "int8", 1185: "timestamptz"}


class _Bytes(psycopg.adapt.Loader):
    format = psycopg.pq.Format.BINARY

    def load(self, data: bytes | memoryview) -> bytes:
        return bytes(data)


def binary_cursor() -> psycopg.Cursor:
    """A psycopg cursor on Django's connection (its transaction) that hands binary arrays and
    bytea over as bytes, for `packing.array_column` and `unpack`: psycopg would build a
    Python object per element. Call with a connection open (inside `transaction.atomic`)."""
    connection.ensure_connection()
    cur = psycopg.Cursor(connection.connection)
    for oid in (*_ARRAY_OIDS, 17):  # 17: bytea, as it is
        cur.adapters.register_loader(oid, _Bytes)
    return cur


# Clocks of workers differ; a sample this much younger than the compaction horizon is still
# treated as possibly packed (NTP keeps hosts within milliseconds; 15 min is generous).
LATE_MARGIN = timedelta(minutes=15)


def compact_horizon(now: datetime | None = None) -> datetime:
    """Hours that end at or before this are compacted (the hour VIGIL_COMPACT_AFTER_HOURS
    ago, rounded down)."""
    now = now or datetime.now(UTC)
    t = now - timedelta(hours=settings.VIGIL_COMPACT_AFTER_HOURS)
    return t.replace(minute=0, second=0, microsecond=0)


def late_before(now_s: float | None = None) -> float:
    """Samples stamped before this (epoch s) may belong to a packed hour; nothing newer ever
    does. Ingest checks such samples against packed hours; readers skip packed rows for
    windows that start after it."""
    now_s = time.time() if now_s is None else now_s
    return now_s - settings.VIGIL_COMPACT_AFTER_HOURS * 3600 + LATE_MARGIN.total_seconds()


def _hour_floor(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _us(t: datetime) -> int:
    return int((t - pgcopy.PG_EPOCH) // timedelta(microseconds=1)) + PG_EPOCH_US


def packed_read(
    gpu_ids: Sequence[int],
    lo: datetime,
    hi: datetime,
    wanted: set[str] | None = None,
    *,
    sample_pct: float | None = None,
) -> dict[int, list[Unpacked]]:
    """The packed hours of these GPUs that overlap [lo, hi], unpacked (only `wanted` fields),
    per GPU in hour order. `sample_pct`: a repeatable Bernoulli sample of the GPU-hours."""
    if not gpu_ids:
        return {}
    sample = f"TABLESAMPLE BERNOULLI ({sample_pct:.6f}) REPEATABLE (42)" if sample_pct else ""
    # The rest of each hour only when a field of it is wanted: hot fields alone read a tenth
    # of the bytes (and no TOAST: the hot blob stays in the row).
    rest = "data" if wanted is None or wanted & _REST else "NULL::bytea"
    with binary_cursor() as cur:
        # Constant bounds on `hour` prune partitions; one index range per GPU (= ANY).
        cur.execute(
            f"SELECT gpu_id, hot, {rest} FROM telemetry_gpusamplepacked {sample} "
            "WHERE gpu_id = ANY(%s) AND hour >= %s AND hour <= %s ORDER BY gpu_id, hour",
            [list(gpu_ids), _hour_floor(lo), hi],
            binary=True,
        )
        rows = cur.fetchall()
    out: dict[int, list[Unpacked]] = {}
    for gpu_id, hot, data in rows:
        out.setdefault(gpu_id, []).append(unpack_hour(hot, data, HOT_FIELDS, REST_FIELDS, wanted))
    return out


def _concat(parts: list[Unpacked], names: Sequence[str]) -> Unpacked:
    if len(parts) == 1:
        return parts[0]
    columns = {}
    for name in names:
        cols = [p.columns[name] for p in parts]
        valid = None
        if any(c.valid is not None for c in cols):
            valid = np.concatenate([c.present() for c in cols])
        columns[name] = Column(np.concatenate([c.values for c in cols]), valid)
    return Unpacked(np.concatenate([p.ts_us for p in parts]), columns)


def _window(u: Unpacked, lo_us: int, hi_us: int, hi_open: bool) -> Unpacked:
    keep = (u.ts_us >= lo_us) & ((u.ts_us < hi_us) if hi_open else (u.ts_us <= hi_us))
    if keep.all():
        return u
    return Unpacked(
        u.ts_us[keep],
        {
            n: Column(c.values[keep], None if c.valid is None else c.valid[keep])
            for n, c in u.columns.items()
        },
    )


def gpu_samples(
    gpu_ids: Sequence[int], lo: datetime, hi: datetime, fields: Sequence[str]
) -> dict[int, Unpacked]:
    """Every sample of each GPU with lo <= ts < hi, raw or compacted, as NumPy arrays.

    Returns {gpu_id: Unpacked} for the GPUs that have samples: `.ts_us` (int64 microseconds
    since 1970 UTC, ascending, unique) and `.columns[name]` for each of `fields`: a Column
    whose `.values` are float32 (PostgreSQL real, bit-exact; NaN where NULL) or int64 (0 where
    NULL) and `.valid` None (no NULL) or a bool mask. Costs one indexed query on the raw table
    and one on the packed one, then the decoding: energy_mj and power_w come from each
    GPU-hour's small `hot` blob (other fields need its second blob too; columns not asked
    for are skipped), faster than the same samples raw (bench/scale.py measures both).
    Samples are kept
    VIGIL_RETENTION_DAYS; longer spans read the rollups (energy_mj_min / _max per minute in
    telemetry_gpurollup1m, per hour in telemetry_gpurollup1h).
    """
    names = list(dict.fromkeys(fields))
    unknown = [n for n in names if n not in _KIND]
    if unknown:
        raise ValueError(f"not a GPU sample field: {unknown[0]!r}")
    if not gpu_ids:
        return {}
    lo_us, hi_us = _us(lo), _us(hi)
    packed = packed_read(gpu_ids, lo, hi, set(names))
    aggs = "".join(f", array_agg({n} ORDER BY ts)" for n in names)
    with binary_cursor() as cur:
        cur.execute(
            f"SELECT gpu_id, array_agg(ts ORDER BY ts){aggs} FROM {RAW} "
            "WHERE gpu_id = ANY(%s) AND ts >= %s AND ts < %s GROUP BY gpu_id",
            [list(gpu_ids), lo, hi],
            binary=True,
        )
        raw_rows = cur.fetchall()
    raw: dict[int, Unpacked] = {}
    for gpu_id, ts, *arrays in raw_rows:
        raw[gpu_id] = Unpacked(
            array_column(ts, "timestamptz").values,
            {
                n: array_column(a, "float4" if _KIND[n] == "float" else "int8")
                for n, a in zip(names, arrays, strict=True)
            },
        )
    out: dict[int, Unpacked] = {}
    for gpu_id in gpu_ids:
        parts = packed.get(gpu_id)
        mine = raw.get(gpu_id)
        if parts:
            both = _window(_concat(parts, names), lo_us, hi_us, hi_open=True)
            fields_of = tuple((n, _KIND[n]) for n in names)
            mine = merge(both, mine, fields_of) if mine is not None else both
        if mine is not None and len(mine):
            out[gpu_id] = mine
    return out


def samples_source(
    gpu_ids: Sequence[int],
    lo: datetime,
    hi: datetime,
    fields: Sequence[str] | None = None,
    *,
    sample_pct: float | None = None,
    index: bool = False,
) -> str:
    """A relation (SQL text for FROM or JOIN, with the columns of telemetry_gpusample) holding
    every sample of these GPUs with lo <= ts <= hi, raw or compacted; the reader's own SQL
    applies its exact bounds. For a reader that runs its SQL right after: the unpacked rows
    stay in the session's temp table until the next call (or the connection's end);
    `samples_relation` empties it when its `with` block ends.

    `fields`: the metric columns the reader uses (default: all). Only those are unpacked
    from packed hours, the others read NULL there: a reader's cost then follows what it
    reads (bench/scale.py measures one column against all of them). `sample_pct` samples
    packed GPU-hours (for readers that
    block-sample the raw table); `index` builds a (gpu_id, ts) index on the unpacked rows,
    for readers that look up cells one by one.
    """
    names = [n for n, _ in FIELDS] if fields is None else list(dict.fromkeys(fields))
    unknown = [n for n in names if n not in _KIND]
    if unknown:
        raise ValueError(f"not a GPU sample field: {unknown[0]!r}")
    if lo >= datetime.fromtimestamp(late_before(), UTC):
        return RAW  # newer than anything compaction packs: live pages pay nothing
    packed = packed_read(gpu_ids, lo, hi, set(names), sample_pct=sample_pct)
    if not packed:
        return RAW
    lo_us, hi_us = _us(lo), _us(hi)
    parts = {g: _window(_concat(p, names), lo_us, hi_us, hi_open=False) for g, p in packed.items()}
    rows = sum(len(u) for u in parts.values())
    with connection.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {UNPACKED} (LIKE {RAW})")
        cur.execute(f"TRUNCATE {UNPACKED}")
        if rows:
            gpu = np.concatenate([np.full(len(u), g, np.int64) for g, u in parts.items()])
            ts = np.concatenate([u.ts_us for u in parts.values()]) - PG_EPOCH_US
            columns: dict[str, pgcopy.Fixed] = {
                "gpu_id": pgcopy.Fixed("int8", gpu),
                "ts": pgcopy.Fixed("timestamptz", ts),
            }
            for name in names:
                cols = [u.columns[name] for u in parts.values()]
                values = np.concatenate([c.values for c in cols])
                valid = np.concatenate([c.present() for c in cols])
                columns[name] = pgcopy.Fixed(
                    "float4" if _KIND[name] == "float" else "int8", values, null=~valid
                )
            # The columns not named stay NULL (COPY fills them with their default).
            listed = ", ".join(columns)
            with cur.copy(f"COPY {UNPACKED} ({listed}) FROM STDIN (FORMAT BINARY)") as copy:
                for buf in pgcopy.copy_binary(rows, columns):
                    copy.write(buf)
            if index:
                cur.execute(f"CREATE INDEX IF NOT EXISTS {UNPACKED}_key ON {UNPACKED} (gpu_id, ts)")
            cur.execute(f"ANALYZE {UNPACKED}")
    return f"(SELECT * FROM {RAW} UNION ALL SELECT * FROM {UNPACKED})"


P = ParamSpec("P")


def _emptied_after(fill: Callable[P, str]) -> Callable[P, AbstractContextManager[str]]:
    """`fill` as a `with` block that empties the unpacked rows when it ends."""

    @contextmanager
    def relation(*args: P.args, **kwargs: P.kwargs) -> Iterator[str]:
        source = fill(*args, **kwargs)
        try:
            yield source
        finally:
            if source != RAW:
                with connection.cursor() as cur:
                    cur.execute(f"TRUNCATE {UNPACKED}")

    return relation


# `samples_source` for use inside a `with` block, which frees the unpacked rows at its end.
samples_relation = _emptied_after(samples_source)
