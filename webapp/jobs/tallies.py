"""Job tallies: what the workload characterization needs to know of a set of jobs, small enough
to keep per cluster, so that characterizing a million jobs reads a dozen rows, not a million.

The tally of jobs of one type (GPU jobs, or CPU jobs) counts how many are in each state, with
their GPU time, and how many have each duration, queueing delay and GPU count. Counts of
distinct values give exact medians, means, maxima and CDFs (characterization.py); whole-second
durations have far fewer distinct values than there are jobs (a million Seren-like jobs: about
90,000). Tallies add up: the tally of a union of jobs is the sum of their tallies, the change of
a job is its new tally minus its old one. So the table `jobs_jobtally` holds signed deltas that
readers sum, merged into one row per type now and then (`job_tallies_compact`).

Who writes them: triggers on jobs_job (migration 0005) for every insert, delete and update of
a tallied column, whoever writes (event ingest, the admin, a test's bulk_create), except the
trace import. The import turns the insert trigger off for its own COPY (`vigil.job_tally` set to
off in its transaction: a trigger call and a row inserted per job would cost several times the
import itself) and adds the tally of the rows it stored, computed with NumPy from the parsed
columns (`tally_of_columns` in webapp/jobs/trace_import.py).

Durations, queueing delays and GPU time are PostgreSQL's `date_part('epoch', end - start)` (and
that times the GPUs), the expression of the triggers and of TALLY_SQL; `epoch_s` reproduces its
float8 arithmetic exactly, so all three ways of tallying agree to the last bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg.postgres import types as pg_types

from webapp.core import pgcopy

DAY_US = 86_400_000_000


def epoch_s(us: np.ndarray | int) -> np.ndarray | float:
    """date_part('epoch', b - a) for timestamps `us` microseconds apart, as PostgreSQL 16
    computes it: timestamp subtraction moves whole days out of the interval's time part
    (interval_justify_hours, C division: truncating), then epoch = time / 1e6 + days * 86400
    in float8."""
    if isinstance(us, np.ndarray):
        days = np.where(us < 0, -(-us // DAY_US), us // DAY_US)
        return (us - days * DAY_US) / 1e6 + (days * 86400).astype(np.float64)
    days = -(-us // DAY_US) if us < 0 else us // DAY_US
    return (us - days * DAY_US) / 1e6 + float(days * 86400)


def _aggregate(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values (sorted) with their summed counts; values whose count is 0 dropped."""
    if not len(values):
        return values, counts
    distinct, inverse = np.unique(values, return_inverse=True)
    summed = np.bincount(inverse, weights=counts, minlength=len(distinct))
    # Counts are integers far below 2^53: the float sums of bincount are exact.
    summed = np.rint(summed).astype(np.int64)
    keep = summed != 0
    return distinct[keep], summed[keep]


@dataclass(eq=False)
class Hist:
    """How many jobs have each value: distinct `values`, sorted, with their `counts`."""

    values: np.ndarray = field(default_factory=lambda: np.empty(0))
    counts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Hist)
            and np.array_equal(self.values, other.values)
            and np.array_equal(self.counts, other.counts)
        )

    @classmethod
    def sum(cls, parts: Iterable[Hist], dtype=np.float64) -> Hist:
        parts = list(parts)
        values = np.concatenate([p.values for p in parts]) if parts else np.empty(0, dtype)
        counts = np.concatenate([p.counts for p in parts]) if parts else np.empty(0, np.int64)
        return cls(*_aggregate(values.astype(dtype), counts.astype(np.int64)))

    @classmethod
    def of(cls, values: np.ndarray) -> Hist:
        distinct, counts = np.unique(values, return_counts=True)
        return cls(distinct, counts.astype(np.int64))

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class Group:
    """The tally of the jobs of one type, GPU jobs or CPU jobs."""

    states: dict[str, tuple[int, float]] = field(default_factory=dict)  # -> (jobs, GPU time s)
    duration: Hist = field(default_factory=Hist)
    queue: Hist = field(default_factory=Hist)
    gpus: Hist = field(default_factory=lambda: Hist(np.empty(0, np.int64)))

    def is_empty(self) -> bool:
        return not any(n for n, _ in self.states.values()) and not (
            len(self.duration) or len(self.queue) or len(self.gpus)
        )


