"""Telemetry's one read API over (GPU, interval) lists: series, bands, energy, activity and
idleness of samples, for readers outside telemetry (a job's page, its energy, the wasted GPUs,
the evaluation phases). A cluster's distributions are in `distributions.py`, the samples as
arrays for the energy rollup in `arrays.py`.

A reader names what it wants (GPUs and the intervals it cares about, the metrics, how many
points, what a read may cost) and this module chooses where it comes from: raw samples (or
compacted ones, unpacked on the way: `samples.py`), the 1-minute rollup or the hourly one
(`tiers.py`), falling back to the next tier when the chosen one holds nothing. Every answer
says which data it drew from. The interval list travels as arrays (`unnest`), one row per
interval, so a 2,048-GPU job costs one statement, not one per GPU.

`webapp/telemetry/selectors.py` re-exports what other apps may call.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import connection

from collectors.schema import GPU_FIELD_NAMES
from webapp.telemetry import tiers
from webapp.telemetry.models import ROLLUP_METRICS
from webapp.telemetry.samples import samples_source


@dataclass(frozen=True)
class GpuInterval:
    """A GPU over an interval, named by the reader's `key` (an allocation, say). Reads take
    lo <= t <= hi unless the function says otherwise; a rollup cell counts when it begins
    within the interval or is the cell `lo` falls in."""

    key: Hashable
    gpu_id: int
    lo: datetime
    hi: datetime


@dataclass(frozen=True)
class ReadBudget:
    """What one read may cost: spans up to `raw_span` of at most `raw_gpu_hours` GPU-hours
    read samples, up to `minute_gpu_hours` the 1-minute rollup, anything more the hourly
    one. A small read keeps its fine resolution; a long or wide one reads a coarser tier, so
    its cost stays bounded whatever its length."""

    raw_span: timedelta
    raw_gpu_hours: float
    minute_gpu_hours: float


@dataclass(frozen=True)
class Resolution:
    """Which data a read drew from: `tier` is "samples", "1m" or "1h", `label` how a page
    names it ("raw samples", "1-minute rollup", "hourly rollup"), `step_s` the tier's cell
    (None for samples) and `bucket_s` the width of the means returned (None: samples as
    they came)."""

    tier: str
    label: str
    step_s: int | None
    bucket_s: int | None

    @property
    def cells(self) -> int:
        """Rollup cells averaged per point (1 for samples)."""
        return self.bucket_s // self.step_s if self.step_s and self.bucket_s else 1

    @property
    def cell_unit(self) -> str:
        """ "minute" or "hour": the rollup's cell, in words."""
        return "hour" if self.tier == tiers.HOURLY.key else "minute"


_TIER_BY_KEY = {t.key: t for t in tiers.TIERS}


def tiers_within(
    budget: ReadBudget, lo: datetime, hi: datetime, gpus: int, now: datetime
) -> list[tiers.Tier]:
    """The tiers to read `gpus` GPUs over lo..hi from, best first: the finest that still
    holds `lo` (tiers_for) and that the span x `gpus` fits (the budget), then the coarser
    ones, then the finer ones the budget passed over, as fallbacks (an hourly rollup not yet
    folded, a partition dropped early) that cost more but draw something."""
    span_h = max((hi - lo).total_seconds(), 1.0) / 3600
    gpu_hours = span_h * max(gpus, 1)
    if (hi - lo) <= budget.raw_span and gpu_hours <= budget.raw_gpu_hours:
        finest = tiers.SAMPLES
    elif gpu_hours <= budget.minute_gpu_hours:
        finest = tiers.MINUTE
    else:
        finest = tiers.HOURLY
    wanted = tiers.SAMPLES if (hi - lo) <= budget.raw_span else tiers.MINUTE
    held = tiers.tiers_for(lo, wanted, now)
    best = [t for t in held if tiers.TIERS.index(t) >= tiers.TIERS.index(finest)] or held[-1:]
    return best + [t for t in reversed(held) if t not in best]


