"""Ingest: validate a wire batch, write it with binary COPY, keep the 1-minute rollup current.

The path of a group of batches (a worker takes several at a time), in one transaction:
  1. one binary COPY of all their GPU rows straight into the day-partitioned
     `telemetry_gpusample` (psycopg 3 `cursor.copy`). If any row is already stored (a
     redelivered batch; the natural key is gpu + ts), the transaction is rolled back and each
     batch goes again alone, its rows through a temp table with ON CONFLICT DO NOTHING, so a
     redelivery adds nothing;
  2. one statement that brings `telemetry_gpulatest` (one row per GPU) up to the newest of
     those rows, changing a GPU's row only when the group has a newer ts than it holds;
  3. per batch, one prepared statement for the rest: the node samples (natural key node +
     ts; the retry of a redelivered batch skips stored ones), one `RollupDirty` row naming
     the GPUs and minutes that changed, and the node marked seen.
`rollups_refresh` (a beat task, every 15 s) then recomputes exactly those rollup cells in
bulk, which costs far less than folding every batch into the rollup on the hot path.
A batch that fails validation or authentication is refused whole and logged in RejectedBatch;
so is one that fails to store for any other reason than a database outage (`store_failed`):
the group's transaction is then rolled back and each batch stored alone, so only the one that
fails is refused (webapp/core/ingest.py states the whole policy).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from operator import itemgetter

import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction

from collectors.schema import (
    GPU_FIELD_NAMES,
    GPU_FIELDS,
    NODE_FIELD_NAMES,
    NODE_FIELDS,
    Batch,
    BatchError,
    parse_batch,
)
from webapp.core import pgcopy
from webapp.core.ingest import Refused, db_outage, store_failure
from webapp.core.models import RejectedBatch
from webapp.core.refusals import AuthError, batch_reject
from webapp.fleet.services import NODE_SEEN_UPDATE, gpus_register, node_authenticate
from webapp.telemetry.compaction import late_rows_filter
from webapp.telemetry.metrics import ingest_samples_count
from webapp.telemetry.models import ROLLUP_METRICS
from webapp.telemetry.partitions import oldest_kept, partition_ensure
from webapp.telemetry.rollup_hourly import hourly_window, rollup1h_mark_late
from webapp.telemetry.samples import late_before, samples_relation

log = logging.getLogger("vigil.ingest")

_PG_TYPE = {"float": "real", "int": "bigint"}
_GPU_COLS = ", ".join(GPU_FIELD_NAMES)
_NODE_COLS = ", ".join(NODE_FIELD_NAMES)
# Type OIDs, not names: set_types() would look each of the 36 names up again on every COPY.
_GPU_COPY_TYPES = [
    psycopg.postgres.types[name].oid
    for name in ("int8", "timestamptz", *(_PG_TYPE[m.kind] for m in GPU_FIELDS))
]
_COPY_GPU_ROWS = f"COPY telemetry_gpusample (gpu_id, ts, {_GPU_COLS}) FROM STDIN (FORMAT BINARY)"

# Duplicates (a redelivered batch) take this path: the same rows COPY into a temp table, then
# ON CONFLICT DO NOTHING moves what is new.
_TEMP_GPU_ROWS = """
CREATE TEMP TABLE IF NOT EXISTS vigil_ingest_gpu_rows (LIKE telemetry_gpusample)
ON COMMIT DELETE ROWS
"""
_COPY_TEMP_GPU_ROWS = (
    f"COPY vigil_ingest_gpu_rows (gpu_id, ts, {_GPU_COLS}) FROM STDIN (FORMAT BINARY)"
)
_MOVE_GPU_ROWS = f"""
INSERT INTO telemetry_gpusample (gpu_id, ts, {_GPU_COLS})
SELECT gpu_id, ts, {_GPU_COLS} FROM vigil_ingest_gpu_rows
ON CONFLICT DO NOTHING
"""

# The rest of a batch, after its GPU rows, in one statement: the node samples from one binary
# array per column, the RollupDirty row when `mark` says GPU rows were stored, and the node
# marked seen (its rules live with `node_seen`). A missing value travels as NaN in a float
# column (the schema refuses NaN, so a sample never is one) and as -1 in an int column (all
# are counts, never negative); nullif() makes either NULL again. The first try inserts node
# samples plainly, so a stored one raises as a stored GPU row does; the retry of a redelivered
# batch skips them (ON CONFLICT costs PostgreSQL work per row, so only the retry pays it).
_MISSING = {"float": "'NaN'", "int": "-1"}
_NODE_VALUES = ", ".join(f"nullif({m.name}, {_MISSING[m.kind]})" for m in NODE_FIELDS)
_NODE_ARRAYS = ", ".join(f"%({m.name})s::{_PG_TYPE[m.kind]}[]" for m in NODE_FIELDS)
_STORE_REST = """
WITH node_rows AS (
    INSERT INTO telemetry_nodesample (node_id, ts, {node_cols})
    SELECT %(seen_node)s, ts, {node_values}
    FROM unnest(%(ts)s::timestamptz[], {node_arrays}) AS u(ts, {node_cols})
    {on_conflict}
    RETURNING 1
), dirty AS (
    INSERT INTO telemetry_rollupdirty (gpu_ids, lo, hi, created_at)
    SELECT %(gpu_ids)s::bigint[], %(lo)s::timestamptz, %(hi)s::timestamptz, now()
    WHERE %(mark)s
), seen AS ({seen})
SELECT count(*) FROM node_rows
"""
_STORE_REST_FIRST, _STORE_REST_NEW = (
    _STORE_REST.format(
        node_cols=_NODE_COLS,
        node_values=_NODE_VALUES,
        node_arrays=_NODE_ARRAYS,
        on_conflict=on_conflict,
        seen=NODE_SEEN_UPDATE,
    )
    for on_conflict in ("", "ON CONFLICT DO NOTHING")
)

_ROLLUP_COLS = ", ".join(f"{m}_min, {m}_max, {m}_sum, {m}_cnt" for m in ROLLUP_METRICS)
_ROLLUP_AGGS = ", ".join(f"min({m}), max({m}), sum({m}), count({m})" for m in ROLLUP_METRICS)
_ROLLUP_SET = ", ".join(
    f"{col} = excluded.{col}"
    for col in ["n", "energy_mj_min", "energy_mj_max", *_ROLLUP_COLS.split(", ")]
)

# The latest sample of each GPU (telemetry_gpulatest), from the rows just stored: one index
# lookup per GPU of the group for its newest (gpu, ts), then an upsert that changes a row only
# when that ts is newer than the one kept, so a late or redelivered batch leaves it alone.
# Values are copied from the stored row, so the latest table holds exactly what the samples
# do (real columns stay real); it reads only rows this transaction stored, which are raw,
# never packed (compaction.py). The ts bounds are parameters the planner prunes partitions
# with; rows go in gpu order, so two groups naming the same GPUs lock them in one order and
# cannot deadlock.
_LATEST_UPSERT = f"""
INSERT INTO telemetry_gpulatest AS l (gpu_id, ts, {_GPU_COLS})
SELECT s.gpu_id, s.ts, {", ".join("s." + name for name in GPU_FIELD_NAMES)}
FROM unnest(%(gpu_ids)s::bigint[], %(tss)s::timestamptz[]) AS u(gpu_id, ts)
JOIN telemetry_gpusample s ON s.gpu_id = u.gpu_id AND s.ts = u.ts
WHERE s.ts >= %(lo)s::timestamptz AND s.ts <= %(hi)s::timestamptz
ORDER BY s.gpu_id
ON CONFLICT (gpu_id) DO UPDATE SET
    ts = excluded.ts, {", ".join(f"{name} = excluded.{name}" for name in GPU_FIELD_NAMES)}
