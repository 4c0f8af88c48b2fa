"""Load an AcmeTrace job trace (the paper's public CSV) into Job rows of one cluster.

    manage.py import_acmetrace --cluster seren trace_seren.csv [--batch-size 50000]

Streams the file in blocks (a progress bar in bytes on stderr), validates every row
(webapp/jobs/acmetrace.py), skips bad rows reporting `line N: <reason>`, and writes good rows in
chunks: binary COPY into a temp table, then INSERT ... ON CONFLICT (cluster, scheduler_id) DO
NOTHING, so importing the same file again changes nothing. Imported jobs have source
`acmetrace` and no allocations (the traces do not say which GPUs a job held).
"""

from __future__ import annotations

import csv
import io
import re
import sys
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection, transaction
from psycopg import pq
from tqdm import tqdm

from collectors.schema import NAME_PATTERN
from webapp.fleet.models import Cluster
from webapp.jobs.acmetrace import RowError, RowParser
from webapp.jobs.choices import JobSource
from webapp.jobs.models import Job

BLOCK_BYTES = 4 << 20  # read size; about 40,000 rows of the Seren trace
SHOW_ERRORS = 20  # bad rows listed by line; all are counted

_TEMP = """
CREATE TEMP TABLE IF NOT EXISTS vigil_import_job (
    scheduler_id text, "user" text, job_type text, state text,
    submit_ts float8, start_ts float8, end_ts float8,
    gpus int4, nodes int4, cpus int4
) ON COMMIT DELETE ROWS
"""
_COPY = (
    'COPY vigil_import_job (scheduler_id, "user", job_type, state, submit_ts, start_ts, end_ts, '
    "gpus, nodes, cpus) FROM STDIN (FORMAT BINARY)"
)
_COPY_TYPES = ["text", "text", "text", "text", "float8", "float8", "float8", "int4", "int4", "int4"]
# job_type_explicit: the trace names the type, so the site's type rules never override it.
_INSERT = """
INSERT INTO jobs_job (
    cluster_id, scheduler_id, name, "user", team, partition, qos, comment, job_type,
    job_type_explicit, state, state_at, source, submit_at, start_at, end_at,
    gpus_requested, nodes_requested, cpus_requested, updated_at
)
SELECT {cluster_id}, t.scheduler_id, '', t."user", '', '', '', '', t.job_type,
    true, t.state, NULL, '{source}', to_timestamp(t.submit_ts), to_timestamp(t.start_ts),
    to_timestamp(t.end_ts), t.gpus, t.nodes, t.cpus, now()
FROM vigil_import_job t
"""
# Fast path: skip the jobs already stored with an anti-join, then a plain INSERT. PostgreSQL's
# speculative insertion (ON CONFLICT) cost about 30% more per row here. A job the anti-join
# cannot see (the same id twice in one chunk, or stored concurrently) makes the INSERT fail;
# the chunk is then redone with ON CONFLICT DO NOTHING.
_INSERT_NEW = (
    _INSERT
    + """WHERE NOT EXISTS (
    SELECT 1 FROM jobs_job j WHERE j.cluster_id = {cluster_id} AND j.scheduler_id = t.scheduler_id
)"""
)
_INSERT_SAFE = _INSERT + "ON CONFLICT (cluster_id, scheduler_id) DO NOTHING"


