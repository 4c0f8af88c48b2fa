"""The AcmeTrace job trace import (the paper's public CSV) into Job rows of one cluster.

`trace_import(path, cluster)` streams the file in 4 MB blocks, validates every row
(webapp/jobs/acmetrace.py: vectorised, with the per-row parser for anything doubtful), skips
bad rows, reporting `line N: <reason>`, and stores the good rows of each block with one binary
COPY (built with NumPy by webapp/core/pgcopy.py) straight into jobs_job, by writer threads
while the calling thread parses the next blocks. A writer groups blocks into transactions of at
least `batch_size` rows: an interrupted import keeps whole transactions (never part of a row or
of a block), and running it again completes it. `manage.py import_acmetrace` is its command.

Idempotent: a block whose COPY meets a job id already stored (or one twice in the block) is
rolled back to its savepoint and stored again without those rows (the first of a repeated id
wins; with several writers, the first stored), so importing the same file again changes
nothing. The jobs' tallies (the characterization's summary, webapp/jobs/tallies.py) are
computed from the parsed columns (`tally_of_columns`) and stored in the same transaction; the
tally trigger, a call per row, is off for the import's own COPY. Imported jobs have source
`acmetrace` and no allocations (the traces do not say which GPUs a job held).

Where a million-row import's time goes: PostgreSQL's heap and index work (the heap, then
each of the three indexes) is most of it, split over the writers; parsing and encoding with
NumPy run in the calling thread (bench/import.py measures both).
"""

from __future__ import annotations

import csv
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from collectors.schema import NAME_PATTERN
from webapp.core import pgcopy
from webapp.fleet.models import Cluster
from webapp.jobs.acmetrace import (
    STATE_NAMES,
    STATES,
    TYPE_NAMES,
    TYPES,
    Columns,
    RowParser,
    block_parse,
)
from webapp.jobs.choices import JobSource
from webapp.jobs.services import job_tallies_add, job_tallies_compact
from webapp.jobs.tallies import Group, Hist, Tally, epoch_s

BLOCK_BYTES = 4 << 20  # read size and COPY size: about 34,000 rows of the Seren trace
SHOW_ERRORS = 20  # bad rows listed by line; all are counted
# Writers (database connections) of an import outside a transaction: one PostgreSQL process
# each. Two keep both cores of a small machine busy with the index and heap work (the calling
# thread's parsing takes a third as long); more wait on each other's index pages.
WRITERS = 2
# Statistics target of the ANALYZE after an import (PostgreSQL's default: 100): samples of
# 300 x target rows; 9,000 give the planner the row counts, value ranges and common values of
# every column. Later autovacuum analyses use the default.
ANALYZE_TARGET = 30

# COPY's column order (and _copy_data's). The others take their database defaults (the empty
# name, team, partition, QOS and comment; updated_at now()).
_COLUMNS = (
    "cluster_id, job_type_explicit, source, submit_at, gpus_requested, nodes_requested, "
    'cpus_requested, start_at, end_at, scheduler_id, "user", job_type, state'
)
_COPY = f"COPY jobs_job ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
_EXISTING = "SELECT scheduler_id FROM jobs_job WHERE cluster_id = %b AND scheduler_id = ANY(%b)"
# The last resort when rows stored by another writer meanwhile still collide: a temp table,
# then INSERT ... ON CONFLICT (with the tally trigger on, as for any other writer); the first
# of a repeated id wins (the temp table is read in the order written).
_TEMP = """
CREATE TEMP TABLE IF NOT EXISTS vigil_import_job (
    cluster_id int8, job_type_explicit bool, source text, submit_at timestamptz,
    gpus_requested int4, nodes_requested int4, cpus_requested int4, start_at timestamptz,
    end_at timestamptz, scheduler_id text, "user" text, job_type text, state text
) ON COMMIT DELETE ROWS
"""
_COPY_TEMP = f"COPY vigil_import_job ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
_INSERT_SAFE = f"""
INSERT INTO jobs_job ({_COLUMNS}) SELECT {_COLUMNS} FROM vigil_import_job
ON CONFLICT (cluster_id, scheduler_id) DO NOTHING
"""
# The tally trigger's switch (migration 0005), local to the transaction.
_TALLY_TRIGGER = "SELECT set_config('vigil.job_tally', %s, true)"
_SAVEPOINT = "vigil_import_block"
# A block's rows may meet stored ones, or another writer's not committed yet (waiting for them,
# possibly in a circle, which PostgreSQL breaks by failing one statement).
_COLLISIONS = (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected)
_ATTEMPTS = 4  # of a colliding block: three COPYs of the rows not stored yet, then ON CONFLICT
_TYPE_VALUES = [TYPES[n] for n in TYPE_NAMES]
_STATE_VALUES = [STATES[n] for n in STATE_NAMES]