WHERE excluded.ts > l.ts
"""

# Recompute the rollup cells (gpu, minute) named by claimed RollupDirty rows from the raw
# rows of those minutes: exact whatever was redelivered. A run's cost follows the cells it
# claims, never the data the partitions hold (a hash join over a whole day's partition cost
# seconds a run):
#   - _ROLLUP_PICK chooses the dirty rows of one statement, oldest first, up to about
#     ROLLUP_CELLS_PER_STATEMENT cells, and the time span they cover (rows of late samples,
#     which may reach packed hours, are left to `_refresh_late`);
#   - _ROLLUP_REFRESH claims them and reads each cell with its own index range scan of
#     (gpu_id, ts) (a LATERAL subquery: a nested loop over the cells, never a hash join
#     over a partition), and the span's constant bounds let the planner drop every
#     partition outside it. The cells are walked in key order, so that neighbouring lookups
#     share index pages (bench/scale.py measures a run).
# Claim and recompute share one snapshot, and runs are serialized by an advisory lock, so a
# batch committed later is simply picked up by the next run.
_ROLLUP_PICK = """
SELECT array_agg(id), min(lo), max(hi)
FROM (
    SELECT id, lo, hi, cells, sum(cells) OVER (ORDER BY id) AS upto
    FROM (
        SELECT id, lo, hi,
            cardinality(gpu_ids) * (extract(epoch FROM hi - lo) / 60)::bigint AS cells
        FROM telemetry_rollupdirty WHERE lo >= %(late)s ORDER BY id LIMIT %(rows)s
    ) oldest
) d
WHERE upto - cells < %(cells)s
"""
_ROLLUP_REFRESH = f"""
WITH claimed AS (
    DELETE FROM telemetry_rollupdirty WHERE id = ANY(%(ids)s)
    RETURNING gpu_ids, lo, hi
), cells AS (
    SELECT DISTINCT g AS gpu_id, m AS minute
    FROM claimed,
        unnest(gpu_ids) AS g,
        generate_series(lo, hi - interval '1 minute', interval '1 minute') AS m
    ORDER BY 1, 2
), upserted AS (
    INSERT INTO telemetry_gpurollup1m AS r
        (gpu_id, minute, n, energy_mj_min, energy_mj_max, {_ROLLUP_COLS})
    SELECT c.gpu_id, c.minute, a.*
    FROM cells c
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(energy_mj), max(energy_mj), {_ROLLUP_AGGS}
        FROM telemetry_gpusample s
        WHERE s.gpu_id = c.gpu_id
            AND s.ts >= c.minute AND s.ts < c.minute + interval '1 minute'
            AND s.ts >= %(lo)s AND s.ts < %(hi)s
    ) a
    WHERE a.n > 0
    ORDER BY 1, 2
    ON CONFLICT (gpu_id, minute) DO UPDATE SET {_ROLLUP_SET}
    RETURNING 1
)
SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM upserted)
"""

# Two-key advisory lock space 2 = "rollup refresh" (one run at a time).
_LOCK_ROLLUP = "SELECT pg_try_advisory_xact_lock(2, 0)"
ROLLUP_CLAIM_LIMIT = 2000  # dirty rows (batches) looked at per statement
# Cells (GPU x minute) per statement and statements per run: a 15 s run of a 50,000-GPU fleet
# at 15 s samples has 50,000-100,000 new cells (each GPU's current minute, and the one before
# at a minute's turn), so a run folds that and catches up at twice the rate after an outage;
# the rest of a backlog is left for the next runs, each transaction kept short.
ROLLUP_CELLS_PER_STATEMENT = 20_000
ROLLUP_ROUNDS_PER_RUN = 10
# Dirty rows of late samples (older than compaction may have packed: `_refresh_late`) per
# round: each unpacks its GPUs' packed hours, so they go one batch (one node's GPUs over its
# intervals) at a time, and a round stays short.
ROLLUP_LATE_PER_ROUND = 50


@dataclass(frozen=True)
class IngestResult:
    batch_id: str
    node: str
    samples: int
    samples_stored: int
    node_samples_stored: int

    @property
    def duplicates(self) -> int:
        return self.samples - self.samples_stored


_EPOCH = date(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
_MINUTE = timedelta(minutes=1)
_NEVER = datetime.min.replace(tzinfo=UTC)
_pk = itemgetter(0, 1)  # (gpu id, ts) of a GPU row


@dataclass(frozen=True)
class _Ready:
    """A validated batch, made ready to store: its GPU rows for COPY and the rest's params."""

    batch_id: str
    node: str
    gpu_rows: list[tuple]
    rest: dict
    raw: str | bytes  # what the batch said, to refuse it if storing it fails
    samples: int = 0  # GPU samples the batch carried (gpu_rows may lose packed duplicates)
    late: bool = False  # has samples an hour may already hold packed (compaction.py)