class Command(BaseCommand):
    help = "Import an AcmeTrace job trace CSV (Seren or Kalos schema) into one cluster."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name, e.g. seren")
        parser.add_argument("file", help="the trace CSV (trace_seren.csv, trace_kalos.csv)")
        parser.add_argument(
            "--batch-size", type=int, default=50_000, help="rows per transaction (default 50000)"
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
            stats = _Import(self, parser, cluster_obj.id, batch_size)
            size = path.stat().st_size
            with tqdm(
                total=size,
                initial=len(header_line),
                unit="B",
                unit_scale=True,
                desc=f"import {path.name}",
                file=self.stderr._out,
                disable=options["no_progress"],
                mininterval=0.5,
            ) as bar:
                while block := f.read(BLOCK_BYTES):
                    block += f.readline()  # end the block at a line end
                    stats.block(block.decode("utf-8", errors="replace"))
                    bar.update(len(block))
                stats.flush()
        stats.report(time.perf_counter() - started)


class _Import:
    """Parse blocks, buffer good rows, write them a chunk at a time; count everything."""

    def __init__(self, command: BaseCommand, parser: RowParser, cluster_id: int, chunk: int):
        self.command = command
        self.parser = parser
        self.cluster_id = cluster_id
        self.chunk = chunk
        self.line = 1  # the header
        self.read = self.imported = self.present = 0
        self.skipped: Counter[str] = Counter()
        self.errors: list[str] = []
        self.rows: list[tuple] = []
        self.pending: tuple[ExitStack, list[tuple]] | None = None
        # A cluster without jobs (the usual first import) needs no anti-join: a job id seen
        # twice still makes its chunk fail over to ON CONFLICT.
        self.fresh = not Job.objects.filter(cluster_id=cluster_id).exists()

    def block(self, text: str) -> None:
        parse = self.parser.parse
        rows = self.rows
        base = self.line
        reader = csv.reader(io.StringIO(text))
        for row in reader:
            if not row:
                continue  # blank line
            self.read += 1
            try:
                rows.append(parse(row))
            except RowError as exc:
                self.skipped[exc.code] += 1
                if len(self.errors) < SHOW_ERRORS:
                    self.errors.append(f"line {base + reader.line_num}: {exc.message}")
        self.line = base + reader.line_num
        if len(rows) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows a chunk at a time, then wait for the last chunk."""
        rows, self.rows = self.rows, []
        for i in range(0, len(rows), self.chunk):
            self._finish()
            self._start(rows[i : i + self.chunk])
        self._finish()

    # One transaction per chunk: an interrupted import keeps whole chunks, and running it
    # again completes it. The chunk's INSERT is sent without waiting for it, so PostgreSQL
    # stores chunk k (its own process, the other core) while Python parses chunk k + 1;
    # `_finish` then collects the result and commits. Nothing else uses the connection
    # meanwhile.

    def _start(self, part: list[tuple]) -> None:
        stack = ExitStack()
        try:
            stack.enter_context(transaction.atomic())
            cur = stack.enter_context(connection.cursor())
            self._copy(cur, part)
            insert = _INSERT if self.fresh else _INSERT_NEW
            sql = insert.format(cluster_id=self.cluster_id, source=JobSource.ACMETRACE)
            pgconn = connection.connection.pgconn
            pgconn.send_query(sql.encode())
            pgconn.flush()
        except BaseException:
            stack.__exit__(*sys.exc_info())
            raise
        self.pending = (stack, part)

    def _finish(self) -> None:
        if self.pending is None:
            return
        stack, part = self.pending
        self.pending = None
        pgconn = connection.connection.pgconn
        results = []
        while (result := pgconn.get_result()) is not None:
            results.append(result)
        failed = next((r for r in results if r.status == pq.ExecStatus.FATAL_ERROR), None)
        if failed is None:
            stack.close()  # commit
            inserted = int(results[-1].command_tuples or 0)
        else:
            message = (failed.error_message or b"").decode(errors="replace").strip()
            stack.__exit__(DatabaseError, DatabaseError(message), None)  # roll back
            if "job_unique_id" not in message:
                raise CommandError(f"storing a chunk failed: {message}")
            with transaction.atomic(), connection.cursor() as cur:
                self._copy(cur, part)
                cur.execute(
                    _INSERT_SAFE.format(cluster_id=self.cluster_id, source=JobSource.ACMETRACE)
                )
                inserted = cur.rowcount
        self.imported += inserted
        self.present += len(part) - inserted

    @staticmethod
    def _copy(cur, part: list[tuple]) -> None:
        # Emptied explicitly: inside an outer transaction (a test, a caller's atomic block)
        # ON COMMIT never comes between chunks.
        cur.execute(_TEMP)
        cur.execute("TRUNCATE vigil_import_job")
        with cur.copy(_COPY) as copy:
            copy.set_types(_COPY_TYPES)
            for row in part:
                copy.write_row(row)

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
