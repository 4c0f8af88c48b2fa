"""Load an AcmeTrace job trace (the paper's public CSV) into Job rows of one cluster.

    manage.py import_acmetrace --cluster seren trace_seren.csv [--batch-size 100000]

Streams the file in blocks (a progress bar in bytes on stderr), validates every row
(webapp/jobs/acmetrace.py: vectorised, with the per-row parser for anything doubtful), skips bad
rows reporting `line N: <reason>`, and writes good rows in chunks, one transaction each, as
binary COPY data built with NumPy. Into a cluster without jobs the COPY goes straight into
jobs_job; otherwise (and when a chunk holds a job id twice) into a temp table, then INSERT ...
ON CONFLICT (cluster, scheduler_id) DO NOTHING, so importing the same file again changes
nothing. Imported jobs have source `acmetrace` and no allocations (the traces do not say which
GPUs a job held).
"""

from __future__ import annotations

import csv
import re
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, suppress
from pathlib import Path

import numpy as np
import psycopg
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone
from tqdm import tqdm

from collectors.schema import NAME_PATTERN
from webapp.fleet.models import Cluster
from webapp.jobs.acmetrace import (
    _EPOCH_2000_S,
    STATE_NAMES,
    STATES,
    TYPE_NAMES,
    TYPES,
    Columns,
    RowParser,
    block_parse,
)
from webapp.jobs.choices import JobSource
from webapp.jobs.models import Job

BLOCK_BYTES = 4 << 20  # read size; about 34,000 rows of the Seren trace
SHOW_ERRORS = 20  # bad rows listed by line; all are counted

# COPY's column order: fixed-width fields first, then the nullable times, then text.
_COLUMNS = (
    "cluster_id, job_type_explicit, source, name, team, partition, qos, comment, submit_at, "
    "updated_at, gpus_requested, nodes_requested, cpus_requested, start_at, end_at, "
    'scheduler_id, "user", job_type, state'
)
_COPY_DIRECT = f"COPY jobs_job ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
_TEMP = """
CREATE TEMP TABLE IF NOT EXISTS vigil_import_job (
    cluster_id int8, job_type_explicit bool, source text, name text, team text, partition text,
    qos text, comment text, submit_at timestamptz, updated_at timestamptz, gpus_requested int4,
    nodes_requested int4, cpus_requested int4, start_at timestamptz, end_at timestamptz,
    scheduler_id text, "user" text, job_type text, state text
) ON COMMIT DELETE ROWS
"""
_COPY_TEMP = f"COPY vigil_import_job ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
_INSERT_SAFE = f"""
INSERT INTO jobs_job ({_COLUMNS}) SELECT {_COLUMNS} FROM vigil_import_job
ON CONFLICT (cluster_id, scheduler_id) DO NOTHING
"""
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # binary COPY header: flags 0, no extension
_TRAILER = b"\xff\xff"
_TYPE_VALUES = [TYPES[n].encode() for n in TYPE_NAMES]
_STATE_VALUES = [STATES[n].encode() for n in STATE_NAMES]


class Command(BaseCommand):
    help = "Import an AcmeTrace job trace CSV (Seren or Kalos schema) into one cluster."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name, e.g. seren")
        parser.add_argument("file", help="the trace CSV (trace_seren.csv, trace_kalos.csv)")
        parser.add_argument(
            "--batch-size", type=int, default=100_000, help="rows per transaction (default 100000)"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")

    def handle(self, *args, cluster: str, file: str, batch_size: int, **options) -> None:
        if not re.fullmatch(NAME_PATTERN, cluster):
            raise CommandError(f"--cluster: {cluster!r} is not a valid cluster name")
        if batch_size < 1:
            raise CommandError("--batch-size: must be at least 1")
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file}: no such file")
        started = time.perf_counter()
        with path.open("rb") as f:
            header_line = f.readline()
            try:
                header = next(csv.reader([header_line.decode("utf-8-sig")]), None)
                parser = RowParser(header)
            except (ValueError, UnicodeDecodeError) as exc:
                raise CommandError(f"{file}: not an AcmeTrace job trace: {exc}") from None
            cluster_obj, _ = Cluster.objects.get_or_create(name=cluster)
            size = path.stat().st_size
            with (
                _Import(self, parser, cluster_obj.id, batch_size) as stats,
                tqdm(
                    total=size,
                    initial=len(header_line),
                    unit="B",
                    unit_scale=True,
                    desc=f"import {path.name}",
                    file=self.stderr._out,
                    disable=options["no_progress"],
                    mininterval=0.5,
                ) as bar,
            ):
                while block := f.read(BLOCK_BYTES):
                    block += f.readline()  # end the block at a line end
                    stats.block(block)
                    bar.update(len(block))
                stats.flush()
        stats.report(time.perf_counter() - started)