def _bucket_s(
    tier: tiers.Tier, span: timedelta, points: int | None, min_bucket_s: int | None
) -> int | None:
    """Bucket width giving at most `points` points over `span`: whole cells on a rollup,
    at least `min_bucket_s` on samples (None there: samples as they came)."""
    seconds = max(span.total_seconds(), 1.0)
    if tier is tiers.SAMPLES:
        if min_bucket_s is None:
            return None
        return max(min_bucket_s, math.ceil(seconds / points)) if points else min_bucket_s
    if not points:
        return tier.step_s
    return tier.step_s * max(1, math.ceil(seconds / tier.step_s / points))


def _resolution(tier: tiers.Tier, bucket_s: int | None) -> Resolution:
    return Resolution(tier.key, tier.label, tier.step_s, bucket_s)


def _check(metrics: Sequence[str], tier: tiers.Tier) -> None:
    known = GPU_FIELD_NAMES if tier is tiers.SAMPLES else ROLLUP_METRICS
    unknown = [m for m in metrics if m not in known]
    if unknown:
        raise ValueError(f"not a GPU metric of the {tier.label}: {unknown[0]!r}")


# The interval list: one row per interval, `k` its position in the reader's list (from 1).
_INTERVALS = (
    "unnest(%(gpu)s::bigint[], %(lo_i)s::timestamptz[], %(hi_i)s::timestamptz[])"
    " WITH ORDINALITY AS i(gpu_id, lo, hi, k)"
)


def _interval_params(intervals: Sequence[GpuInterval]) -> dict[str, str]:
    """The interval list's parameters of _INTERVALS, each an array literal in one string:
    adapting thousands of datetimes one by one took longer than the statement itself (a
    2,048-GPU job's page reads it three times). ISO 8601 times need no quoting there, and
    the intervals of a job share few distinct times, each written once."""
    text: dict[datetime, str] = {}

    def iso(t: datetime) -> str:
        return text.get(t) or text.setdefault(t, t.isoformat())

    return {
        "gpu": "{" + ",".join(str(int(i.gpu_id)) for i in intervals) + "}",
        "lo_i": "{" + ",".join(iso(i.lo) for i in intervals) + "}",
        "hi_i": "{" + ",".join(iso(i.hi) for i in intervals) + "}",
    }


@dataclass(frozen=True)
class _Plan:
    """One read of the interval list from one tier: its relation, joined to `i`, and the
    parameters both take."""

    tier: tiers.Tier
    alias: str  # "s" (samples) or "r" (a rollup)
    cell: str  # the time column: ts, minute or hour
    join: str  # "JOIN <relation> <alias> ON ... WHERE <constant bounds>"
    params: dict


def _plan(
    tier: tiers.Tier,
    intervals: Sequence[GpuInterval],
    lo: datetime,
    hi: datetime,
    fields: Sequence[str],
) -> _Plan:
    params = {**_interval_params(intervals), "hi": hi}
    if tier is tiers.SAMPLES:
        gpus = sorted({i.gpu_id for i in intervals})
        source = samples_source(gpus, lo, hi, fields)
        join = (
            f"JOIN {source} s ON s.gpu_id = i.gpu_id AND s.ts >= i.lo AND s.ts <= i.hi "
            "WHERE s.ts >= %(lo)s AND s.ts <= %(hi)s"
        )
        return _Plan(tier, "s", "ts", join, {**params, "lo": lo})
    # A cell that began before lo holds some of it: the constant bound reaches a cell back.
    cell = "minute" if tier is tiers.MINUTE else "hour"
    join = (
        f"JOIN {tier.table} r ON r.gpu_id = i.gpu_id "
        f"AND r.{cell} >= date_trunc('{cell}', i.lo) AND r.{cell} <= i.hi "
        f"WHERE r.{cell} >= %(lo)s AND r.{cell} <= %(hi)s"
    )
    return _Plan(tier, "r", cell, join, {**params, "lo": lo - timedelta(seconds=tier.step_s)})