Progress = Callable[[int, int], None]  # (bytes read so far, the file's size)


class TraceImportError(Exception):
    """An import that cannot start or could not finish; the message is one line. What it
    stored before (whole transactions of `batch_size` rows, outside a caller's transaction)
    stays, and importing the file again completes it."""


@dataclass
class ImportReport:
    """What an import did: rows read, stored, already present and skipped (by reason code,
    the first SHOW_ERRORS of them by line)."""

    read: int = 0
    imported: int = 0
    present: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    @property
    def rows_per_s(self) -> float:
        return self.read / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        """The report as a person reads it: the bad rows listed, then the summary."""
        skipped = self.skipped_total
        out = list(self.errors)
        if skipped > len(self.errors):
            out.append(f"... and {skipped - len(self.errors):,} more skipped rows")
        out.append(
            f"read {self.read:,} rows in {self.seconds:.1f} s ({self.rows_per_s:,.0f} rows/s): "
            f"imported {self.imported:,}, already present {self.present:,}, skipped {skipped:,}"
        )
        if skipped:
            reasons = ", ".join(f"{code} {n:,}" for code, n in self.skipped.most_common())
            out.append(f"skipped by reason: {reasons}")
        return out


def trace_import(
    path: str | Path,
    cluster: str,
    *,
    batch_size: int = 100_000,
    writers: int = WRITERS,
    progress: Progress | None = None,
) -> ImportReport:
    """Import the AcmeTrace job trace at `path` (Seren or Kalos schema) into the cluster named
    `cluster` (created if new), in transactions of at least `batch_size` rows stored by
    `writers` connections (one, the caller's, inside a transaction). `progress` is called
    after the header and after each block. Raises TraceImportError."""
    if not re.fullmatch(NAME_PATTERN, cluster):
        raise TraceImportError(f"cluster: {cluster!r} is not a valid cluster name")
    if batch_size < 1 or writers < 1:
        raise TraceImportError("batch_size and writers: must be at least 1")
    path = Path(path)
    if not path.is_file():
        raise TraceImportError(f"{path}: no such file")
    started = time.perf_counter()
    size = path.stat().st_size
    with path.open("rb") as f:
        header_line = f.readline()
        try:
            header = next(csv.reader([header_line.decode("utf-8-sig")]), None)
            parser = RowParser(header)
        except (ValueError, UnicodeDecodeError) as exc:
            raise TraceImportError(f"{path}: not an AcmeTrace job trace: {exc}") from None
        cluster_id = Cluster.objects.get_or_create(name=cluster)[0].id
        done = len(header_line)
        if progress is not None:
            progress(done, size)
        with _Import(parser, cluster_id, batch_size, writers) as stats:
            while block := f.read(BLOCK_BYTES):
                block += f.readline()  # end the block at a line end
                stats.block(block)
                done += len(block)
                if progress is not None:
                    progress(done, size)
            stats.flush()
    return stats.report(time.perf_counter() - started)