class _Import:
    """Parse blocks, buffer good rows, write them a chunk at a time; count everything.

    One transaction per chunk: an interrupted import keeps whole chunks, and running it again
    completes it. A chunk's COPY runs in a helper thread on the same connection while the main
    thread parses the next chunk (NumPy and psycopg's waits release the GIL; the other core
    runs PostgreSQL); nothing else uses the connection meanwhile.
    """

    def __init__(self, command: BaseCommand, parser: RowParser, cluster_id: int, chunk: int):
        self.command = command
        self.parser = parser
        self.cluster_id = cluster_id
        self.chunk = chunk
        self.line = 2  # the first row's line (line 1 is the header)
        self.read = self.imported = self.present = 0
        self.skipped: Counter[str] = Counter()
        self.errors: list[str] = []
        self.parts: list[Columns] = []
        self.buffered = 0
        self.pending: tuple[ExitStack, Future, bytes, int] | None = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-copy")
        # A cluster without jobs (the usual first import) takes COPY straight into jobs_job;
        # a job id seen twice then fails its chunk, which is redone with ON CONFLICT.
        self.fresh = not Job.objects.filter(cluster_id=cluster_id).exists()

    def __enter__(self) -> _Import:
        return self

    def __exit__(self, *exc) -> None:
        if self.pending is not None:  # interrupted: wait for the COPY, then roll it back
            stack, future, _, _ = self.pending
            self.pending = None
            with suppress(psycopg.Error):
                future.result()
            if exc[0] is None:
                stack.close()
            else:
                stack.__exit__(*exc)
        self.pool.shutdown()

    def block(self, data: bytes) -> None:
        result = block_parse(self.parser, data, self.line)
        self.line += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        self.read += result.rows
        for line, exc in result.errors:
            self.skipped[exc.code] += 1
            if len(self.errors) < SHOW_ERRORS:
                self.errors.append(f"line {line}: {exc.message}")
        if len(result.columns):
            self.parts.append(result.columns)
            self.buffered += len(result.columns)
        if self.buffered >= self.chunk:
            self._write(final=False)

    def flush(self) -> None:
        """Write everything buffered, then wait for the last chunk."""
        self._write(final=True)
        self._finish()
        if self.imported:
            # Fresh statistics for the planner right away (autovacuum comes within minutes):
            # without them the reads of a million new jobs get plans made for a few hundred.
            with connection.cursor() as cur:
                cur.execute("ANALYZE jobs_job")

    def _write(self, final: bool) -> None:
        if not self.parts:
            return
        columns = Columns.concat(self.parts)
        self.parts, self.buffered = [], 0
        stop = len(columns) if final else len(columns) - len(columns) % self.chunk
        for i in range(0, stop, self.chunk):
            part = _slice(columns, i, min(i + self.chunk, len(columns)))
            data = _copy_data(part, self.cluster_id, timezone.now())
            self._finish()
            self._start(data, len(part))
        if stop < len(columns):
            self.parts, self.buffered = [_slice(columns, stop, len(columns))], len(columns) - stop

    def _start(self, data: bytes, rows: int) -> None:
        stack = ExitStack()
        try:
            stack.enter_context(transaction.atomic())
            connection.ensure_connection()
            raw = connection.connection
            if not self.fresh:
                with connection.cursor() as cur:
                    self._temp(cur)
            if not self.fresh:
                future = self.pool.submit(_copy, raw, _COPY_TEMP, data, _INSERT_SAFE)
            else:
                future = self.pool.submit(_copy, raw, _COPY_DIRECT, data)
        except BaseException:
            stack.close()
            raise
        self.pending = (stack, future, data, rows)

    def _finish(self) -> None:
        if self.pending is None:
            return
        stack, future, data, rows = self.pending
        self.pending = None
        try:
            inserted = future.result()
        except psycopg.errors.UniqueViolation as exc:
            # A job id twice in the chunk (or stored meanwhile): redo it with ON CONFLICT.
            stack.__exit__(type(exc), exc, exc.__traceback__)  # roll back
            with transaction.atomic(), connection.cursor() as cur:
                self._temp(cur)
                inserted = _copy(connection.connection, _COPY_TEMP, data, _INSERT_SAFE)
        except psycopg.Error as exc:
            stack.__exit__(type(exc), exc, exc.__traceback__)
            raise CommandError(f"storing a chunk failed: {str(exc).strip()}") from None
        else:
            stack.close()  # commit
        self.imported += inserted
        self.present += rows - inserted

    @staticmethod
    def _temp(cur) -> None:
        # Emptied explicitly: inside an outer transaction (a test, a caller's atomic block)
        # ON COMMIT never comes between chunks.
        cur.execute(_TEMP)
        cur.execute("TRUNCATE vigil_import_job")

    def report(self, seconds: float) -> None:
        out = self.command.stdout
        skipped = sum(self.skipped.values())
        rate = self.read / seconds if seconds > 0 else 0.0
        for error in self.errors:
            out.write(error)
        if skipped > len(self.errors):
            out.write(f"... and {skipped - len(self.errors):,} more skipped rows")
        out.write(
            f"read {self.read:,} rows in {seconds:.1f} s ({rate:,.0f} rows/s): "
            f"imported {self.imported:,}, already present {self.present:,}, skipped {skipped:,}"
        )
        if skipped:
            reasons = ", ".join(f"{code} {n:,}" for code, n in self.skipped.most_common())
            out.write(f"skipped by reason: {reasons}")