def samples_ingest(raw: str | bytes) -> IngestResult:
    """Validate and store one wire batch. Raises BatchError or AuthError to refuse it whole,
    and what storing it raised (the caller's policy decides)."""
    [result] = _store([_ready(raw)], refuse_failed=False)
    ingest_samples_count(result.samples_stored)
    return result


def samples_ingest_many(raws: Sequence[str | bytes]) -> list[IngestResult | RejectedBatch]:
    """Validate several wire batches, store the valid ones and record the refused ones, all
    in one transaction with one COPY for all GPU rows: far cheaper per batch than one each (a
    round trip to PostgreSQL per statement, a commit per batch), and every batch of the group
    is finished at the same moment. In order, what became of each batch: a batch that fails
    to store (not a database outage, which raises) is refused alone, as `store_failed`."""
    ready: list[_Ready] = []
    refused: list[tuple[str | bytes, _Refusal]] = []
    valid: list[bool] = []
    for raw in raws:
        try:
            ready.append(_ready(raw))
            valid.append(True)
        except (BatchError, AuthError) as exc:
            refused.append((raw, exc))
            valid.append(False)
        except Exception as exc:
            if db_outage(exc):
                raise
            refused.append((raw, store_failure(exc)))
            valid.append(False)
    outcomes = _store(ready, refused)
    ingest_samples_count(sum(o.samples_stored for o in outcomes if isinstance(o, IngestResult)))
    stored, rejected = iter(outcomes[: len(ready)]), iter(outcomes[len(ready) :])
    return [next(stored) if ok else next(rejected) for ok in valid]