class _Import:
    """Parse blocks in the calling thread; hand them to writer threads, which store each block
    with one COPY and commit a transaction per chunk of blocks; count everything.

    Inside a caller's transaction (an atomic block, a test's) one writer uses the caller's
    connection, shared with its thread, and its chunks are savepoints of the caller's
    transaction; the calling thread leaves the connection alone meanwhile. Otherwise WRITERS
    writers each open a connection of their own: PostgreSQL then works on every block with
    as many processes (the index and heap work per row is most of an import's cost).
    """

    def __init__(self, parser: RowParser, cluster_id: int, chunk: int, writers: int) -> None:
        self.parser = parser
        self.cluster_id = cluster_id
        self.chunk = chunk
        self.line = 2  # the first row's line (line 1 is the header)
        self.read = 0
        self.skipped: Counter[str] = Counter()
        self.errors: list[str] = []
        shared = connections[DEFAULT_DB_ALIAS] if connection.in_atomic_block else None
        count = 1 if shared is not None else writers
        self.queue: queue.Queue = queue.Queue(maxsize=2 * count)  # blocks parsed ahead
        self.writers = [_Writer(self, shared) for _ in range(count)]
        if shared is not None:
            shared.inc_thread_sharing()
        self.shared = shared
        self.stopped = False
        for writer in self.writers:
            writer.start()

    @property
    def imported(self) -> int:
        return sum(w.imported for w in self.writers)

    @property
    def present(self) -> int:
        return sum(w.present for w in self.writers)

    def __enter__(self) -> _Import:
        return self

    def __exit__(self, *exc) -> None:
        self._stop(abort=exc[0] is not None)

    def _stop(self, abort: bool = False) -> None:
        """Let the writers finish (roll back when aborting); once."""
        if self.stopped:
            return
        self.stopped = True
        for writer in self.writers:
            writer.abort = writer.abort or abort
        for _ in self.writers:
            self.queue.put(None)
        for writer in self.writers:
            writer.join()
        if self.shared is not None:
            self.shared.dec_thread_sharing()

    def _check(self) -> None:
        for writer in self.writers:
            if writer.error is not None:
                self._stop(abort=True)
                exc = writer.error
                if isinstance(exc, psycopg.Error):
                    message = exc.diag.message_primary or str(exc).strip().splitlines()[0]
                    raise TraceImportError(f"storing the jobs failed: {message}") from None
                raise exc

    def block(self, data: bytes) -> None:
        result = block_parse(self.parser, data, self.line)
        self.line += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        self.read += result.rows
        for line, exc in result.errors:
            self.skipped[exc.code] += 1
            if len(self.errors) < SHOW_ERRORS:
                self.errors.append(f"line {line}: {exc.message}")
        columns = result.columns
        if not len(columns):
            return
        data = _copy_data(columns, self.cluster_id)
        tally = tally_of_columns(columns)
        self._check()
        self.queue.put((data, columns, tally))

    def flush(self) -> None:
        """Commit the last chunks; merge the cluster's tallies; refresh the planner's view."""
        self._stop()
        self._check()
        if self.imported:
            job_tallies_compact(self.cluster_id)
            # Statistics for the planner right away: without them the reads of a million new
            # jobs get plans made for a few hundred. A small sample (ANALYZE_TARGET) is enough
            # for that and costs a twentieth of the default one, which visits most of a
            # million-row table's pages.
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(f"SET LOCAL default_statistics_target = {ANALYZE_TARGET}")
                cur.execute("ANALYZE jobs_job")

    def report(self, seconds: float) -> ImportReport:
        return ImportReport(
            read=self.read,
            imported=self.imported,
            present=self.present,
            skipped=self.skipped,
            errors=self.errors,
            seconds=seconds,
        )


