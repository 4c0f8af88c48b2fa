"""Reads of jobs: the filtered job list, one job's allocations, telemetry and energy, the
GPUs that jobs hold but leave idle, and the cached characterization of a window.

Samples carry no job id (DESIGN.md): per-job telemetry joins samples to the job's allocation
intervals at query time, raw samples for short jobs and the 1-minute rollup for long ones,
or the coarser tier that still holds an older job (webapp/telemetry/tiers.py).
An allocation names its GPU by id when the watcher knew it and by (node, index) otherwise;
every query below resolves both (`coalesce(a.gpu_id, g.id)`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from webapp.core.units import mj_to_kwh
from webapp.core.windows import Window
from webapp.fleet.models import Cluster, Node
from webapp.jobs.characterization import Characterization, jobs_characterize, tally_version
from webapp.jobs.models import Job
from webapp.telemetry import tiers
from webapp.telemetry.samples import samples_source
from webapp.telemetry.selectors import SERIES_METRICS, Series

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
            "vigil:jobs:characterize:v2",
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


# --- One job: allocations, telemetry, energy ---------------------------------------------------

# Jobs up to this long read raw samples; longer ones the 1-minute rollup (DESIGN.md); jobs
# older than a tier keeps, the next coarser one (webapp/telemetry/tiers.py).
RAW_JOB_MAX = timedelta(hours=3)
# At most this many points per GPU line: longer jobs average rollup minutes into buckets.
SERIES_POINTS = 600
# GPUs drawn on the job page's series figure (a 1,024-GPU job would draw an unreadable mess).
SERIES_GPUS_MAX = 16


# What one read of a job's telemetry may cost, in GPU-hours of the tier: a job page
# reads every cell of the job's GPUs over its span, so a long or wide job reads a coarser tier
# and the page's cost stays bounded whatever the job's length. Raw samples (every 10-15 s) up
# to 1,024 GPU-hours (a 2,048-GPU job's first half hour, 16 GPUs for RAW_JOB_MAX); the
# 1-minute rollup up to 4,096 (that job's first 2 hours: about 250,000 cells); the hourly
# rollup beyond (a day of it is 49,000 cells). A small job keeps its fine resolution.
RAW_GPU_HOURS_MAX = 1024.0
MINUTE_GPU_HOURS_MAX = 4096.0


def job_tiers(start: datetime, end: datetime, gpus: int, now: datetime) -> list[tiers.Tier]:
    """The tiers to read a job's telemetry over start..end from, best first: the finest that
    still holds `start` (tiers_for) and that its span x `gpus` fits (the budgets above), then
    the coarser ones, then the finer ones the budget passed over, as fallbacks (an hourly
    rollup not yet folded, a partition dropped early) that cost more but draw something."""
    span_h = max((end - start).total_seconds(), 1.0) / 3600
    gpu_hours = span_h * max(gpus, 1)
    if (end - start) <= RAW_JOB_MAX and gpu_hours <= RAW_GPU_HOURS_MAX:
        finest = tiers.SAMPLES
    elif gpu_hours <= MINUTE_GPU_HOURS_MAX:
        finest = tiers.MINUTE
    else:
        finest = tiers.HOURLY
    wanted = tiers.SAMPLES if (end - start) <= RAW_JOB_MAX else tiers.MINUTE
    held = tiers.tiers_for(start, wanted, now)
    best = [t for t in held if tiers.TIERS.index(t) >= tiers.TIERS.index(finest)] or held[-1:]
    return best + [t for t in reversed(held) if t not in best]


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


_RAW_JOB_SERIES_SQL = f"""
SELECT a.id, s.ts, {", ".join("s." + m for m in SERIES_METRICS)}
FROM jobs_joballocation a
LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
JOIN telemetry_gpusample s ON s.gpu_id = coalesce(a.gpu_id, g.id)
    AND s.ts >= a.start AND s.ts <= coalesce(a."end", %s)
