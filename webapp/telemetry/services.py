"""Ingest: validate a wire batch, write it with binary COPY, keep the 1-minute rollup current.

The path per batch, in one transaction:
  1. binary COPY of the GPU rows straight into the day-partitioned `telemetry_gpusample`
     (psycopg 3 `cursor.copy`). If any row is already stored (a redelivered batch; the natural
     key is gpu + ts), the COPY's savepoint is rolled back and the rows go through a temp table
     with ON CONFLICT DO NOTHING, so a redelivery adds nothing;
  2. the same for node samples;
  3. one `RollupDirty` row names the GPUs and minutes that changed; the node is marked seen.
`rollups_refresh` (a beat task, every 15 s) then recomputes exactly those rollup cells in
bulk, which costs far less than folding every batch into the rollup on the hot path.
A batch that fails validation or authentication is refused whole and logged in RejectedBatch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
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
    BatchError,
    parse_batch,
)
from webapp.fleet.services import AuthError, gpus_register, node_authenticate, node_seen
from webapp.telemetry.models import ROLLUP_METRICS, RejectedBatch
from webapp.telemetry.partitions import oldest_kept, partition_ensure

log = logging.getLogger("vigil.ingest")

_PG_TYPE = {"float": "real", "int": "bigint"}
_GPU_COLS = ", ".join(GPU_FIELD_NAMES)
_NODE_COLS = ", ".join(NODE_FIELD_NAMES)
_GPU_COPY_TYPES = ["int8", "float8", *(_PG_TYPE[m.kind] for m in GPU_FIELDS)]
_NODE_COPY_TYPES = ["int8", "float8", *(_PG_TYPE[m.kind] for m in NODE_FIELDS)]

# Temp tables take the epoch seconds as sent; to_timestamp() runs in the INSERT, so Python
# never builds a datetime per row.
_TEMP_TABLES = f"""
CREATE TEMP TABLE IF NOT EXISTS vigil_ingest_gpu (
    gpu_id bigint, ts double precision,
    {", ".join(f"{m.name} {_PG_TYPE[m.kind]}" for m in GPU_FIELDS)}
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS vigil_ingest_node (
    node_id bigint, ts double precision,
    {", ".join(f"{m.name} {_PG_TYPE[m.kind]}" for m in NODE_FIELDS)}
) ON COMMIT DELETE ROWS;
"""

_ROLLUP_COLS = ", ".join(f"{m}_min, {m}_max, {m}_sum, {m}_cnt" for m in ROLLUP_METRICS)
_ROLLUP_AGGS = ", ".join(f"min({m}), max({m}), sum({m}), count({m})" for m in ROLLUP_METRICS)
_ROLLUP_SET = ", ".join(
    f"{col} = excluded.{col}"
    for col in ["n", "energy_mj_min", "energy_mj_max", *_ROLLUP_COLS.split(", ")]
)

# Duplicates (a redelivered batch) take this path: ON CONFLICT DO NOTHING from a temp table.
_MOVE_GPU_ROWS = f"""
INSERT INTO telemetry_gpusample (gpu_id, ts, {_GPU_COLS})
SELECT gpu_id, to_timestamp(ts), {_GPU_COLS} FROM vigil_ingest_gpu
ON CONFLICT DO NOTHING
"""

# Recompute the rollup cells (gpu, minute) named by claimed RollupDirty rows from the raw
# rows of those minutes: exact whatever was redelivered, and cheap because only changed
# minutes are read. Claim and recompute share one snapshot, and runs are serialized by an
# advisory lock, so a batch committed later is simply picked up by the next run.
_ROLLUP_REFRESH = f"""
WITH claimed AS (
    DELETE FROM telemetry_rollupdirty
    WHERE id IN (SELECT id FROM telemetry_rollupdirty ORDER BY id LIMIT %s)
    RETURNING gpu_ids, lo, hi
), cells AS (
    SELECT DISTINCT g AS gpu_id, m AS minute
    FROM claimed,
        unnest(gpu_ids) AS g,
        generate_series(lo, hi - interval '1 minute', interval '1 minute') AS m
), upserted AS (
    INSERT INTO telemetry_gpurollup1m AS r
        (gpu_id, minute, n, energy_mj_min, energy_mj_max, {_ROLLUP_COLS})
    SELECT s.gpu_id, c.minute, count(*), min(energy_mj), max(energy_mj), {_ROLLUP_AGGS}
    FROM cells c
    JOIN telemetry_gpusample s
        ON s.gpu_id = c.gpu_id AND s.ts >= c.minute AND s.ts < c.minute + interval '1 minute'
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (gpu_id, minute) DO UPDATE SET {_ROLLUP_SET}
    RETURNING 1
)
SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM upserted)
"""

# Two-key advisory lock space 2 = "rollup refresh" (one run at a time).
_LOCK_ROLLUP = "SELECT pg_try_advisory_xact_lock(2, 0)"
ROLLUP_CLAIM_LIMIT = 2000  # dirty rows (batches) per statement, to bound one transaction

_MOVE_NODE_ROWS = f"""
INSERT INTO telemetry_nodesample (node_id, ts, {_NODE_COLS})
SELECT node_id, to_timestamp(ts), {_NODE_COLS} FROM vigil_ingest_node
ON CONFLICT DO NOTHING
"""


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
_pk = itemgetter(0, 1)  # (gpu id, ts) of a GPU row


def samples_ingest(raw: str | bytes) -> IngestResult:
    """Validate and store one wire batch. Raises BatchError or AuthError to refuse it whole."""
    batch = parse_batch(raw, max_future_s=settings.VIGIL_MAX_FUTURE_SKEW_S)
    node = node_authenticate(batch.cluster, batch.node, batch.token)
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
    # In primary-key order (gpu, ts): each GPU's rows then land next to each other in the
    # index, which makes PostgreSQL's side of the COPY about a fifth cheaper than the
    # time-major order a node samples in (the collector already sends this order).
    gpu_rows = sorted(
        [(gpu_ids[row[0]], stamps[row[1]]) + row[2:] for row in batch.samples], key=_pk
    )
    node_rows = [(node.id, stamps[row[0]]) + row[1:] for row in batch.node_samples]
    last = stamps[max(times)] if times else datetime.fromtimestamp(batch.sent_at, UTC)
    dirty = None
    if gpu_times:
        dirty = (
            sorted({gpu_ids[i] for i in {row[0] for row in batch.samples}}),
            stamps[min(gpu_times)],
            stamps[max(gpu_times)],
        )
    try:
        # Common case, one transaction (one commit): COPY straight into the partitioned tables.
        with transaction.atomic(), connection.cursor() as cur:
            stored = _copy(cur, "telemetry_gpusample", "gpu_id", gpu_rows)
            node_stored = _copy(cur, "telemetry_nodesample", "node_id", node_rows)
            _rollup_mark(cur, dirty)
            node_seen(node.id, last, batch.source)
    except (IntegrityError, psycopg.errors.UniqueViolation):
        # Some rows were stored before (a redelivered or overlapping batch): the first
        # transaction rolled back whole; store only what is new.
        with transaction.atomic(), connection.cursor() as cur:
            stored = _copy_new(cur, "gpu_id", gpu_rows)
            node_stored = _copy_new(cur, "node_id", node_rows)
            if stored:
                _rollup_mark(cur, dirty)
            node_seen(node.id, last, batch.source)
    return IngestResult(str(batch.batch_id), batch.node, len(batch.samples), stored, node_stored)


def _copy(cur, table: str, key: str, rows: list[tuple]) -> int:
    """Binary COPY of (id, ts, values...) rows into `table`; raises UniqueViolation on a
    row that is already stored."""
    if not rows:
        return 0
    names = GPU_FIELD_NAMES if key == "gpu_id" else NODE_FIELD_NAMES
    types = _GPU_COPY_TYPES if key == "gpu_id" else _NODE_COPY_TYPES
    with cur.copy(
        f"COPY {table} ({key}, ts, {', '.join(names)}) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "timestamptz", *types[2:]])
        for row in rows:
            copy.write_row(row)
    return len(rows)


def _copy_new(cur, key: str, rows: list[tuple]) -> int:
    """Store only the rows not stored yet (temp table, ON CONFLICT DO NOTHING); how many."""
    if not rows:
        return 0
    names = GPU_FIELD_NAMES if key == "gpu_id" else NODE_FIELD_NAMES
    types = _GPU_COPY_TYPES if key == "gpu_id" else _NODE_COPY_TYPES
    temp = "vigil_ingest_gpu" if key == "gpu_id" else "vigil_ingest_node"
    cur.execute(_TEMP_TABLES)
    with cur.copy(
        f"COPY {temp} ({key}, ts, {', '.join(names)}) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row((row[0], row[1].timestamp(), *row[2:]))
    cur.execute(_MOVE_GPU_ROWS if key == "gpu_id" else _MOVE_NODE_ROWS)
    return cur.rowcount


def _rollup_mark(cur, dirty: tuple[list[int], datetime, datetime] | None) -> None:
    """Name the GPUs and minutes (GPU ids, first and last sample time) a batch touched, for
    the next rollup refresh."""
    if dirty is None:
        return
    gpu_ids, first, last = dirty
    cur.execute(
        "INSERT INTO telemetry_rollupdirty (gpu_ids, lo, hi, created_at) "
        "VALUES (%s, %s, %s, now())",
        [
            gpu_ids,
            first.replace(second=0, microsecond=0),
            last.replace(second=0, microsecond=0) + timedelta(minutes=1),
        ],
    )


def rollups_refresh(max_rounds: int = 50) -> tuple[int, int]:
    """Fold newly stored samples into the 1-minute rollup; return (batches, cells) done.

    Returns (0, 0) at once if another refresh holds the lock: it will see our rows too, or
    the next run will.
    """
    batches = cells = 0
    for _ in range(max_rounds):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(_LOCK_ROLLUP)
            if not cur.fetchone()[0]:
                break
            cur.execute(_ROLLUP_REFRESH, [ROLLUP_CLAIM_LIMIT])
            claimed, upserted = cur.fetchone()
        batches += claimed
        cells += upserted
        if claimed < ROLLUP_CLAIM_LIMIT:
            break
    return batches, cells


def batch_reject(raw: str | bytes, error: BatchError | AuthError) -> RejectedBatch:
    """Record a refused batch (reason, detail, who claimed to send it) and log it."""
    claimed: dict = {}
    try:
        parsed = json.loads(raw)
        if isinstance(parsed, dict):
            claimed = parsed
    except (ValueError, TypeError, UnicodeDecodeError):
        pass

    def text(key: str) -> str:
        value = claimed.get(key)
        return str(value)[:128] if isinstance(value, str | int) else ""

    rejected = RejectedBatch.objects.create(
        reason=error.reason,
        detail=error.detail[:2000],
        cluster=text("cluster"),
        node=text("node"),
        batch_id=text("batch_id")[:64],
        size_bytes=len(raw),
    )
    log.warning(
        "rejected batch %s from %s/%s: %s: %s",
        rejected.batch_id or "?",
        rejected.cluster or "?",
        rejected.node or "?",
        error.reason,
        error.detail,
    )
    return rejected