class _Writer(threading.Thread):
    """Stores blocks from the import's queue (None: the end) in transactions of at least a
    chunk of rows, each block with one COPY in a savepoint of its own."""

    def __init__(self, imp: _Import, shared: BaseDatabaseWrapper | None) -> None:
        super().__init__(name="import-writer", daemon=True)
        self.imp = imp
        self.shared = shared
        self.imported = self.present = 0
        self.error: BaseException | None = None
        self.abort = False
        self.tx: ExitStack | None = None
        self.tx_rows = 0
        self.tallies: list[Tally] = []

    def run(self) -> None:
        if self.shared is not None:
            connections[DEFAULT_DB_ALIAS] = self.shared  # this thread's "connection"
        try:
            while (item := self.imp.queue.get()) is not None:
                if self.error is None and not self.abort:
                    try:
                        self._store(*item)
                    except BaseException as exc:
                        self.error = exc
                        self._rollback(exc)
            if self.tx is not None:
                if self.error is None and not self.abort:
                    try:
                        self._commit()
                    except BaseException as exc:
                        self.error = exc
                        self._rollback(exc)
                else:
                    self._rollback(self.error or TraceImportError("import interrupted"))
        finally:
            if self.shared is None:
                connections.close_all()

    def _store(self, data: list, columns: Columns, tally: Tally) -> None:
        if self.tx is None:
            self._begin()
        stored, own = self._copy_block(data, columns)
        self.imported += stored
        self.present += len(columns) - stored
        self.tallies.append(tally if own is None else own)
        self.tx_rows += len(columns)
        if self.tx_rows >= self.imp.chunk:
            self._commit()

    def _begin(self) -> None:
        stack = ExitStack()
        stack.enter_context(transaction.atomic())
        try:
            with connection.cursor() as cur:
                cur.execute(_TALLY_TRIGGER, ["off"])
                if self.shared is None:
                    # Commit without waiting for the WAL flush: a crash during the import may
                    # lose the last chunks, whole, and importing again stores them (a caller's
                    # transaction keeps its own setting). Nothing is reported before flush()'s
                    # ordinary commits, which flush the WAL of every chunk before them.
                    cur.execute("SET LOCAL synchronous_commit = off")
        except BaseException:
            stack.close()
            raise
        self.tx, self.tx_rows, self.tallies = stack, 0, []

    def _commit(self) -> None:
        with connection.cursor() as cur:
            # Back on: inside a caller's transaction the setting would outlive this chunk.
            cur.execute(_TALLY_TRIGGER, ["on"])
        job_tallies_add(self.imp.cluster_id, Tally.sum(self.tallies))
        stack, self.tx = self.tx, None
        stack.close()  # commit (a release, inside a caller's transaction)

    def _rollback(self, exc: BaseException) -> None:
        stack, self.tx = self.tx, None
        if stack is not None:
            with suppress(Exception):
                stack.__exit__(type(exc), exc, exc.__traceback__)

    def _copy_block(self, data: list, columns: Columns) -> tuple[int, Tally | None]:
        """COPY one block; (rows stored, their tally when it is not the block's own)."""
        raw = connection.connection
        with raw.cursor() as cur:
            cur.execute(f"SAVEPOINT {_SAVEPOINT}")
            try:
                _copy(cur, _COPY, data)
            except _COLLISIONS:
                cur.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
            else:
                cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
                return len(columns), None
        # Some of these jobs are stored already, or being stored by another writer, which may
        # be waiting for rows this transaction holds: commit those first, so that no writer
        # waits for another in a circle while this block is sorted out.
        if self.tx_rows:
            self._commit()
            self._begin()
        return self._store_new(raw, columns)

    def _store_new(self, raw: psycopg.Connection, columns: Columns) -> tuple[int, Tally]:
        """The block without the jobs already stored and with each job id once (the first).
        Tried again while another writer's rows still collide (it commits meanwhile); then
        INSERT ... ON CONFLICT, which skips them whatever they are (its rows tallied by the
        trigger, as any other writer's)."""
        ids = columns.job_ids()
        error: Exception | None = None
        for attempt in range(_ATTEMPTS):
            with raw.cursor() as cur:
                cur.execute(f"SAVEPOINT {_SAVEPOINT}")
                try:
                    if attempt == _ATTEMPTS - 1:
                        stored = self._insert_safe(cur, columns), Tally()
                    else:
                        stored = self._copy_new(raw, cur, columns, ids)
                except _COLLISIONS as exc:
                    error = exc
                    cur.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                    cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
                    continue
                cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
                return stored
        raise error

    def _copy_new(
        self, raw: psycopg.Connection, cur: psycopg.Cursor, columns: Columns, ids: list[str]
    ) -> tuple[int, Tally]:
        cluster_id = self.imp.cluster_id
        # Server-side binding: the ids travel as one binary array, not quoted into the SQL.
        with psycopg.Cursor(raw) as lookup:
            lookup.execute(_EXISTING, [cluster_id, ids], binary=True)
            seen = {row[0] for row in lookup.fetchall()}
        keep = []
        for i, job_id in enumerate(ids):
            if job_id not in seen:
                seen.add(job_id)
                keep.append(i)
        if not keep:
            return 0, Tally()
        new = columns.take(np.array(keep))
        _copy(cur, _COPY, _copy_data(new, cluster_id))
        return len(new), tally_of_columns(new)

    def _insert_safe(self, cur: psycopg.Cursor, columns: Columns) -> int:
        cur.execute(_TALLY_TRIGGER, ["on"])
        cur.execute(_TEMP)
        cur.execute("TRUNCATE vigil_import_job")
        _copy(cur, _COPY_TEMP, _copy_data(columns, self.imp.cluster_id))
        cur.execute(_INSERT_SAFE)
        inserted = cur.rowcount
        cur.execute(_TALLY_TRIGGER, ["off"])
        return inserted


