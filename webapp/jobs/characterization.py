"""Workload characterization of one cluster and time window, in the paper's terms (Hu et al.,
NSDI '24, section 3): job types by count and GPU time, duration / queueing / size CDFs, final
states, telemetry CDFs, and a row in the columns of AcmeTrace's cluster_summary.csv.

Everything follows from the jobs' tally (webapp/jobs/tallies.py): per type and GPU / CPU job,
the jobs and GPU time in each state, and the number of jobs with each distinct duration,
queueing delay and GPU count, from which medians, means and CDFs follow exactly. A cluster's
whole history (the page's default) reads the cluster's tally rows, kept by triggers and the trace
import: a dozen rows however many jobs. A window counts its jobs in one hashed pass
(tallies.TALLY_SQL); a job belongs to it when it was submitted in it (`submit_at`, served by the
(cluster, submit_at) index). A requeued job's runs before its current one add the GPU time of
their closed allocations, kept on the job when the requeue is applied (the tally reads start and
end, which a requeue clears). Telemetry CDFs read the 1-minute rollup (raw samples for windows
under a day; the hourly rollup for windows older than the 1-minute rollup keeps). Like the
paper, per-type and summary statistics are over GPU jobs (`gpus_requested > 0`); durations and
queueing delays count only jobs that have them (started, resp. ended).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from webapp.core.units import GIB
from webapp.core.windows import Window
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobState, JobType
from webapp.jobs.dispatch import EvalPhasesAnswer, eval_phases_asked
from webapp.jobs.tallies import TALLY_COLUMNS, TALLY_WORK_MEM, Tally, tally_fetch, tally_sql
from webapp.telemetry.selectors import cluster_distribution, telemetry_kept_since

FINAL_GROUPS: tuple[str, ...] = ("completed", "cancelled", "failed")
# States a job is still in; everything else is final and falls in a JobState.final_group.
NOT_FINAL: tuple[str, ...] = (JobState.PENDING, JobState.RUNNING)
# Final state -> group (JobState.final_group); states outside JobState count in no group.
_FINAL_GROUP: dict[str, str] = {
    s: JobState.final_group(s) for s in JobState.values if s not in NOT_FINAL
}

# Histogram edges: durations 2^0..2^21 s and queueing 2^0..2^15 s, as the paper's CDFs
# (docs/acme-workload.md section 8), extended to 2^24 s (194 days) so nothing overflows.
LOG2_EDGES: tuple[float, ...] = tuple(float(2**k) for k in range(25))


@dataclass(frozen=True)
class TypeStats:
    """One job type's GPU jobs (or all types when job_type is "all")."""

    job_type: str
    label: str
    jobs: int  # all jobs of the type, CPU ones included
    gpu_jobs: int
    gpu_time_s: float
    count_share: float | None  # of the window's GPU jobs
    gpu_time_share: float | None
    duration_median_s: float | None
    duration_mean_s: float | None
    queue_median_s: float | None
    queue_mean_s: float | None
    gpus_mean: float | None
    gpus_median: float | None
    gpus_max: int | None


@dataclass(frozen=True)
class StateShare:
    group: str  # completed / cancelled / failed
    gpu_jobs: int
    gpu_time_s: float
    count_share: float | None  # of GPU jobs in a final state
    gpu_time_share: float | None


@dataclass
class Characterization:
    window: Window
    types: list[TypeStats]  # one per JobType with GPU jobs, in JobType order
    total: TypeStats
    states: list[StateShare]
    summary: dict[str, float | str | None]  # cluster_summary.csv columns
    duration_cdf: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    queue_cdf: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    gpus_cdf: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # Evaluation jobs' GPU time by phase, inferred from telemetry: the evaluation app's answer
    # (jobs.dispatch.eval_phases_wanted); None when no app answers.
    eval_phases: EvalPhasesAnswer | None = None


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