def _per_interval_sql(plan: _Plan, metrics: Sequence[str], bucket_s: int | None) -> str:
    """SELECT k, time, one mean per metric: each sample (bucket_s None, samples only) or
    each bucket's mean (of the samples, or of the rollup's sums and counts: a mean of
    means would weigh cells with fewer samples too much)."""
    if plan.alias == "s" and bucket_s is None:
        values = ", ".join(f"s.{m} AS {m}" for m in metrics)
        return f"SELECT i.k, s.ts AS bucket, {values} FROM {_INTERVALS} {plan.join}"
    if plan.alias == "s":
        values = ", ".join(f"avg(s.{m}) AS {m}" for m in metrics)
    else:
        values = ", ".join(f"sum(r.{m}_sum) / nullif(sum(r.{m}_cnt), 0) AS {m}" for m in metrics)
    bucket = (
        f"date_bin(%(bucket)s * interval '1 second', {plan.alias}.{plan.cell}, "
        "timestamptz '2000-01-01')"
    )
    return f"SELECT i.k, {bucket} AS bucket, {values} FROM {_INTERVALS} {plan.join} GROUP BY 1, 2"


# --- Series ------------------------------------------------------------------------------------


@dataclass
class IntervalSeries:
    """One interval's series: times and one list of values per metric (None = no value)."""

    ts: list[datetime] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)


def intervals_series(
    intervals: Sequence[GpuInterval],
    metrics: Sequence[str],
    *,
    lo: datetime,
    hi: datetime,
    now: datetime,
    budget: ReadBudget | None = None,
    points: int | None = None,
    min_bucket_s: int | None = None,
    at: Resolution | None = None,
) -> tuple[Resolution, dict[Hashable, IntervalSeries]]:
    """Each interval's series of `metrics` within lo..hi (the intervals' span), in time
    order: from the finest tier `budget` allows for the span x the intervals (the next one
    when it holds nothing), or exactly `at` (a resolution an earlier read returned).

    `points`: at most this many points per interval over lo..hi: rollup cells are averaged
    into buckets of whole cells; samples into buckets of at least `min_bucket_s` seconds, or
    returned as they came when that is None. Returns the resolution read and {key: series}
    for every interval (empty when it has no data)."""
    _check(metrics, tiers.SAMPLES)  # a misspelt metric is refused before any read
    out = {i.key: IntervalSeries(values={m: [] for m in metrics}) for i in intervals}
    if at is not None:
        candidates = [_TIER_BY_KEY[at.tier]]
    else:
        if budget is None:
            raise ValueError("intervals_series needs a budget or a resolution (at)")
        candidates = tiers_within(budget, lo, hi, len(intervals), now)
    tier = candidates[0]
    bucket_s = at.bucket_s if at else _bucket_s(tier, hi - lo, points, min_bucket_s)
    rows: list = []
    for tier in candidates if intervals else []:
        _check(metrics, tier)
        bucket_s = at.bucket_s if at else _bucket_s(tier, hi - lo, points, min_bucket_s)
        plan = _plan(tier, intervals, lo, hi, metrics)
        sql = _per_interval_sql(plan, metrics, bucket_s) + " ORDER BY 1, 2"
        with connection.cursor() as cur:
            cur.execute(sql, {**plan.params, "bucket": bucket_s})
            rows = cur.fetchall()
        if rows:
            break
    keys = [i.key for i in intervals]
    for k, ts, *values in rows:
        s = out[keys[k - 1]]
        s.ts.append(ts)
        for name, value in zip(metrics, values, strict=True):
            s.values[name].append(value)
    return _resolution(tier, bucket_s), out


# --- Bands across intervals --------------------------------------------------------------------

# One pass over the per-interval bucket means gives both the bands (per bucket, across
# intervals) and each interval's mean (per interval, across buckets): a "mean" row carries it
# in the median column.
_BANDS_SQL = """
WITH per_gpu AS MATERIALIZED ({per_gpu})
SELECT 'band', bucket, NULL::bigint, count(*), {bands} FROM per_gpu GROUP BY bucket
UNION ALL
SELECT 'mean', NULL, k, count(*), {means} FROM per_gpu GROUP BY k
"""