def _copy(cur: psycopg.Cursor, sql: str, data: list) -> None:
    with cur.copy(sql) as copy:
        for part in data:
            copy.write(part)


def _copy_data(c: Columns, cluster_id: int) -> list:
    """The rows as a binary COPY stream in _COLUMNS order (buffers to write in turn)."""
    return pgcopy.copy_binary(
        len(c),
        {
            "cluster_id": pgcopy.Fixed("int8", cluster_id),
            "job_type_explicit": pgcopy.Fixed("bool", True),  # the trace names the type
            "source": pgcopy.Text.constant(JobSource.ACMETRACE.value),
            "submit_at": pgcopy.Fixed("timestamptz", c.submit_us),
            "gpus_requested": pgcopy.Fixed("int4", c.gpus),
            "nodes_requested": pgcopy.Fixed("int4", c.nodes),
            "cpus_requested": pgcopy.Fixed("int4", c.cpus),
            "start_at": pgcopy.Fixed("timestamptz", c.start_us, null=c.start_null),
            "end_at": pgcopy.Fixed("timestamptz", c.end_us, null=c.end_null),
            "scheduler_id": pgcopy.Text(*c.job_id),
            "user": pgcopy.Text(*c.user),
            "job_type": pgcopy.Choice(c.type_index, _TYPE_VALUES),
            "state": pgcopy.Choice(c.state_index, _STATE_VALUES),
        },
    )


def tally_of_columns(c: Columns) -> Tally:
    """The tally of parsed trace rows, with NumPy: what the tally triggers (migration 0005)
    would have added for them, which the import turns off for its own COPY."""
    out = Tally()
    if not len(c):
        return out
    started = ~c.start_null
    ended = started & ~c.end_null
    duration = np.where(ended, epoch_s(c.end_us - c.start_us), np.nan)
    queue = np.where(started, epoch_s(c.start_us - c.submit_us), np.nan)
    gpu_time = np.where(ended, duration * c.gpus, 0.0)
    group_of = c.type_index * 2 + (c.gpus > 0)
    order = np.argsort(group_of, kind="stable")
    bounds = np.searchsorted(group_of[order], np.arange(len(_TYPE_VALUES) * 2 + 1))
    for key in range(len(_TYPE_VALUES) * 2):
        rows = order[bounds[key] : bounds[key + 1]]
        if not len(rows):
            continue
        states = c.state_index[rows]
        jobs = np.bincount(states, minlength=len(_STATE_VALUES))
        time_s = np.bincount(states, weights=gpu_time[rows], minlength=len(_STATE_VALUES))
        d, q = duration[rows], queue[rows]
        out.groups[(_TYPE_VALUES[key // 2], bool(key % 2))] = Group(
            states={
                _STATE_VALUES[i]: (int(jobs[i]), float(time_s[i])) for i in np.flatnonzero(jobs)
            },
            duration=Hist.of(d[~np.isnan(d)]),
            queue=Hist.of(q[~np.isnan(q)]),
            gpus=Hist.of(c.gpus[rows]),
        )
    return out