class _Dist:
    """How many jobs have each value (values sorted, counts aligned)."""

    def __init__(self, values: np.ndarray, counts: np.ndarray) -> None:
        order = np.argsort(values, kind="stable")
        self.values, self.counts = values[order], counts[order]
        self.cum = np.cumsum(self.counts)
        self.n = int(self.cum[-1]) if len(self.cum) else 0

    @classmethod
    def merge(cls, parts: list[_Dist]) -> _Dist:
        return cls(
            np.concatenate([p.values for p in parts] or [np.empty(0)]),
            np.concatenate([p.counts for p in parts] or [np.empty(0, np.int64)]),
        )

    def median(self) -> float | None:
        """percentile_cont(0.5), with PostgreSQL's arithmetic (percentile_cont_final_common:
        lerp between the rows floor and ceil of 0.5 * (n - 1), counted from 0)."""
        if not self.n:
            return None
        pos = 0.5 * (self.n - 1)
        first_row, second_row = math.floor(pos), math.ceil(pos)
        first = float(self.values[np.searchsorted(self.cum, first_row, side="right")])
        if second_row == first_row:
            return first
        second = float(self.values[np.searchsorted(self.cum, second_row, side="right")])
        return first + ((pos - first_row) * (second - first))

    def mean(self) -> float | None:
        return math.fsum(self.values * self.counts) / self.n if self.n else None

    def max(self) -> float | None:
        return float(self.values[-1]) if self.n else None

    def log2_buckets(self) -> dict[int, int]:
        """Jobs per width_bucket(x, LOG2_EDGES) (the number of edges at or below x)."""
        buckets = np.searchsorted(LOG2_EDGES, self.values, side="right")
        out: dict[int, int] = {}
        for bucket, n in zip(buckets.tolist(), self.counts.tolist(), strict=True):
            out[bucket] = out.get(bucket, 0) + n
        return out


def _from_tally(tally: Tally) -> tuple[list[tuple], list[tuple]]:
    """The tally as statistics rows (per type, then the total: is_total, job_type, jobs, GPU
    jobs, CPU jobs, GPU time, then the GPU and CPU medians, means and maxima, then per final
    group GPU jobs, GPU time and CPU jobs) and histogram rows (job_type, by_duration, by_queue,
    duration bucket, queueing bucket, GPUs, jobs) of GPU jobs."""
    # (job_type, gpu) -> [jobs, GPU time, {group: [jobs, GPU time]}]; job_type None: all types
    sums: dict[tuple, list] = {}
    dist: dict[tuple, _Dist] = {}  # (job_type, gpu, column) -> distribution
    for (job_type, gpu), group in tally.groups.items():
        for state, (n, gpu_time) in group.states.items():
            for key in ((job_type, gpu), (None, gpu)):
                acc = sums.setdefault(key, [0, 0.0, {grp: [0, 0.0] for grp in FINAL_GROUPS}])
                acc[0] += n
                acc[1] += gpu_time
                if (final := _FINAL_GROUP.get(state)) is not None:
                    acc[2][final][0] += n
                    acc[2][final][1] += gpu_time
        for column, hist in (("d", group.duration), ("q", group.queue), ("g", group.gpus)):
            if len(hist):
                dist[(job_type, gpu, column)] = _Dist(
                    hist.values.astype(np.float64), hist.counts.astype(np.int64)
                )
    types = sorted({t for t, _ in sums if t is not None})
    for gpu in (True, False):
        for column in ("d", "q", "g"):
            parts = [dist[(t, gpu, column)] for t in types if (t, gpu, column) in dist]
            dist[(None, gpu, column)] = _Dist.merge(parts)
    empty = _Dist(np.empty(0), np.empty(0, np.int64))

    def get(job_type: str | None, gpu: bool, column: str) -> _Dist:
        return dist.get((job_type, gpu, column), empty)

    hist = []
    for t in types:
        for bucket, n in get(t, True, "d").log2_buckets().items():
            hist.append((t, True, False, bucket, None, None, n))
        for bucket, n in get(t, True, "q").log2_buckets().items():
            hist.append((t, False, True, None, bucket, None, n))
        g = get(t, True, "g")
        for value, n in zip(g.values.tolist(), g.counts.tolist(), strict=True):
            hist.append((t, False, False, None, None, int(value), n))

    stats_rows = []
    no_sums = [0, 0.0, {grp: [0, 0.0] for grp in FINAL_GROUPS}]
    for job_type in [*types, None]:
        gpu, cpu = sums.get((job_type, True), no_sums), sums.get((job_type, False), no_sums)
        gpus_max = get(job_type, True, "g").max()
        stats_rows.append(
            (
                job_type is None,
                job_type,
                gpu[0] + cpu[0],
                gpu[0],
                cpu[0],
                gpu[1],
                get(job_type, True, "d").median(),
                get(job_type, True, "d").mean(),
                get(job_type, True, "d").max(),
                get(job_type, True, "q").median(),
                get(job_type, True, "q").mean(),
                get(job_type, True, "g").median(),
                get(job_type, True, "g").mean(),
                int(gpus_max) if gpus_max is not None else None,
                get(job_type, False, "d").median(),
                get(job_type, False, "d").mean(),
                get(job_type, False, "q").median(),
                get(job_type, False, "q").mean(),
                *(
                    x
                    for grp in FINAL_GROUPS
                    for x in (gpu[2][grp][0], gpu[2][grp][1], cpu[2][grp][0])
                ),
            )
        )
    return stats_rows, hist