WHERE a.job_id = %s AND a.id = ANY(%s) AND s.ts >= %s AND s.ts <= %s
ORDER BY a.id, s.ts
"""

_ROLLUP_JOB_SERIES_SQL = f"""
SELECT a.id, date_bin(%s * interval '1 second', r.minute, timestamptz '2000-01-01') AS bucket,
    {", ".join(f"sum(r.{m}_sum) / nullif(sum(r.{m}_cnt), 0)" for m in SERIES_METRICS)}
FROM jobs_joballocation a
LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
JOIN telemetry_gpurollup1m r ON r.gpu_id = coalesce(a.gpu_id, g.id)
    AND r.minute >= date_trunc('minute', a.start) AND r.minute <= coalesce(a."end", %s)
WHERE a.job_id = %s AND a.id = ANY(%s) AND r.minute >= %s AND r.minute <= %s
GROUP BY 1, 2
ORDER BY 1, 2
"""


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
    (webapp/telemetry/tiers.py) once the job is older than that tier keeps, or when it holds
    none of the job's telemetry."""
    now = now or timezone.now()
    shown = allocations[:SERIES_GPUS_MAX]
    start, end = job_span(job, allocations, now)
    out = {a.label: Series() for a in shown}
    label_of = {a.id: a.label for a in shown}
    candidates = job_tiers(start, end, len(shown), now)
    source = candidates[0].label
    rows: list = []
    for tier in candidates if shown else []:
        if tier is tiers.SAMPLES:
            source = tier.label
            gpus = [a.gpu_id for a in shown if a.gpu_id is not None]
            samples = samples_source(gpus, start, end, SERIES_METRICS)
            sql = _RAW_JOB_SERIES_SQL.replace("telemetry_gpusample s", f"{samples} s")
            params = [now, job.id, list(label_of), start, end]
        else:
            cells = tiers.cells_of(tier.step_s, end - start, SERIES_POINTS)
            source = _means_label(tier, cells)
            sql = tiers.rollup_sql(_ROLLUP_JOB_SERIES_SQL, tier)
            lo = start - timedelta(seconds=tier.step_s)
            params = [cells * tier.step_s, now, job.id, list(label_of), lo, end]
        with connection.cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        if rows:
            break
    for alloc_id, ts, *values in rows:
        s = out[label_of[alloc_id]]
        s.ts.append(ts)
        for name, value in zip(SERIES_METRICS, values, strict=True):
            s.values[name].append(value)
    return JobTelemetry(source, out, gpus_total=len(allocations), gpus_shown=len(shown))


def _means_label(tier: tiers.Tier, cells: int) -> str:
    """ "1-minute rollup, 5-minute means" / "hourly rollup, 3-hour means" / "hourly rollup"."""
    if cells == 1:
        return tier.label
    unit = "minute" if tier is tiers.MINUTE else "hour"
    return f"{tier.label}, {cells}-{unit} means"


# Energy per allocation from the cumulative NVML counter (energy_mj). Deltas between
# consecutive readings are summed; a reading lower than the one before means the counter
# restarted from zero (driver reload, GPU reset), so the energy since the restart is the new
# reading itself. Summing deltas instead of max - min keeps the energy before the reset.
_RAW_ENERGY_SQL = """
SELECT alloc_id, count(e), sum(CASE WHEN d IS NULL THEN 0 WHEN d >= 0 THEN d ELSE e END),
    sum(CASE WHEN d < 0 THEN 1 ELSE 0 END)
FROM (
    SELECT a.id AS alloc_id, s.energy_mj AS e,
        s.energy_mj - lag(s.energy_mj) OVER (PARTITION BY a.id ORDER BY s.ts) AS d
    FROM jobs_joballocation a
    LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
    JOIN telemetry_gpusample s ON s.gpu_id = coalesce(a.gpu_id, g.id)
        AND s.ts >= a.start AND s.ts <= coalesce(a."end", %s)
    WHERE a.job_id = %s AND s.ts >= %s AND s.ts <= %s AND s.energy_mj IS NOT NULL
) x
GROUP BY alloc_id
"""