@dataclass
class Band:
    """One metric across the intervals per bucket: lowest, median and highest mean."""

    lo: list[float | None] = field(default_factory=list)
    median: list[float | None] = field(default_factory=list)
    hi: list[float | None] = field(default_factory=list)


@dataclass
class Bands:
    resolution: Resolution
    ts: list[datetime] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)  # intervals reporting in each bucket
    bands: dict[str, Band] = field(default_factory=dict)
    means: dict[Hashable, dict[str, float | None]] = field(default_factory=dict)  # key -> mean


def intervals_bands(
    intervals: Sequence[GpuInterval],
    metrics: Sequence[str],
    *,
    lo: datetime,
    hi: datetime,
    now: datetime,
    budget: ReadBudget,
    points: int,
    min_bucket_s: int,
) -> Bands:
    """`metrics` as bands across the intervals (min / median / max of their bucket means per
    bucket, at most `points` buckets over lo..hi, samples' buckets at least `min_bucket_s`
    wide) and each interval's mean over its buckets, in one statement whatever the number of
    intervals: from the finest tier `budget` allows (the next one when it holds nothing). An
    interval's own line: intervals_series(..., at=bands.resolution)."""
    _check(metrics, tiers.SAMPLES)  # a misspelt metric is refused before any read
    candidates = tiers_within(budget, lo, hi, len(intervals), now)
    tier = candidates[0]
    bucket_s = _bucket_s(tier, hi - lo, points, min_bucket_s)
    rows: list = []
    bands = ", ".join(
        f"min({m}), percentile_cont(0.5) WITHIN GROUP (ORDER BY {m}), max({m})" for m in metrics
    )
    means = ", ".join(f"NULL::float, avg({m}), NULL::float" for m in metrics)
    for tier in candidates if intervals else []:
        _check(metrics, tier)
        bucket_s = _bucket_s(tier, hi - lo, points, min_bucket_s)
        plan = _plan(tier, intervals, lo, hi, metrics)
        per_gpu = _per_interval_sql(plan, metrics, bucket_s)
        with connection.cursor() as cur:
            cur.execute(
                _BANDS_SQL.format(per_gpu=per_gpu, bands=bands, means=means),
                {**plan.params, "bucket": bucket_s},
            )
            rows = cur.fetchall()
        if rows:
            break
    out = Bands(_resolution(tier, bucket_s), bands={m: Band() for m in metrics})
    keys = [i.key for i in intervals]
    for _, bucket, _, gpus, *values in sorted((r for r in rows if r[0] == "band"), key=_second):
        out.ts.append(bucket)
        out.gpus.append(gpus)
        for n, m in enumerate(metrics):
            band = out.bands[m]
            band.lo.append(values[3 * n])
            band.median.append(values[3 * n + 1])
            band.hi.append(values[3 * n + 2])
    for _, _, k, _, *values in (r for r in rows if r[0] == "mean"):
        out.means[keys[k - 1]] = {m: values[3 * n + 1] for n, m in enumerate(metrics)}
    return out


def _second(row: tuple) -> object:
    return row[1]


# --- Energy ------------------------------------------------------------------------------------

# Energy per interval from the cumulative NVML counter (energy_mj). Deltas between consecutive
# readings are summed; a reading lower than the one before means the counter restarted from
# zero (driver reload, GPU reset), so the energy since the restart is the new reading itself.
# Summing deltas instead of max - min keeps the energy before the reset.
_RAW_ENERGY_SQL = """
SELECT k, count(e), sum(CASE WHEN d IS NULL THEN 0 WHEN d >= 0 THEN d ELSE e END),
    sum(CASE WHEN d < 0 THEN 1 ELSE 0 END)
FROM (
    SELECT i.k, s.energy_mj AS e,
        s.energy_mj - lag(s.energy_mj) OVER (PARTITION BY i.k ORDER BY s.ts) AS d
    FROM {intervals} {join} AND s.energy_mj IS NOT NULL
) x
GROUP BY k
"""