def jobs_characterize(window: Window, *, from_jobs: bool = False) -> Characterization:
    """Type shares, per-type and overall statistics, final states and CDFs of one window.

    from_jobs: count the jobs themselves even for the whole history (the tallies' check)."""
    if window.since is None and window.until is None and not from_jobs:
        tally = cluster_tally(window.cluster)
    else:
        tally = window_tally(window)
    stats_rows, hist_rows = _from_tally(tally)
    stats_rows = _with_earlier_runs(stats_rows, _earlier_runs_gpu_time(window))

    total_row = next((r for r in stats_rows if r[0]), None)
    if total_row is None:  # no job at all: GROUPING SETS still yields the () row, but be safe
        total_row = (True, None, 0, 0, 0, 0.0, *([None] * 12), *([0, 0.0, 0] * len(FINAL_GROUPS)))
    all_gpu_jobs = total_row[3]
    all_gpu_time = float(total_row[5] or 0.0)

    def type_stats(row: tuple, job_type: str, label: str) -> TypeStats:
        return TypeStats(
            job_type=job_type,
            label=label,
            jobs=row[2],
            gpu_jobs=row[3],
            gpu_time_s=float(row[5] or 0.0),
            count_share=_share(row[3], all_gpu_jobs),
            gpu_time_share=_share(float(row[5] or 0.0), all_gpu_time),
            duration_median_s=row[6],
            duration_mean_s=row[7],
            queue_median_s=row[9],
            queue_mean_s=row[10],
            gpus_median=row[11],
            gpus_mean=float(row[12]) if row[12] is not None else None,
            gpus_max=row[13],
        )

    by_type = {r[1]: r for r in stats_rows if not r[0]}
    types = [
        type_stats(by_type[t.value], t.value, t.label)
        for t in JobType
        if t.value in by_type and by_type[t.value][3] > 0
    ]
    total = type_stats(total_row, "all", "All types")

    groups = {}
    for i, g in enumerate(FINAL_GROUPS):
        base = 18 + 3 * i
        groups[g] = (total_row[base], float(total_row[base + 1] or 0.0), total_row[base + 2])
    final_gpu_jobs = sum(v[0] for v in groups.values())
    final_gpu_time = sum(v[1] for v in groups.values())
    final_cpu_jobs = sum(v[2] for v in groups.values())
    states = [
        StateShare(
            group=g,
            gpu_jobs=groups[g][0],
            gpu_time_s=groups[g][1],
            count_share=_share(groups[g][0], final_gpu_jobs),
            gpu_time_share=_share(groups[g][1], final_gpu_time),
        )
        for g in FINAL_GROUPS
    ]

    def rnd(value: float | None, digits: int = 3) -> float | None:
        return round(float(value), digits) if value is not None else None

    state = {s.group: s for s in states}
    summary: dict[str, float | str | None] = {
        "id": window.cluster.name,
        "job_num": total_row[2],
        "cpu_job_num": total_row[4],
        "gpu_job_num": total_row[3],
        "avg_run_time_gpu": rnd(total_row[7]),
        "avg_que_time_gpu": rnd(total_row[10]),
        "avg_gpu_num": rnd(total_row[12]),
        "med_run_time_gpu": rnd(total_row[6]),
        "med_que_time_gpu": rnd(total_row[9]),
        "med_gpu_num": rnd(total_row[11]),
        "max_run_time_gpu": rnd(total_row[8]),
        "max_gpu": total_row[13],
        "complete_rate_gpu": rnd(state["completed"].count_share),
        "cancel_rate_gpu": rnd(state["cancelled"].count_share),
        "fail_rate_gpu": rnd(state["failed"].count_share),
        "complete_gpu_time": rnd(state["completed"].gpu_time_s, 1),
        "cancel_gpu_time": rnd(state["cancelled"].gpu_time_s, 1),
        "fail_gpu_time": rnd(state["failed"].gpu_time_s, 1),
        "complete_rate_gpu_time": rnd(state["completed"].gpu_time_share),
        "cancel_rate_gpu_time": rnd(state["cancelled"].gpu_time_share),
        "fail_rate_gpu_time": rnd(state["failed"].gpu_time_share),
        "avg_run_time_cpu": rnd(total_row[15]),
        "avg_que_time_cpu": rnd(total_row[17]),
        "med_run_time_cpu": rnd(total_row[14]),
        "med_que_time_cpu": rnd(total_row[16]),
        "complete_rate_cpu": rnd(_share(groups["completed"][2], final_cpu_jobs)),
        "cancel_rate_cpu": rnd(_share(groups["cancelled"][2], final_cpu_jobs)),
        "fail_rate_cpu": rnd(_share(groups["failed"][2], final_cpu_jobs)),
    }

    result = Characterization(
        window=window, types=types, total=total, states=states, summary=summary
    )
    _fill_cdfs(result, hist_rows)
    result.eval_phases = eval_phases_asked(window)
    return result