# The same over the rollup's per-minute lowest and highest readings: each minute adds its
# highest reading minus the previous minute's highest (the first minute: highest - lowest).
# A reset inside a minute can lose up to that minute's energy: minute resolution.
_ROLLUP_ENERGY_SQL = """
SELECT alloc_id, count(hi),
    sum(CASE WHEN prev IS NULL THEN hi - lo WHEN hi >= prev THEN hi - prev ELSE hi END),
    sum(CASE WHEN hi < prev THEN 1 ELSE 0 END)
FROM (
    SELECT a.id AS alloc_id, r.energy_mj_min AS lo, r.energy_mj_max AS hi,
        lag(r.energy_mj_max) OVER (PARTITION BY a.id ORDER BY r.minute) AS prev
    FROM jobs_joballocation a
    LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
    JOIN telemetry_gpurollup1m r ON r.gpu_id = coalesce(a.gpu_id, g.id)
        AND r.minute >= date_trunc('minute', a.start) AND r.minute <= coalesce(a."end", %s)
    WHERE a.job_id = %s AND r.minute >= %s AND r.minute <= %s AND r.energy_mj_max IS NOT NULL
) x
GROUP BY alloc_id
"""


@dataclass(frozen=True)
class GpuEnergy:
    allocation: AllocationRow
    readings: int
    energy_mj: float
    resets: int

    @property
    def kwh(self) -> float:
        return mj_to_kwh(self.energy_mj)


@dataclass
class JobEnergy:
    method: str
    per_gpu: list[GpuEnergy] = field(default_factory=list)

    @property
    def kwh(self) -> float:
        return sum(e.kwh for e in self.per_gpu)

    @property
    def resets(self) -> int:
        return sum(e.resets for e in self.per_gpu)


def job_energy(
    job: Job, allocations: list[AllocationRow], *, now: datetime | None = None
) -> JobEnergy:
    """GPU energy of the job so far, per allocation, from energy-counter deltas (see SQL):
    from samples for a short job, the 1-minute rollup for a long one, the hourly rollup for
    one older than the 1-minute rollup keeps (webapp/telemetry/tiers.py)."""
    now = now or timezone.now()
    start, end = job_span(job, allocations, now)
    candidates = job_tiers(start, end, len(allocations), now)
    rows: dict = {}
    tier = candidates[0]
    for tier in candidates:
        if tier is tiers.SAMPLES:  # raw or compacted samples (webapp/telemetry/samples.py)
            lo = start
            gpus = [a.gpu_id for a in allocations if a.gpu_id is not None]
            samples = samples_source(gpus, lo, end, ["energy_mj"])
            sql = _RAW_ENERGY_SQL.replace("telemetry_gpusample s", f"{samples} s")
        else:
            lo = start - timedelta(seconds=tier.step_s)
            sql = tiers.rollup_sql(_ROLLUP_ENERGY_SQL, tier)
        with connection.cursor() as cur:
            cur.execute(sql, [now, job.id, lo, end])
            rows = {r[0]: r[1:] for r in cur.fetchall()}
        if rows or not allocations:
            break
    resolution = {
        tiers.SAMPLES: "from raw samples",
        tiers.MINUTE: "from the 1-minute rollup (minute resolution)",
        tiers.HOURLY: "from the hourly rollup (hour resolution: the hours the job began and "
        "ended in count whole)",
    }[tier]
    method = (
        "sum of NVML energy-counter deltas (energy_mj) per GPU within its allocation, "
        + resolution
        + "; a counter reset (a reading lower than the one before) adds the reading after it"
    )
    per_gpu = [
        GpuEnergy(a, rows[a.id][0], float(rows[a.id][1] or 0), rows[a.id][2])
        for a in allocations
        if a.id in rows
    ]
    return JobEnergy(method=method, per_gpu=per_gpu)


# --- Wasted GPUs -------------------------------------------------------------------------------