# One row of jobs_jobtally (and of TALLY_SQL), after the cluster: job_type, gpu, states,
# state_jobs, state_gpu_time_s, duration_s, duration_jobs, queue_s, queue_jobs, gpus, gpus_jobs.
TallyRow = tuple
TALLY_COLUMNS = (
    "job_type, gpu, states, state_jobs, state_gpu_time_s, duration_s, duration_jobs, queue_s, "
    "queue_jobs, gpus, gpus_jobs"
)


@dataclass
class Tally:
    """Groups by (job_type, gpu)."""

    groups: dict[tuple[str, bool], Group] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Iterable[TallyRow], sign: int = 1) -> Tally:
        """The sum of tally rows (any number per group: deltas)."""
        parts: dict[tuple[str, bool], list[TallyRow]] = {}
        for row in rows:
            parts.setdefault((row[0], bool(row[1])), []).append(row)
        out = cls()
        for key, group_rows in parts.items():
            states: dict[str, list] = {}
            for row in group_rows:
                for state, n, gpu_time in zip(row[2], row[3], row[4], strict=True):
                    acc = states.setdefault(state, [0, 0.0])
                    acc[0] += sign * int(n)
                    acc[1] += sign * float(gpu_time or 0.0)

            def hist(i: int, dtype=np.float64, group_rows=group_rows) -> Hist:
                return Hist.sum(
                    (
                        Hist(np.asarray(r[i], dtype), sign * np.asarray(r[i + 1], np.int64))
                        for r in group_rows
                        if len(r[i])
                    ),
                    dtype,
                )

            group = Group(
                states={s: (n, t) for s, (n, t) in states.items() if n},
                duration=hist(5),
                queue=hist(7),
                gpus=hist(9, np.int64),
            )
            if not group.is_empty():
                out.groups[key] = group
        return out

    def rows(self) -> list[TallyRow]:
        """As jobs_jobtally rows (without the cluster), one per group; the histograms as NumPy
        arrays (stored and read with `tally_store` and `tally_fetch`)."""
        out = []
        for (job_type, gpu), g in sorted(self.groups.items()):
            states = sorted(g.states)
            out.append(
                (
                    job_type,
                    gpu,
                    states,
                    np.array([g.states[s][0] for s in states], np.int64),
                    np.array([g.states[s][1] for s in states], np.float64),
                    g.duration.values.astype(np.float64),
                    g.duration.counts,
                    g.queue.values.astype(np.float64),
                    g.queue.counts,
                    g.gpus.values.astype(np.int64),
                    g.gpus.counts,
                )
            )
        return out

    @classmethod
    def sum(cls, tallies: Iterable[Tally]) -> Tally:
        return cls.from_rows(row for t in tallies for row in t.rows())


# --- Reading and writing tally rows ------------------------------------------------------
#
# A million jobs' tally holds about 90,000 distinct values; psycopg's list adaptation turns each
# into a Python object. Their float8[] and int8[] travel instead as
# PostgreSQL's binary arrays, built from and read into NumPy arrays by webapp/core/pgcopy.py.


def _cursor(connection: psycopg.Connection) -> psycopg.Cursor:
    """A server-binding cursor (binary parameters and results) with the array adapters."""
    cur = psycopg.Cursor(connection)
    cur.adapters.register_dumper(pgcopy.Binary, pgcopy.BinaryDumper)
    for element in ("float8", "int8"):
        cur.adapters.register_loader(pg_types[element].array_oid, pgcopy.array_loader(element))
    return cur


def _array_param(value):
    if isinstance(value, np.ndarray):
        return pgcopy.array_binary("float8" if value.dtype.kind == "f" else "int8", value)
    return value