# The same over a rollup's lowest and highest reading per cell: each cell adds its highest
# reading minus the previous cell's highest (the first cell: highest - lowest). A reset inside
# a cell can lose up to that cell's energy: the cell's resolution.
_ROLLUP_ENERGY_SQL = """
SELECT k, count(hi),
    sum(CASE WHEN prev IS NULL THEN hi - lo WHEN hi >= prev THEN hi - prev ELSE hi END),
    sum(CASE WHEN hi < prev THEN 1 ELSE 0 END)
FROM (
    SELECT i.k, r.energy_mj_min AS lo, r.energy_mj_max AS hi,
        lag(r.energy_mj_max) OVER (PARTITION BY i.k ORDER BY r.{cell}) AS prev
    FROM {intervals} {join} AND r.energy_mj_max IS NOT NULL
) x
GROUP BY k
"""

_ENERGY_RESOLUTION = {
    tiers.SAMPLES: "from raw samples",
    tiers.MINUTE: "from the 1-minute rollup (minute resolution)",
    tiers.HOURLY: "from the hourly rollup (hour resolution: the hours {a} {noun} began and "
    "ended in count whole)",
}


class CounterEnergy(NamedTuple):
    """One interval's GPU energy from its energy counter: the readings it summed, the energy
    (mJ) and the counter resets it crossed."""

    readings: int
    energy_mj: float
    resets: int


def intervals_energy(
    intervals: Sequence[GpuInterval],
    *,
    lo: datetime,
    hi: datetime,
    now: datetime,
    budget: ReadBudget,
    noun: str = "interval",
) -> tuple[str, dict[Hashable, CounterEnergy]]:
    """GPU energy of each interval from NVML energy-counter deltas that survive counter
    resets (see the SQL): from samples, the 1-minute rollup or the hourly one (the finest
    `budget` allows for lo..hi, the next one when it holds nothing). Returns the method in
    words, calling an interval `noun` ("allocation"), for the page that shows the figure,
    and {key: energy} for the intervals with readings."""
    candidates = tiers_within(budget, lo, hi, len(intervals), now)
    tier = candidates[0]
    rows: dict = {}
    for tier in candidates:
        plan = _plan(tier, intervals, lo, hi, ["energy_mj"])
        sql = _RAW_ENERGY_SQL if tier is tiers.SAMPLES else _ROLLUP_ENERGY_SQL
        with connection.cursor() as cur:
            cur.execute(
                sql.format(intervals=_INTERVALS, join=plan.join, cell=plan.cell), plan.params
            )
            rows = {r[0]: r[1:] for r in cur.fetchall()}
        if rows or not intervals:
            break
    article = "an" if noun[:1] in "aeiou" else "a"
    method = (
        f"sum of NVML energy-counter deltas (energy_mj) per GPU within its {noun}, "
        + _ENERGY_RESOLUTION[tier].format(a=article, noun=noun)
        + "; a counter reset (a reading lower than the one before) adds the reading after it"
    )
    keys = [i.key for i in intervals]
    return method, {
        keys[k - 1]: CounterEnergy(n, float(mj or 0), resets) for k, (n, mj, resets) in rows.items()
    }


# --- Activity: when a GPU was busy within an interval ------------------------------------------

# From samples: the first and last sample with `busy` at or above the threshold, and how far
# `rise` moved (max - min) before the first busy sample (or over the whole interval).
_RAW_ACTIVITY_SQL = """
WITH i AS (SELECT * FROM {intervals}), marks AS (
    SELECT i.k, i.gpu_id, i.lo, i.hi,
           min(s.ts) FILTER (WHERE s.{busy} >= %(at)s) AS first_busy,
           max(s.ts) FILTER (WHERE s.{busy} >= %(at)s) AS last_busy
    FROM i JOIN {source} s ON s.gpu_id = i.gpu_id AND s.ts >= i.lo AND s.ts < i.hi
    GROUP BY 1, 2, 3, 4
)
SELECT m.k, m.first_busy, m.last_busy,
       (SELECT max(s.{rise}) - min(s.{rise}) FROM {source} s
         WHERE s.gpu_id = m.gpu_id AND s.ts >= m.lo AND s.ts < coalesce(m.first_busy, m.hi))
FROM marks m
"""