def _earlier_runs_gpu_time(window: Window) -> dict[tuple[str, str], float]:
    """GPU time of the window's GPU jobs in runs before their current one, by (type, state).

    A requeue clears a job's start (Slurm moves its submit time), so the tally, which reads
    start and end, holds the last run only; the GPU time consumed before (a failed run
    included, as the paper counts it) is the job's earlier_runs_gpu_time_s, summed from its
    closed allocations as its requeue and next start were applied. Only jobs that ran more
    than once have it (a partial index holds them): imported traces add nothing, and there is
    no pass over the cluster's jobs."""
    where, params = window.where()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT job_type, state, sum(earlier_runs_gpu_time_s) FROM jobs_job "
            f"WHERE {where} AND gpus_requested > 0 AND earlier_runs_gpu_time_s > 0 "
            "GROUP BY 1, 2",
            params,
        )
        return {(t, s): float(v or 0.0) for t, s, v in cur.fetchall()}


def _with_earlier_runs(
    stats_rows: list[tuple], earlier: dict[tuple[str, str], float]
) -> list[tuple]:
    """The statistics rows (see _from_tally) with the earlier runs' GPU time added to the
    type's and the total's GPU time, and to the final group of the job's state."""
    if not earlier:
        return stats_rows
    out = []
    for row in stats_rows:
        row = list(row)
        for (job_type, state), gpu_time in earlier.items():
            if not row[0] and row[1] != job_type:
                continue
            row[5] = float(row[5] or 0.0) + gpu_time
            if (final := _FINAL_GROUP.get(state)) is not None:
                at = 18 + 3 * FINAL_GROUPS.index(final) + 1
                row[at] = float(row[at] or 0.0) + gpu_time
        out.append(tuple(row))
    return out


def cluster_tally(cluster: Cluster) -> Tally:
    """The sum of the cluster's tally rows: all its jobs."""
    connection.ensure_connection()
    return tally_fetch(
        connection.connection,
        f"SELECT {TALLY_COLUMNS} FROM jobs_jobtally WHERE cluster_id = %s",
        [cluster.id],
    )


def window_tally(window: Window) -> Tally:
    """The tally of the window's jobs, counted from the jobs."""
    where, params = window.where()
    with transaction.atomic(), connection.cursor() as cur:
        # 4 MB (the default) would make PostgreSQL spill or sort the grouping sets.
        cur.execute(f"SET LOCAL work_mem = '{TALLY_WORK_MEM}'")
        return tally_fetch(
            connection.connection,
            f"SELECT {TALLY_COLUMNS} FROM ({tally_sql(where)}) t",
            params,
        )