def tally_store(
    connection: psycopg.Connection, cluster_id: int, tally: Tally, compacted: bool = False
) -> int:
    """Insert the tally as jobs_jobtally rows of the cluster (in the connection's transaction);
    the rows inserted."""
    rows = [(cluster_id, *map(_array_param, row), compacted) for row in tally.rows()]
    if rows:
        with _cursor(connection) as cur:
            cur.executemany(
                f"INSERT INTO jobs_jobtally (cluster_id, {TALLY_COLUMNS}, compacted) "
                f"VALUES ({', '.join(['%b'] * 13)})",
                rows,
            )
    return len(rows)


def tally_fetch(connection: psycopg.Connection, sql: str, params: list) -> Tally:
    """The sum of the rows a query returns in TallyRow's columns."""
    with _cursor(connection) as cur:
        cur.execute(sql, params, binary=True)
        return Tally.from_rows(cur.fetchall())


# The tally of the jobs matching a condition (tally_sql), one row per (cluster, job_type, gpu) in
# the columns of jobs_jobtally: one pass over the jobs with four grouping sets (a hash table each),
# then each group's arrays. The expressions are those of the triggers (migration 0005).
# work_mem for TALLY_SQL (4 MB, the default, would spill): over a million jobs, with 128 MB the
# planner sorts two of the four grouping sets; with 256 MB it hashes more of them, and the
# pass is much faster (the hash tables fit, but PostgreSQL cannot estimate how many distinct
# durations there are).
TALLY_WORK_MEM = "256MB"
_WHERE = "/* where */"
_D = "date_part('epoch', end_at - start_at)"
_Q = "date_part('epoch', start_at - submit_at)"
TALLY_SQL = f"""
SELECT cluster_id, job_type, gpu,
    coalesce(array_agg(state) FILTER (WHERE part = 0), '{{}}') AS states,
    coalesce(array_agg(n) FILTER (WHERE part = 0), '{{}}') AS state_jobs,
    coalesce(array_agg(coalesce(gpu_time, 0)) FILTER (WHERE part = 0), '{{}}')
        AS state_gpu_time_s,
    coalesce(array_agg(d) FILTER (WHERE part = 1 AND d IS NOT NULL), '{{}}') AS duration_s,
    coalesce(array_agg(n) FILTER (WHERE part = 1 AND d IS NOT NULL), '{{}}') AS duration_jobs,
    coalesce(array_agg(q) FILTER (WHERE part = 2 AND q IS NOT NULL), '{{}}') AS queue_s,
    coalesce(array_agg(n) FILTER (WHERE part = 2 AND q IS NOT NULL), '{{}}') AS queue_jobs,
    coalesce(array_agg(g) FILTER (WHERE part = 3), '{{}}') AS gpus,
    coalesce(array_agg(n) FILTER (WHERE part = 3), '{{}}') AS gpus_jobs
FROM (
    SELECT cluster_id, job_type, gpu, grouping(state, d, q, g) AS bits, state, d, q, g,
        count(*) AS n, sum(gpu_time) AS gpu_time
    FROM (SELECT cluster_id, job_type, gpus_requested > 0 AS gpu, state, {_D} AS d, {_Q} AS q,
            gpus_requested::int8 AS g, {_D} * gpus_requested AS gpu_time
          FROM jobs_job WHERE {_WHERE}) j
    GROUP BY GROUPING SETS ((cluster_id, job_type, gpu, state), (cluster_id, job_type, gpu, d),
        (cluster_id, job_type, gpu, q), (cluster_id, job_type, gpu, g))
) s, LATERAL (SELECT CASE bits WHEN 7 THEN 0 WHEN 11 THEN 1 WHEN 13 THEN 2 ELSE 3 END AS part) k
GROUP BY cluster_id, job_type, gpu
"""


def tally_sql(where: str) -> str:
    """TALLY_SQL for the jobs matching the SQL condition `where` (its parameters: the query's)."""
    return TALLY_SQL.replace(_WHERE, where)