# The same from the 1-minute rollup: a minute is busy when any of its samples was (the
# minute's max), so busy runs from the first busy minute's start to the last one's end
# (clamped to the interval), to the minute.
_ROLLUP_ACTIVITY_SQL = """
WITH i AS (SELECT * FROM {intervals}), marks AS (
    SELECT i.k, i.gpu_id, i.lo, i.hi,
           greatest(min(r.minute) FILTER (WHERE r.{busy}_max >= %(at)s), i.lo) AS first_busy,
           least(max(r.minute) FILTER (WHERE r.{busy}_max >= %(at)s) + interval '1 minute',
                 i.hi) AS last_busy
    FROM i JOIN telemetry_gpurollup1m r ON r.gpu_id = i.gpu_id
        AND r.minute >= date_trunc('minute', i.lo) AND r.minute < i.hi
    GROUP BY 1, 2, 3, 4
)
SELECT m.k, m.first_busy, m.last_busy,
       (SELECT max(r.{rise}_max) - min(r.{rise}_min) FROM telemetry_gpurollup1m r
         WHERE r.gpu_id = m.gpu_id AND r.minute >= date_trunc('minute', m.lo)
           AND r.minute < coalesce(m.first_busy, m.hi))
FROM marks m
"""


@dataclass(frozen=True)
class Activity:
    """When a GPU was busy within an interval: from `first_busy` to `last_busy` (None: never),
    how far the `rise` metric moved before it, and the tier read ("samples" or "1m")."""

    first_busy: datetime | None
    last_busy: datetime | None
    rise: float | None
    tier: str


def intervals_activity(
    intervals: Sequence[GpuInterval],
    *,
    busy: str,
    busy_at: float,
    rise: str,
    now: datetime,
) -> dict[Hashable, Activity]:
    """For each interval (lo <= t < hi here: a GPU held until hi is free at hi) with data:
    the first and last time `busy` reached `busy_at`, and the range of `rise` before the
    first (the whole interval when never busy). Intervals that begin while samples are kept
    read them (raw or compacted), at the sample; older ones the 1-minute rollup, at the
    minute (busy from the first busy minute's start to the last one's end); older than that
    rollup keeps, hourly cells cannot place minutes: those intervals are left out."""
    for name in (busy, rise):
        if name not in ROLLUP_METRICS:
            raise ValueError(f"not a rolled-up GPU metric: {name!r}")
    samples_since = tiers.SAMPLES.kept_since(now)
    minute_since = tiers.MINUTE.kept_since(now)
    recent = [i for i in intervals if i.lo >= samples_since]
    older = [i for i in intervals if minute_since <= i.lo < samples_since]
    out: dict[Hashable, Activity] = {}
    for tier, chosen in ((tiers.SAMPLES, recent), (tiers.MINUTE, older)):
        if not chosen:
            continue
        params = {**_interval_params(chosen), "at": busy_at}
        if tier is tiers.SAMPLES:
            gpus = sorted({i.gpu_id for i in chosen})
            lo, hi = min(i.lo for i in chosen), max(i.hi for i in chosen)
            source = samples_source(gpus, lo, hi, [busy, rise], index=True)
            sql = _RAW_ACTIVITY_SQL.format(
                intervals=_INTERVALS, source=source, busy=busy, rise=rise
            )
        else:
            sql = _ROLLUP_ACTIVITY_SQL.format(intervals=_INTERVALS, busy=busy, rise=rise)
        with connection.cursor() as cur:
            cur.execute(sql, params)
            for k, first, last, moved in cur.fetchall():
                out[chosen[k - 1].key] = Activity(first, last, moved, tier.key)
    return out


# --- Idle GPUs ---------------------------------------------------------------------------------

