"""Reads of jobs: the filtered job list, one job's allocations and telemetry, the
GPUs that jobs hold but leave idle, and the cached characterization of a window.

Samples carry no job id (allocations are joined at query time): per-job telemetry hands the job's
allocations to telemetry's read API as (GPU, interval) lists, which reads raw samples for short
jobs, the 1-minute rollup for long ones, or the coarser tier that still holds an older job. An
allocation names its GPU by id when the watcher knew it and by (node, index) otherwise; the queries
below resolve both (`coalesce(a.gpu_id, g.id)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.core.cache import cache
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from webapp.core.windows import Window
from webapp.fleet.models import Cluster, Node
from webapp.jobs.characterization import Characterization, jobs_characterize, tally_version
from webapp.jobs.models import Job
from webapp.telemetry.selectors import (
    SERIES_METRICS,
    GpuInterval,
    ReadBudget,
    Resolution,
    Series,
    intervals_idle,
    intervals_series,
)

# --- Job list ---------------------------------------------------------------------------------


def jobs_filter(
    *,
    cluster: Cluster | str = "",
    scheduler_id: str = "",
    job_type: str = "",
    state: str = "",
    user: str = "",
    submitted_from: datetime | None = None,
    submitted_before: datetime | None = None,
    order_by: str = "-submit_at",
) -> QuerySet[Job]:
    """Jobs matching the list page's filters (empty = any), newest submission first unless
    `order_by` says otherwise."""
    qs = Job.objects.select_related("cluster").order_by(order_by)  # newest: (cluster, submit_at)
    if isinstance(cluster, Cluster):
        qs = qs.filter(cluster_id=cluster.id)
    elif cluster:
        # By id, not by a join on the name: the planner then walks (cluster, submit_at).
        cluster_id = Cluster.objects.filter(name=cluster).values_list("id", flat=True).first()
        qs = qs.filter(cluster_id=cluster_id) if cluster_id else qs.none()
    if scheduler_id:
        qs = qs.filter(scheduler_id=scheduler_id)
    if job_type:
        qs = qs.filter(job_type=job_type)
    if state:
        qs = qs.filter(state=state)
    if user:
        qs = qs.filter(user=user)
    if submitted_from:
        qs = qs.filter(submit_at__gte=submitted_from)
    if submitted_before:
        qs = qs.filter(submit_at__lt=submitted_before)
    return qs


# --- Characterization, cached ------------------------------------------------------------------

# A computed window is kept this long. Any change to the cluster's jobs adds a tally row, which
# makes a new key (tally_version); so does a compaction.
CHARACTERIZATION_TTL_S = 300


def characterization_cached(window: Window, *, keep: bool = False) -> Characterization:
    """jobs_characterize(window), from the cache when the cluster's jobs have not changed since.

    keep: also restart the cached entry's lifetime (the warm-up task, so that the page never
    finds it expired)."""
    key = ":".join(
        str(p)
        for p in (
            "vigil:jobs:characterize:v3",
            window.cluster.id,
            window.since.isoformat() if window.since else "",
            window.until.isoformat() if window.until else "",
            *tally_version(window.cluster),
        )
    )
    result = cache.get(key)
    if result is None:
        result = jobs_characterize(window)
        cache.set(key, result, CHARACTERIZATION_TTL_S)
    elif keep:
        cache.touch(key, CHARACTERIZATION_TTL_S)
    return result


# --- One job: allocations, telemetry --------------------------------------------------------------

# Jobs up to this long read raw samples; longer ones the 1-minute rollup (raw samples are for
# short ranges); jobs older than a tier keeps, the next coarser one (telemetry decides which
# holds them).
RAW_JOB_MAX = timedelta(hours=3)
# At most this many points per GPU line: longer jobs average rollup minutes into buckets.
SERIES_POINTS = 600
# GPUs drawn on the job page's series figure (a 1,024-GPU job would draw an unreadable mess).
SERIES_GPUS_MAX = 16


# What one read of a job's telemetry may cost, in GPU-hours of the tier: a job page reads
# every cell of the job's GPUs over its span, so a long or wide job reads a coarser tier and
# the page's cost stays bounded whatever the job's length. Raw samples (every 10-15 s) up to
# 1,024 GPU-hours (a 2,048-GPU job's first half hour, 16 GPUs for RAW_JOB_MAX); the 1-minute
# rollup up to 4,096 (that job's first 2 hours: about 250,000 cells); the hourly rollup
# beyond (a day of it is 49,000 cells). A small job keeps its fine resolution.
RAW_GPU_HOURS_MAX = 1024.0
MINUTE_GPU_HOURS_MAX = 4096.0


def job_read_budget() -> ReadBudget:
    """What one read of a job's telemetry may cost (the limits above, read when called)."""
    return ReadBudget(RAW_JOB_MAX, RAW_GPU_HOURS_MAX, MINUTE_GPU_HOURS_MAX)