def _copy(raw: psycopg.Connection, sql: str, data: bytes, then: str | None = None) -> int:
    """COPY `data`, then run `then`; the rows that stored (all of them for a plain COPY)."""
    with raw.cursor() as cur:
        with cur.copy(sql) as copy:
            copy.write(data)
        rows = cur.rowcount
        if then:
            cur.execute(then)
            rows = cur.rowcount
    return rows


def _slice(c: Columns, a: int, b: int) -> Columns:
    def text(t: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        flat, lens = t
        ends = np.cumsum(lens)
        lo = int(ends[a - 1]) if a else 0
        return flat[lo : int(ends[b - 1]) if b else 0], lens[a:b]

    plain = {
        name: getattr(c, name)[a:b]
        for name in Columns.__dataclass_fields__
        if name not in ("job_id", "user")
    }
    return Columns(job_id=text(c.job_id), user=text(c.user), **plain)


# The first 13 fields have the same width in every row: one big-endian record each, with
# the field count and every field's length word (binary COPY's row layout).
_PREFIX = np.dtype(
    [
        ("fields", ">i2"),
        ("cluster_len", ">i4"),
        ("cluster_id", ">i8"),
        ("explicit_len", ">i4"),
        ("explicit", "u1"),
        ("source_len", ">i4"),
        ("source", f"S{len(JobSource.ACMETRACE.value)}"),
        *((f"empty{i}_len", ">i4") for i in range(5)),  # name, team, partition, qos, comment
        ("submit_len", ">i4"),
        ("submit_at", ">i8"),
        ("updated_len", ">i4"),
        ("updated_at", ">i8"),
        ("gpus_len", ">i4"),
        ("gpus", ">i4"),
        ("nodes_len", ">i4"),
        ("nodes", ">i4"),
        ("cpus_len", ">i4"),
        ("cpus", ">i4"),
    ]
)
_FIELDS = 19


def _prefix(c: Columns, cluster_id: int, updated_us: int) -> np.ndarray:
    rec = np.zeros(len(c), _PREFIX)
    rec["fields"] = _FIELDS
    rec["cluster_len"], rec["cluster_id"] = 8, cluster_id
    rec["explicit_len"], rec["explicit"] = 1, 1  # job_type_explicit: the trace names the type
    rec["source_len"], rec["source"] = len(JobSource.ACMETRACE.value), JobSource.ACMETRACE.value
    rec["submit_len"], rec["submit_at"] = 8, c.submit_us
    rec["updated_len"], rec["updated_at"] = 8, updated_us
    for name, values in (("gpus", c.gpus), ("nodes", c.nodes), ("cpus", c.cpus)):
        rec[f"{name}_len"], rec[name] = 4, values
    return rec.view(np.uint8).reshape(len(c), _PREFIX.itemsize)


def _fixed(values: np.ndarray, null: np.ndarray):
    """(lengths, bytes) of a nullable int8 column; -1 marks NULL."""
    return np.where(null, -1, 8), values[~null].astype(">i8").view(np.uint8)


def _text(column: tuple[np.ndarray, np.ndarray]):
    flat, lens = column
    return lens, flat


def _category(index: np.ndarray, values: list[bytes]):
    width = max(len(v) for v in values)
    table = np.array([list(v.ljust(width, b"\0")) for v in values], np.uint8)
    lens = np.array([len(v) for v in values], np.int64)[index]
    return lens, table[index][np.arange(width) < lens[:, None]]


def _copy_data(c: Columns, cluster_id: int, now) -> bytes:
    """The chunk as one binary COPY stream (signature, rows, trailer), in _COLUMNS order."""
    n = len(c)
    updated_us = round((now.timestamp() - _EPOCH_2000_S) * 1e6)
    prefix = _prefix(c, cluster_id, updated_us)
    fields = [
        _fixed(c.start_us, c.start_null),
        _fixed(c.end_us, c.end_null),
        _text(c.job_id),
        _text(c.user),
        _category(c.type_index, _TYPE_VALUES),
        _category(c.state_index, _STATE_VALUES),
    ]
    sizes = [np.maximum(lens, 0) for lens, _ in fields]
    row_len = prefix.shape[1] + 4 * len(fields) + np.sum(sizes, axis=0)
    out = np.empty(len(_SIGNATURE) + int(row_len.sum()) + len(_TRAILER), np.uint8)
    out[: len(_SIGNATURE)] = np.frombuffer(_SIGNATURE, np.uint8)
    out[-len(_TRAILER) :] = 0xFF
    pos = np.cumsum(row_len) - row_len + len(_SIGNATURE)
    out[pos[:, None] + np.arange(prefix.shape[1])] = prefix
    pos = pos + prefix.shape[1]
    for (lens, data), size in zip(fields, sizes, strict=True):
        out[pos[:, None] + np.arange(4)] = lens.astype(">i4").view(np.uint8).reshape(n, 4)
        pos += 4
        if data.size:
            offsets = np.cumsum(size) - size
            out[np.repeat(pos - offsets, size) + np.arange(data.size)] = data
        pos += size
    return out.tobytes()