# For every open allocation: the newest rollup minute in which its GPU was busy (mean util at
# or above the threshold), found by walking the (gpu_id, minute) key backwards from now, and
# the minutes with data after it. A GPU idle for at least `min_idle` minutes is wasted.
# Before the 1-minute rollup's retention (`minute_kept`) the hourly rollup answers, for an
# allocation with no busy minute kept: its newest hour in which any sample reached the
# threshold (the hour's max: an hour under it had no busy minute, so idle is never
# over-counted), and the hours with data after it, each counted in minutes (the first from
# the allocation's start).
_WASTED_SQL = """
WITH open_alloc AS (
    SELECT a.id, a.job_id, a.node_id, a.gpu_index, a.start, coalesce(a.gpu_id, g.id) AS gpu_id
    FROM jobs_joballocation a
    JOIN jobs_job j ON j.id = a.job_id
    LEFT JOIN fleet_gpu g ON g.node_id = a.node_id AND g.index = a.gpu_index
    WHERE a."end" IS NULL AND a.start <= %(now)s {cluster_filter}
)
SELECT o.job_id, o.node_id, o.gpu_index, o.gpu_id,
    idle.minutes + coalesce(idle_h.minutes, 0), coalesce(idle_h.first, idle.first),
    coalesce(idle.last, idle_h.last)
FROM open_alloc o
LEFT JOIN LATERAL (
    SELECT r.minute FROM telemetry_gpurollup1m r
    WHERE r.gpu_id = o.gpu_id
        AND r.minute >= greatest(date_trunc('minute', o.start), %(minute_kept)s)
        AND r.minute <= %(now)s AND r.gpu_util_sum >= %(busy)s * r.gpu_util_cnt
        AND r.gpu_util_cnt > 0
    ORDER BY r.minute DESC LIMIT 1
) busy ON true
JOIN LATERAL (
    SELECT count(*) AS minutes, min(r.minute) AS first, max(r.minute) AS last
    FROM telemetry_gpurollup1m r
    WHERE r.gpu_id = o.gpu_id AND r.gpu_util_cnt > 0 AND r.minute <= %(now)s
        AND r.minute >= coalesce(
            busy.minute + interval '1 minute',
            greatest(date_trunc('minute', o.start), %(minute_kept)s)
        )
) idle ON true
LEFT JOIN LATERAL (
    SELECT r.hour FROM telemetry_gpurollup1h r
    WHERE busy.minute IS NULL AND o.start < %(minute_kept)s
        AND r.gpu_id = o.gpu_id AND r.hour >= date_trunc('hour', o.start)
        AND r.hour < %(minute_kept)s AND r.gpu_util_cnt > 0 AND r.gpu_util_max >= %(busy)s
    ORDER BY r.hour DESC LIMIT 1
) busy_h ON true
LEFT JOIN LATERAL (
    SELECT sum(least(60, extract(epoch FROM r.hour + interval '1 hour'
            - greatest(r.hour, date_trunc('minute', o.start))) / 60))::bigint AS minutes,
        greatest(min(r.hour), date_trunc('minute', o.start)) AS first,
        max(r.hour) + interval '59 minutes' AS last
    FROM telemetry_gpurollup1h r
    WHERE busy.minute IS NULL AND o.start < %(minute_kept)s
        AND r.gpu_id = o.gpu_id AND r.gpu_util_cnt > 0 AND r.hour < %(minute_kept)s
        AND r.hour >= coalesce(busy_h.hour + interval '1 hour', date_trunc('hour', o.start))
) idle_h ON true
WHERE o.gpu_id IS NOT NULL AND idle.minutes + coalesce(idle_h.minutes, 0) >= %(min_idle)s
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
    sql = _WASTED_SQL.format(cluster_filter="AND j.cluster_id = %(cluster)s" if cluster else "")
    params = {
        "now": now,
        "minute_kept": tiers.MINUTE.kept_since(now),
        "busy": busy_util_pct,
        "min_idle": min_idle_minutes,
        "cluster": cluster.id if cluster else None,
    }
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    jobs = Job.objects.select_related("cluster").in_bulk({r[0] for r in rows})
    hostnames = dict(Node.objects.filter(id__in={r[1] for r in rows}).values_list("id", "hostname"))
    grouped: dict[tuple[int, int], WastedJob] = {}
    for job_id, node_id, gpu_index, _gpu_id, minutes, first, last in rows:
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