@dataclass(frozen=True)
class AllocationRow:
    id: int
    node_id: int
    hostname: str
    gpu_id: int | None
    gpu_index: int
    start: datetime
    end: datetime | None

    @property
    def label(self) -> str:
        return f"{self.hostname} GPU {self.gpu_index}"


_ALLOCATIONS_SQL = """
SELECT a.id, a.node_id, n.hostname, coalesce(a.gpu_id, g.id), a.gpu_index, a.start, a."end"
FROM jobs_joballocation a
JOIN fleet_node n ON n.id = a.node_id
LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
WHERE a.job_id = %s
ORDER BY n.hostname, a.gpu_index, a.start
"""


class EndedAllocation(NamedTuple):
    job_id: int
    gpu_id: int
    start: datetime
    stop: datetime


# The window's condition names jobs_job's columns alone, so it filters the jobs before the join.
_ENDED_ALLOCATIONS_SQL = """
    SELECT a.job_id, coalesce(a.gpu_id, g.id) AS gpu_id, a.start, a."end" AS stop
    FROM jobs_joballocation a
    JOIN (SELECT id FROM jobs_job WHERE {where} AND job_type = %s) j ON j.id = a.job_id
    LEFT JOIN fleet_gpu g ON a.gpu_id IS NULL AND g.node_id = a.node_id AND g.index = a.gpu_index
    WHERE a."end" IS NOT NULL AND a."end" > a.start AND a.start >= %s AND a.start < %s
    ORDER BY a.start DESC
    LIMIT %s
"""


def allocations_ended(
    window: Window, job_type: str, started_from: datetime, started_before: datetime, limit: int
) -> list[EndedAllocation]:
    """The newest `limit` ended allocations, started in [started_from, started_before), of the
    window's jobs of one type (submitted in the window), newest first; each allocation once and
    only those whose GPU is known."""
    where, params = window.where("submit_at")
    with connection.cursor() as cur:
        cur.execute(
            _ENDED_ALLOCATIONS_SQL.format(where=where),
            [*params, job_type, started_from, started_before, limit],
        )
        # An allocation is its (job, GPU, start, end): a repeated one counts once.
        rows = dict.fromkeys(EndedAllocation(*r) for r in cur.fetchall() if r[1] is not None)
    return list(rows)


def job_allocations_for(job: Job) -> list[AllocationRow]:
    """The job's allocations (node, GPU, interval), with the GPU resolved from (node, index)."""
    with connection.cursor() as cur:
        cur.execute(_ALLOCATIONS_SQL, [job.id])
        return [AllocationRow(*row) for row in cur.fetchall()]


def job_span(
    job: Job, allocations: list[AllocationRow], now: datetime
) -> tuple[datetime, datetime]:
    """The interval the job's telemetry covers: its allocations (else start..end), open = now."""
    if allocations:
        start = min(a.start for a in allocations)
        end = max((a.end or now) for a in allocations)
    else:
        start = job.start_at or job.submit_at or now
        end = job.end_at or now
    return start, max(end, start)


def allocation_intervals(allocations: list[AllocationRow], now: datetime) -> list[GpuInterval]:
    """Each allocation whose GPU is known as telemetry's (GPU, interval), keyed by its id; an
    open allocation runs until `now`."""
    return [
        GpuInterval(a.id, a.gpu_id, a.start, a.end or now)
        for a in allocations
        if a.gpu_id is not None
    ]


@dataclass
class JobTelemetry:
    source: str  # "raw samples", "1-minute rollup, N-minute means", "hourly rollup", ...
    series: dict[str, Series]  # label -> series
    gpus_total: int
    gpus_shown: int


def job_series(
    job: Job, allocations: list[AllocationRow], *, now: datetime | None = None
) -> JobTelemetry:
    """Per-GPU series of SERIES_METRICS over each allocation of the job (first GPUs only):
    raw samples for a short job, the 1-minute rollup for a long one, the next coarser tier
    once the job is older than that tier keeps, or when it holds none of the job's telemetry
    (telemetry's intervals_series chooses, within job_read_budget)."""
    now = now or timezone.now()
    shown = allocations[:SERIES_GPUS_MAX]
    start, end = job_span(job, allocations, now)
    resolution, read = intervals_series(
        allocation_intervals(shown, now),
        SERIES_METRICS,
        lo=start,
        hi=end,
        now=now,
        budget=job_read_budget(),
        points=SERIES_POINTS,
    )
    out = {}
    for a in shown:
        s = read.get(a.id)
        out[a.label] = Series(s.ts, s.values) if s else Series()
    return JobTelemetry(
        means_label(resolution), out, gpus_total=len(allocations), gpus_shown=len(shown)
    )


def means_label(resolution: Resolution, per: str = "") -> str:
    """ "raw samples" / "1-minute rollup, 5-minute means" / "hourly rollup": what a figure
    drew from (`per`: " per GPU" after the means)."""
    if resolution.step_s is None:
        if resolution.bucket_s is None:
            return resolution.label
        return f"{resolution.label}, {resolution.bucket_s}-s means{per}"
    if resolution.cells == 1:
        return resolution.label
    return f"{resolution.label}, {resolution.cells}-{resolution.cell_unit} means{per}"