# For every interval: the newest rollup minute in which its GPU was busy (mean util at or above
# the threshold), found by walking the (gpu_id, minute) key backwards from its end, and the
# minutes with data after it. Before the 1-minute rollup's retention (`minute_kept`) the hourly
# rollup answers, for an interval with no busy minute kept: its newest hour in which any sample
# reached the threshold (the hour's max: an hour under it had no busy minute, so idle is never
# over-counted), and the hours with data after it, each counted in minutes (the first from the
# interval's start).
_IDLE_SQL = """
SELECT i.k, idle.minutes + coalesce(idle_h.minutes, 0), coalesce(idle_h.first, idle.first),
    coalesce(idle.last, idle_h.last)
FROM {intervals}
LEFT JOIN LATERAL (
    SELECT r.minute FROM telemetry_gpurollup1m r
    WHERE r.gpu_id = i.gpu_id
        AND r.minute >= greatest(date_trunc('minute', i.lo), %(minute_kept)s)
        AND r.minute <= %(hi)s AND r.minute <= i.hi
        AND r.gpu_util_sum >= %(busy)s * r.gpu_util_cnt AND r.gpu_util_cnt > 0
    ORDER BY r.minute DESC LIMIT 1
) busy ON true
JOIN LATERAL (
    SELECT count(*) AS minutes, min(r.minute) AS first, max(r.minute) AS last
    FROM telemetry_gpurollup1m r
    WHERE r.gpu_id = i.gpu_id AND r.gpu_util_cnt > 0 AND r.minute <= %(hi)s
        AND r.minute <= i.hi
        AND r.minute >= coalesce(
            busy.minute + interval '1 minute',
            greatest(date_trunc('minute', i.lo), %(minute_kept)s)
        )
) idle ON true
LEFT JOIN LATERAL (
    SELECT r.hour FROM telemetry_gpurollup1h r
    WHERE busy.minute IS NULL AND i.lo < %(minute_kept)s
        AND r.gpu_id = i.gpu_id AND r.hour >= date_trunc('hour', i.lo)
        AND r.hour < %(minute_kept)s AND r.gpu_util_cnt > 0 AND r.gpu_util_max >= %(busy)s
    ORDER BY r.hour DESC LIMIT 1
) busy_h ON true
LEFT JOIN LATERAL (
    SELECT sum(least(60, extract(epoch FROM r.hour + interval '1 hour'
            - greatest(r.hour, date_trunc('minute', i.lo))) / 60))::bigint AS minutes,
        greatest(min(r.hour), date_trunc('minute', i.lo)) AS first,
        max(r.hour) + interval '59 minutes' AS last
    FROM telemetry_gpurollup1h r
    WHERE busy.minute IS NULL AND i.lo < %(minute_kept)s
        AND r.gpu_id = i.gpu_id AND r.gpu_util_cnt > 0 AND r.hour < %(minute_kept)s
        AND r.hour >= coalesce(busy_h.hour + interval '1 hour', date_trunc('hour', i.lo))
) idle_h ON true
WHERE idle.minutes + coalesce(idle_h.minutes, 0) >= %(min_idle)s
"""


@dataclass(frozen=True)
class Idle:
    """How long a GPU has been idle at the end of its interval: the rollup minutes with data
    since it was last busy, the first and the last of them."""

    minutes: int
    since: datetime
    last: datetime


def intervals_idle(
    intervals: Sequence[GpuInterval],
    *,
    busy_util_pct: float,
    min_idle_minutes: int,
    now: datetime,
) -> dict[Hashable, Idle]:
    """The intervals whose GPU's utilization stayed under `busy_util_pct` for at least
    `min_idle_minutes` rollup minutes (minutes without data are not counted) since it was
    last busy, up to the interval's end. Idle time older than the 1-minute rollup's
    retention is read from the hourly rollup, at hour resolution."""
    if not intervals:
        return {}
    params = {
        **_interval_params(intervals),
        # A constant upper bound, with each interval's own, prunes the rollups' partitions.
        "hi": max(i.hi for i in intervals),
        "minute_kept": tiers.MINUTE.kept_since(now),
        "busy": busy_util_pct,
        "min_idle": min_idle_minutes,
    }
    with connection.cursor() as cur:
        cur.execute(_IDLE_SQL.format(intervals=_INTERVALS), params)
        rows = cur.fetchall()
    return {intervals[k - 1].key: Idle(minutes, first, last) for k, minutes, first, last in rows}