def _ready(raw: str | bytes) -> _Ready:
    """Validate and authenticate a batch, register its GPUs and partitions, and build what
    _store writes. Raises BatchError or AuthError to refuse it whole."""
    batch = parse_batch(raw, max_future_s=settings.VIGIL_MAX_FUTURE_SKEW_S)
    node = node_authenticate(batch.cluster, batch.node, batch.credential)
    # Per-batch work runs over the distinct timestamps (all GPUs of a node share each one),
    # not over every row.
    gpu_times = {row[1] for row in batch.samples}
    times = gpu_times | {row[0] for row in batch.node_samples}
    days = {_EPOCH + timedelta(days=n) for n in {int(t // 86400) for t in times}}
    if days and min(days) < oldest_kept():
        raise BatchError(
            "expired",
            f"samples from {min(days)} are older than the {settings.VIGIL_RETENTION_DAYS}-day "
            "retention",
        )
    gpu_ids = gpus_register(node.id, batch.gpus)
    for day in days:
        partition_ensure("telemetry_gpusample", day)
        partition_ensure("telemetry_nodesample", day)
        partition_ensure("telemetry_gpurollup1m", day)

    stamps = {t: datetime.fromtimestamp(t, UTC) for t in times}
    gpu_rows = [(gpu_ids[row[0]], stamps[row[1]]) + row[2:] for row in batch.samples]
    # In primary-key order (gpu, ts): each GPU's rows then land next to each other in the
    # index, which makes PostgreSQL's side of the COPY about a fifth cheaper than the
    # time-major order a node samples in. The collector already sends GPU-major order, so the
    # sort (which costs as much as checking the whole order) is skipped when the first two
    # rows are of one GPU: the order changes PostgreSQL's cost, never what is stored.
    if len(gpu_rows) > 1 and gpu_rows[0][0] != gpu_rows[1][0]:
        gpu_rows.sort(key=_pk)
    last = stamps[max(times)] if times else datetime.fromtimestamp(batch.sent_at, UTC)
    rest = _rest_params(batch, node.id, gpu_ids, gpu_times, stamps, last)
    late = bool(gpu_times) and min(gpu_times) < late_before()
    return _Ready(str(batch.batch_id), batch.node, gpu_rows, rest, raw, len(gpu_rows), late)


def _without_packed(ready: list[_Ready]) -> list[_Ready]:
    """Late batches lose the samples a packed hour already holds (a redelivery: stored
    once), and their hours are marked for compaction; a cheap no-op for live batches."""
    if not any(r.late for r in ready):
        return ready
    kept = late_rows_filter([r.gpu_rows for r in ready])
    return [replace(r, gpu_rows=rows) for r, rows in zip(ready, kept, strict=True)]


_Refusal = BatchError | AuthError | Refused


def _store(
    ready: list[_Ready],
    refused: Sequence[tuple[str | bytes, _Refusal]] = (),
    *,
    refuse_failed: bool = True,
) -> list[IngestResult | RejectedBatch]:
    """Store ready batches and record refused ones; the outcomes of the ready ones, then the
    RejectedBatch rows, each in the order given. A ready batch that fails to store is
    refused as `store_failed` (with refuse_failed; else the error is raised); a database
    outage raises."""
    try:
        # Common case, one transaction (one commit): one COPY of every batch's GPU rows
        # straight into the partitioned table, one statement per batch for the rest, then
        # the refusals.
        with transaction.atomic(), connection.cursor() as cur:
            results = []
            if ready:
                todo = _without_packed(ready)
                _copy(cur, _COPY_GPU_ROWS, [row for r in todo for row in r.gpu_rows])
                _latest_upsert([r.gpu_rows for r in todo])
                stored = [len(r.gpu_rows) for r in todo]
                node_stored = _store_rests(_STORE_REST_FIRST, [r.rest for r in todo], stored)
                results = list(map(_result, todo, stored, node_stored))
            return results + [batch_reject(raw, exc) for raw, exc in refused]
    except (IntegrityError, psycopg.errors.UniqueViolation):
        pass
    except Exception as exc:
        if db_outage(exc) or (not refuse_failed and len(ready) == 1):
            raise
        log.warning("a group of %d batches failed to store (%r); one at a time", len(ready), exc)
    # Some rows were stored before (a redelivered or overlapping batch, or one batch twice
    # in this group), or one batch cannot be stored: the transaction rolled back whole; each
    # batch now stores only what is new, in its own transaction, so a later batch sees what
    # an earlier one stored, and one that fails is refused alone.
    outcomes: list[IngestResult | RejectedBatch | _Refusal] = []
    for r in ready:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                [r] = _without_packed([r])
                stored = _copy_new(cur, r.gpu_rows)
                _latest_upsert([r.gpu_rows])
                [node_stored] = _store_rests(_STORE_REST_NEW, [r.rest], [stored])
            outcomes.append(_result(r, stored, node_stored))
        except Exception as exc:
            if db_outage(exc) or not refuse_failed:
                raise
            outcomes.append(store_failure(exc))
    with transaction.atomic():
        return [
            batch_reject(r.raw, o) if isinstance(o, Refused) else o
            for r, o in zip(ready, outcomes, strict=True)
        ] + [batch_reject(raw, exc) for raw, exc in refused]


def _result(ready: _Ready, stored: int, node_stored: int) -> IngestResult:
    return IngestResult(ready.batch_id, ready.node, ready.samples, stored, node_stored)


def _rest_params(
    batch: Batch,
    node_id: int,
    gpu_ids: dict[int, int],
    gpu_times: set[float],
    stamps: dict[float, datetime],
    last: datetime,
) -> dict:
    """Parameters of _STORE_REST: the node samples as one array per column, the GPUs and
    minutes a RollupDirty row names (None without GPU samples), and the node seen at `last`."""
    dirty = {"gpu_ids": None, "lo": None, "hi": None}
    if gpu_times:
        dirty = {
            "gpu_ids": sorted({gpu_ids[i] for i in {row[0] for row in batch.samples}}),
            "lo": stamps[min(gpu_times)].replace(second=0, microsecond=0),
            "hi": stamps[max(gpu_times)].replace(second=0, microsecond=0) + _MINUTE,
        }
    return {
        **_node_arrays(batch.node_samples, stamps),
        **dirty,
        "seen_node": node_id,
        "seen_at": last,
        "seen_source": batch.source,
    }


# Node samples go as PostgreSQL binary arrays (webapp/core/pgcopy.py), one per column: psycopg
# adapts a list element by element in Python, and a text array costs a
# repr() per float.
_NAN = float("nan")


def _node_arrays(rows: list[tuple], stamps: dict[float, datetime]) -> dict[str, pgcopy.Binary]:
    """The node rows (ts, values...) as one binary array per column, named as in the SQL."""
    columns = list(zip(*rows, strict=True)) or [()] * (1 + len(NODE_FIELDS))
    arrays = {
        "ts": pgcopy.array_binary(
            "timestamptz", [(stamps[t] - pgcopy.PG_EPOCH) // _MICROSECOND for t in columns[0]]
        )
    }
    for metric, column in zip(NODE_FIELDS, columns[1:], strict=True):
        if None in column:
            missing = _NAN if metric.kind == "float" else -1
            column = [missing if v is None else v for v in column]
        arrays[metric.name] = pgcopy.array_binary(_PG_TYPE[metric.kind], column)
    return arrays


def _store_rests(sql: str, params: list[dict], gpu_rows_stored: list[int]) -> list[int]:
    """Per batch: node samples, the RollupDirty row (only if GPU rows were stored), node
    seen, in the caller's transaction; how many node samples were new, per batch."""
    raw = connection.connection
    # Prepared once per connection: planning this statement costs PostgreSQL more than running
    # it. Django turns psycopg's preparing off for the connection (prepare_threshold None);
    # this statement turns it on for itself only. executemany sends every batch's statement
    # in one round trip (libpq pipeline mode).
    threshold, raw.prepare_threshold = raw.prepare_threshold, 0
    try:
        with psycopg.Cursor(raw) as cur:  # server-side binding: binary parameters
            cur.adapters.register_dumper(pgcopy.Binary, pgcopy.BinaryDumper)
            cur.executemany(
                sql,
                [{**p, "mark": n > 0} for p, n in zip(params, gpu_rows_stored, strict=True)],
                returning=True,
            )
            counts = [cur.fetchone()[0]]
            while cur.nextset():
                counts.append(cur.fetchone()[0])
            return counts
    finally:
        raw.prepare_threshold = threshold


def _latest_upsert(groups: list[list[tuple]]) -> None:
    """Bring telemetry_gpulatest up to the newest of these stored GPU rows (lists of
    (gpu id, ts, values...)), in the caller's transaction, in one statement."""
    newest: dict[int, datetime] = {}
    get = newest.get
    for rows in groups:
        for row in rows:
            if row[1] > get(row[0], _NEVER):
                newest[row[0]] = row[1]
    if not newest:
        return
    gpu_ids = sorted(newest)
    tss = [newest[g] for g in gpu_ids]
    raw = connection.connection
    with psycopg.Cursor(raw) as cur:  # server-side binding: binary parameters
        cur.adapters.register_dumper(pgcopy.Binary, pgcopy.BinaryDumper)
        cur.execute(
            _LATEST_UPSERT,
            {
                "gpu_ids": pgcopy.array_binary("int8", gpu_ids),
                "tss": pgcopy.array_binary(
                    "timestamptz", [(t - pgcopy.PG_EPOCH) // _MICROSECOND for t in tss]
                ),
                "lo": min(tss),
                "hi": max(tss),
            },
        )


def _copy(cur, sql: str, rows: list[tuple]) -> int:
    """Binary COPY of GPU rows (gpu id, ts, values...); raises UniqueViolation on a row that
    is already stored."""
    if not rows:
        return 0
    with cur.copy(sql) as copy:
        copy.set_types(_GPU_COPY_TYPES)
        for row in rows:
            copy.write_row(row)
    return len(rows)


def _copy_new(cur, rows: list[tuple]) -> int:
    """Store only the GPU rows not stored yet (temp table, ON CONFLICT DO NOTHING); how many."""
    if not rows:
        return 0
    cur.execute(_TEMP_GPU_ROWS)
    _copy(cur, _COPY_TEMP_GPU_ROWS, rows)
    cur.execute(_MOVE_GPU_ROWS)
    return cur.rowcount


def rollups_refresh(max_rounds: int = ROLLUP_ROUNDS_PER_RUN) -> tuple[int, int]:
    """Fold newly stored samples into the 1-minute rollup; return (batches, cells) done.

    At most `max_rounds` statements of about ROLLUP_CELLS_PER_STATEMENT cells each, oldest
    first: what is left waits for the next run. Returns (0, 0) at once if another refresh
    holds the lock: it will see our rows too, or the next run will. Each round also takes up
    to ROLLUP_LATE_PER_ROUND dirty rows of late samples (older than compaction may have
    packed), one by one (`_refresh_late`).
    """
    batches = cells = 0
    for _ in range(max_rounds):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(_LOCK_ROLLUP)
            if not cur.fetchone()[0]:
                break
            late = datetime.fromtimestamp(late_before(), UTC) - _MINUTE
            cur.execute(
                "SELECT id, gpu_ids, lo, hi FROM telemetry_rollupdirty WHERE lo < %s "
                "ORDER BY id LIMIT %s",
                [late, ROLLUP_LATE_PER_ROUND],
            )
            late_rows = cur.fetchall()
            for row in late_rows:
                claimed, upserted = _refresh_late(cur, *row)
                batches += claimed
                cells += upserted
            # Then the live rows, in the same round: a replayed spool never holds them up.
            cur.execute(
                _ROLLUP_PICK,
                {"rows": ROLLUP_CLAIM_LIMIT, "cells": ROLLUP_CELLS_PER_STATEMENT, "late": late},
            )
            ids, lo, hi = cur.fetchone()
            if not ids:
                if late_rows:
                    continue
                break
            if lo < hourly_window(datetime.now(UTC)):  # late: the hourly rollup must hear
                cur.execute(
                    "SELECT array_agg(DISTINCT g ORDER BY g) "
                    "FROM telemetry_rollupdirty, unnest(gpu_ids) g WHERE id = ANY(%s)",
                    [ids],
                )
                rollup1h_mark_late(cur.fetchone()[0] or [], lo, hi, datetime.now(UTC))
            cur.execute(_ROLLUP_REFRESH, {"ids": ids, "lo": lo, "hi": hi})
            claimed, upserted = cur.fetchone()
        batches += claimed
        cells += upserted
    return batches, cells


def _refresh_late(
    cur, dirty_id: int, gpus: list[int], lo: datetime, hi: datetime
) -> tuple[int, int]:
    """The refresh of one dirty row of late samples: its cells are recomputed from raw and
    packed samples together (samples.py, just these GPUs and minutes), and the hourly rollup
    is told which of its hours changed."""
    with samples_relation(gpus, lo, hi, ["energy_mj", *ROLLUP_METRICS], index=True) as rel:
        cur.execute(
            _ROLLUP_REFRESH.replace("telemetry_gpusample s", f"{rel} s"),
            {"ids": [dirty_id], "lo": lo, "hi": hi},
        )
        claimed, upserted = cur.fetchone()
    rollup1h_mark_late(gpus, lo, hi, datetime.now(UTC))
    return claimed, upserted