def tally_version(cluster: Cluster) -> tuple[int, int]:
    """Changes whenever the cluster's jobs do (their tally gets a row): for cache keys."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT coalesce(max(id), 0), count(*) FROM jobs_jobtally WHERE cluster_id = %s",
            [cluster.id],
        )
        return cur.fetchone()


def _cumulate(counts: dict[int, int], x_of: dict[int, float]) -> list[tuple[float, float]]:
    total = sum(counts.values())
    out, running = [], 0
    for key in sorted(x_of):
        running += counts.get(key, 0)
        out.append((x_of[key], running / total))
        if running == total:
            break
    return out


def _log2_cdf(counts: dict[int, int]) -> list[tuple[float, float]]:
    """[(2^i, share of jobs < 2^i)] from width_bucket counts, up to where it reaches 1."""
    if not counts:
        return []
    # Bucket i (1-based) holds [2^(i-1), 2^i): its upper edge is 2^i; bucket 0 is x < 1.
    x_of = {i: 2.0**i for i in range(len(LOG2_EDGES) + 1)}
    return _cumulate(counts, x_of)


def _fill_cdfs(result: Characterization, rows: list[tuple]) -> None:
    dur: dict[str, dict[int, int]] = {}
    que: dict[str, dict[int, int]] = {}
    gpus: dict[str, dict[int, int]] = {}
    for job_type, by_duration, by_queue, dk, qk, g, n in rows:
        for t in (job_type, "all"):
            if by_duration and dk is not None:
                dur.setdefault(t, {}).setdefault(dk, 0)
                dur[t][dk] += n
            elif by_queue and qk is not None:
                que.setdefault(t, {}).setdefault(qk, 0)
                que[t][qk] += n
            elif not by_duration and not by_queue:
                gpus.setdefault(t, {}).setdefault(g, 0)
                gpus[t][g] += n
    order = [t.value for t in JobType] + ["all"]
    result.duration_cdf = {t: _log2_cdf(dur[t]) for t in order if t in dur}
    result.queue_cdf = {t: _log2_cdf(que[t]) for t in order if t in que}
    result.gpus_cdf = {
        t: _cumulate(gpus[t], {g: float(g) for g in gpus[t]}) for t in order if t in gpus
    }


# --- Telemetry distributions -----------------------------------------------------------------

# Metric -> (the rolled-up GPU metric it reads, the factor to its display unit): GPU util %,
# SM active % (stored as a ratio), memory used GiB (a power of two: exact), power W.
TELEMETRY_METRICS: dict[str, tuple[str, float]] = {
    "gpu_util": ("gpu_util", 1.0),
    "sm_active": ("sm_active", 100.0),
    "mem_used": ("fb_used_bytes", 1.0 / GIB),
    "power_w": ("power_w", 1.0),
}
PERCENTILES: tuple[float, ...] = tuple(i / 100 for i in range(101))
# Rows one telemetry CDF reads at most: above it the table is sampled by blocks (TABLESAMPLE
# SYSTEM), which keeps a 1 % resolution CDF within about 0.3 % (binomial error at 100k rows).
TELEMETRY_ROW_BUDGET = 300_000
# With no start given the window is all time, for the telemetry as for the job counts: every
# value telemetry keeps (its hourly rollup's retention, VIGIL_HOURLY_ROLLUP_RETENTION_DAYS).


@dataclass
class TelemetryCdfs:
    since: datetime
    until: datetime
    source: str  # "raw samples", "1-minute rollup (per-minute means)" or "hourly rollup (...)"
    rows: int
    sampled_pct: float | None  # None: every row was read
    # metric -> [(value, cumulative share)] at PERCENTILES (empty when no data)
    curves: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def telemetry_cdfs(
    cluster: Cluster, since: datetime | None = None, until: datetime | None = None
) -> TelemetryCdfs:
    """CDFs of GPU util, SM activity, memory used and power over every GPU of the cluster.

    Telemetry's cluster_distribution chooses the data: per-minute means from the 1-minute
    rollup for windows of a day or more, samples for shorter ones, the next coarser tier
    whole for a window that begins before a tier's retention (per-hour means for a quarter),
    so every GPU-cell of it weighs the same; telemetry no rollup holds yet (a fleet's first
    hour) is read from the finer tiers rather than shown as none. Above TELEMETRY_ROW_BUDGET
    rows the table is block-sampled, so the cost stays bounded.
    """
    until = until or timezone.now()
    since = since or telemetry_kept_since(until).hourly
    read = cluster_distribution(
        cluster.id,
        since,
        until,
        [column for column, _ in TELEMETRY_METRICS.values()],
        PERCENTILES,
        row_budget=TELEMETRY_ROW_BUDGET,
    )
    curves = {}
    for metric, (column, factor) in TELEMETRY_METRICS.items():
        values = read.quantiles.get(column)
        curves[metric] = (
            [(v * factor, p) for v, p in zip(values, PERCENTILES, strict=True) if v is not None]
            if values
            else []
        )
    return TelemetryCdfs(
        since=since,
        until=until,
        source=read.source,
        rows=read.rows,
        sampled_pct=read.sampled_pct,
        curves=curves,
    )