# --- Wasted GPUs -------------------------------------------------------------------------------

# Every allocation open now, with its GPU resolved from (node, index) where the watcher did
# not know its id.
_OPEN_ALLOCATIONS_SQL = """
SELECT a.job_id, a.node_id, a.gpu_index, coalesce(a.gpu_id, g.id), a.start
FROM jobs_joballocation a
JOIN jobs_job j ON j.id = a.job_id
LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
WHERE a."end" IS NULL AND a.start <= %(now)s {cluster_filter}
"""


@dataclass
class WastedJob:
    job: Job
    hostname: str
    gpus: list[int]  # indices of the idle GPUs on that node
    idle_gpu_minutes: int
    idle_since: datetime
    last_sample: datetime

    @property
    def idle_gpu_hours(self) -> float:
        return self.idle_gpu_minutes / 60


@dataclass(frozen=True)
class WasteTotal:
    key: str  # user or team
    jobs: int
    gpus: int
    idle_gpu_hours: float


def wasted_gpus(
    *,
    busy_util_pct: float,
    min_idle_minutes: int,
    cluster: Cluster | None = None,
    now: datetime | None = None,
) -> list[WastedJob]:
    """Jobs holding GPUs now whose utilization stayed under `busy_util_pct` for at least
    `min_idle_minutes` rollup minutes (minutes without data are not counted), one row per
    (job, node), most idle GPU-hours first. Idle time older than the 1-minute rollup's
    retention is read from the hourly rollup, at hour resolution."""
    now = now or timezone.now()
    sql = _OPEN_ALLOCATIONS_SQL.format(
        cluster_filter="AND j.cluster_id = %(cluster)s" if cluster else ""
    )
    with connection.cursor() as cur:
        cur.execute(sql, {"now": now, "cluster": cluster.id if cluster else None})
        held = [r for r in cur.fetchall() if r[3] is not None]
    idle = intervals_idle(
        [GpuInterval(n, gpu_id, start, now) for n, (*_, gpu_id, start) in enumerate(held)],
        busy_util_pct=busy_util_pct,
        min_idle_minutes=min_idle_minutes,
        now=now,
    )
    rows = [(*held[n][:3], i.minutes, i.since, i.last) for n, i in idle.items()]
    jobs = Job.objects.select_related("cluster").in_bulk({r[0] for r in rows})
    hostnames = dict(Node.objects.filter(id__in={r[1] for r in rows}).values_list("id", "hostname"))
    grouped: dict[tuple[int, int], WastedJob] = {}
    for job_id, node_id, gpu_index, minutes, first, last in rows:
        row = grouped.get((job_id, node_id))
        if row is None:
            row = grouped[(job_id, node_id)] = WastedJob(
                jobs[job_id], hostnames[node_id], [], 0, first, last
            )
        row.gpus.append(gpu_index)
        row.idle_gpu_minutes += minutes
        row.idle_since = min(row.idle_since, first)
        row.last_sample = max(row.last_sample, last)
    out = sorted(grouped.values(), key=lambda w: (-w.idle_gpu_minutes, w.job.id, w.hostname))
    for w in out:
        w.gpus.sort()
    return out


def waste_totals(rows: list[WastedJob], by: str) -> list[WasteTotal]:
    """Per user (`by="user"`) or team: jobs, idle GPUs and idle GPU-hours, largest first."""
    acc: dict[str, tuple[set[int], int, float]] = {}
    for w in rows:
        key = getattr(w.job, by) or "(none)"
        jobs, gpus, hours = acc.get(key, (set(), 0, 0.0))
        acc[key] = (jobs | {w.job.id}, gpus + len(w.gpus), hours + w.idle_gpu_hours)
    totals = [WasteTotal(k, len(j), g, h) for k, (j, g, h) in acc.items()]
    return sorted(totals, key=lambda t: (-t.idle_gpu_hours, t.key))


# --- Jobs on a node ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuHolder:
    """The job holding a GPU now, as the fleet overview names it."""

    job_id: int
    scheduler_id: str
    name: str
    user: str


_GPU_HOLDERS_SQL = """
SELECT coalesce(a.gpu_id, g.id), j.id, j.scheduler_id, j.name, j.user
FROM jobs_joballocation a
JOIN jobs_job j ON j.id = a.job_id
LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
WHERE a.start <= %(now)s AND (a."end" IS NULL OR a."end" > %(now)s)
ORDER BY a.start, a.id
"""


def gpu_holders(now: datetime | None = None) -> dict[int, GpuHolder]:
    """GPU id -> the job whose allocation holds it now, for the whole fleet in one query. The
    newest allocation of a GPU wins (a requeued job's old one may still be open)."""
    with connection.cursor() as cur:
        cur.execute(_GPU_HOLDERS_SQL, {"now": now or timezone.now()})
        rows = cur.fetchall()
    return {gpu_id: GpuHolder(*rest) for gpu_id, *rest in rows if gpu_id is not None}
