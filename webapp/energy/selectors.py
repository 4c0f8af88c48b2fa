"""Reads of the energy app (the 12-month trends are in trends.py, the daily CSV rows in daily.py): a
cluster's energy, facility energy and CO2e over a period, with its breakdowns (team, job type,
outcome, jobs), idle / wasted / lost energy and data completeness, all from the hourly rollups
(never raw samples).

The pages read a month's report through `month_report_cached`: computed once per version of
the data it comes from (`data_version`: the months' rollup versions, the carbon inputs'
version and the settings the arithmetic reads), not on every page and CSV.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import numpy as np
from django.conf import settings as django_settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from webapp.energy import attribution
from webapp.energy.carbon import METHOD_VERSION, embodied_kg, intensity_hourly, pue_periods
from webapp.energy.formulas import SERVER_PER_GPU_POWER
from webapp.energy.models import EnergyMonthVersion, MarketFactorPeriod
from webapp.energy.teams import TeamResolver, teams_version
from webapp.failures.services import gpu_hours_lost
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job
from webapp.telemetry.selectors import cluster_power_limit_mean_w

HOUR = timedelta(hours=1)
J_PER_KWH = attribution.J_PER_KWH
TOP_JOBS = 10  # jobs listed by energy on the page and in the report
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class NoEnergyData(ValueError):
    """The period has no energy rows for the cluster."""


def month_bounds(text: str) -> tuple[datetime, datetime]:
    """'YYYY-MM' -> [first instant, first instant of the next month) in UTC."""
    m = _MONTH.match(text or "")
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ValueError(f"month must be YYYY-MM (e.g. 2026-11), got {text!r}")
    year, month = int(m.group(1)), int(m.group(2))
    lo = datetime(year, month, 1, tzinfo=UTC)
    hi = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return lo, hi


def month_before(lo: datetime) -> tuple[datetime, datetime]:
    prev = (lo - timedelta(days=1)).replace(day=1)
    return prev, lo


def outcome_of(state: str) -> str:
    """completed / cancelled / failed / node failure / running (reference §8's outcomes)."""
    if state in (JobState.RUNNING, JobState.PENDING):
        return "running"
    if state == JobState.NODE_FAIL:
        return "node failure"
    return JobState.final_group(state)


@dataclass(frozen=True)
class Line:
    """One row of a breakdown."""

    key: str
    gpu_hours: float
    gpu_kwh: float
    facility_kwh: float
    co2e_location_kg: float
    co2e_market_kg: float
    share: float  # of the period's facility energy
    jobs: int = 0
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Day:
    day: datetime
    gpu_kwh: float
    it_kwh: float
    facility_kwh: float
    co2e_location_kg: float
    pue: float | None
    mean_gpu_power_w: float | None


@dataclass(frozen=True)
class EnergyReport:
    cluster: Cluster
    lo: datetime
    hi: datetime
    gpu_kwh: float
    gpu_kwh_by_method: dict[str, float]
    it_kwh: float
    it_kwh_measured: float  # IPMI
    facility_kwh: float
    pue: float | None  # facility / IT over the period
    pue_periods: list
    co2e_location_kg: float
    co2e_market_kg: float
    market_source: str
    intensity_g_per_kwh: float | None  # energy-weighted
    intensity_sources: tuple[str, ...]
    embodied_kg: float
    gpu_hours: float  # GPU-hours with samples
    expected_gpu_hours: float
    allocated_gpu_hours: float
    idle_kwh: float  # GPUs no job held
    idle_gpu_hours: float
    wasted_kwh: float  # allocated, utilization under the busy bound
    wasted_gpu_hours: float
    lost_kwh: float  # failed jobs' work since their last checkpoint
    lost_gpu_hours: float
    unattributed_facility_kwh: float
    mean_gpu_power_w: float | None
    mean_power_limit_w: float | None
    by_team: list[Line]  # the teams app's Team ("(no team)" where no rule gives one)
    by_account: list[Line]  # the scheduler's free-text account (Job.team)
    by_project: list[Line]  # Slurm: the account; "(none)" for jobs without one
    by_type: list[Line]
    by_outcome: list[Line]
    by_user: list[Line]
    top_jobs: list[Line]
    idle_line: Line | None
    days: list[Day]
    cost: float | None
    method_version: str = METHOD_VERSION
    # The end of the hours the completeness counts (the current hour is not accounted yet).
    expected_until: datetime | None = None

    @property
    def completeness(self) -> float | None:
        """Share of the GPU-hours that have samples."""
        return self.gpu_hours / self.expected_gpu_hours if self.expected_gpu_hours else None

    @property
    def measured_share(self) -> float | None:
        """Share of GPU energy from the NVML counter (the rest: integrated or modelled)."""
        return self.gpu_kwh_by_method["counter"] / self.gpu_kwh if self.gpu_kwh else None

    @property
    def it_measured_share(self) -> float | None:
        return self.it_kwh_measured / self.it_kwh if self.it_kwh else None

    @property
    def kwh_per_gpu_hour(self) -> float | None:
        return self.gpu_kwh / self.gpu_hours if self.gpu_hours else None

    @property
    def idle_share(self) -> float | None:
        return self.idle_kwh / self.gpu_kwh if self.gpu_kwh else None

    @property
    def wasted_share(self) -> float | None:
        return self.wasted_kwh / self.gpu_kwh if self.gpu_kwh else None

    @property
    def lost_share(self) -> float | None:
        return self.lost_kwh / self.gpu_kwh if self.gpu_kwh else None


_HOUR_JOB_SQL = """
SELECT extract(epoch FROM hour)::bigint, coalesce(job_id, 0), counter_j, integrated_j,
    model_j, covered_s, idle_j, idle_s
FROM energy_jobenergyhour
WHERE cluster_id = %(cluster)s AND hour >= %(lo)s AND hour < %(hi)s
"""
_NODE_HOUR_SQL = """
SELECT (extract(epoch FROM hour - %(lo)s) / 3600)::int, sum(ipmi_j), sum(model_j)
FROM energy_nodeenergyhour
WHERE cluster_id = %(cluster)s AND hour >= %(lo)s AND hour < %(hi)s
GROUP BY 1
"""
# Per node: its GPUs, and the GPU-hours they should have sampled in [lo, end): from the
# hour each GPU was first seen or first accounted, whichever is earlier.
_EXPECTED_SQL = """
SELECT n.id, count(*), sum(greatest(0, extract(epoch FROM %(end)s - greatest(
    %(lo)s, date_trunc('hour', least(g.first_seen, coalesce(e.hour, g.first_seen)))
)) / 3600))
FROM fleet_gpu g
JOIN fleet_node n ON n.id = g.node_id
LEFT JOIN LATERAL (
    SELECT hour FROM energy_gpuenergyhour
    WHERE gpu_id = g.id AND hour >= %(lo)s AND hour < %(hi)s ORDER BY hour LIMIT 1
) e ON true
WHERE n.cluster_id = %(cluster)s
GROUP BY n.id
"""


def rows_fetch(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _hour_index(hours: list[datetime], lo: datetime) -> np.ndarray:
    return np.array([int((h - lo) / HOUR) for h in hours], dtype=np.int64)


def hours_ended(now: datetime) -> datetime:
    """The end of the last whole hour by `now`: the rollup accounts only hours that have
    ended, so a share of accounted hours compares like with like only up to here."""
    return now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _expected_gpu_hours(cluster: Cluster, lo: datetime, hi: datetime, now: datetime):
    """GPU-hours the cluster's GPUs should have sampled in the hours of [lo, hi) that have
    ended by `now` (the current hour is expected only once the rollup can account it); and
    the number of GPUs per node (for embodied carbon)."""
    params = {"cluster": cluster.id, "lo": lo, "hi": hi, "end": max(lo, min(hi, hours_ended(now)))}
    rows = rows_fetch(_EXPECTED_SQL, params)
    return sum(float(h or 0) for _n, _c, h in rows), {n: c for n, c, _h in rows}


def _lines(keys, att, covered_h, jobs_count, total_fac) -> list[Line]:
    acc: dict[str, list] = {}
    for i, key in enumerate(keys):
        row = acc.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0, 0])
        row[0] += covered_h[i]
        row[1] += att.gpu_kwh[i]
        row[2] += att.facility_kwh[i]
        row[3] += att.co2e_location_kg[i]
        row[4] += att.co2e_market_kg[i]
        row[5] += jobs_count[i]
    out = [
        Line(k, v[0], v[1], v[2], v[3], v[4], v[2] / total_fac if total_fac else 0.0, v[5])
        for k, v in acc.items()
    ]
    return sorted(out, key=lambda line: (-line.facility_kwh, line.key))


def hourly_inputs(cluster: Cluster, lo: datetime, n_hours: int, gpu_j_h: np.ndarray, params):
    """The cluster's per-hour IT energy, PUE, intensity and market factor over n_hours."""
    hi = lo + n_hours * HOUR
    ipmi_h = np.zeros(n_hours)
    model_h = np.zeros(n_hours)
    for i, ipmi, model in rows_fetch(_NODE_HOUR_SQL, {**params, "lo": lo, "hi": hi}):
        ipmi_h[i], model_h[i] = ipmi, model
    # Hours with GPU energy but no node row (rows written by other means): the node model's
    # plain form, 1.5 x GPU (reference §2).
    no_node = (ipmi_h + model_h == 0) & (gpu_j_h > 0)
    model_h[no_node] = SERVER_PER_GPU_POWER * gpu_j_h[no_node]
    pue_h = np.empty(n_hours)
    periods = pue_periods(cluster, lo, hi)
    for p in periods:
        a = int(np.floor((p.since - lo) / HOUR))
        b = int(np.ceil((p.until - lo) / HOUR)) if p.until else n_hours
        pue_h[max(a, 0) : b] = p.value
    series = intensity_hourly(cluster, lo, hi)
    g_h = np.array([x.g_per_kwh for x in series][:n_hours])
    # Contractual factors: the cluster's dated rows, read once and laid over the hours.
    market_h = np.full(n_hours, np.nan)
    market_sources = set()
    rows = MarketFactorPeriod.objects.filter(cluster=cluster, since__lt=hi).filter(
        Q(until__isnull=True) | Q(until__gt=lo)
    )
    for f in rows.order_by("since"):
        a = max(0, int(np.floor((f.since - lo) / HOUR)))
        b = n_hours if f.until is None else min(n_hours, int(np.ceil((f.until - lo) / HOUR)))
        if a < b:
            market_h[a:b] = f.kg_per_kwh
            market_sources.add(f.source)
    inputs = attribution.HourlyInputs(gpu_j_h, ipmi_h + model_h, pue_h, g_h, market_h)
    return inputs, ipmi_h, periods, series, market_sources


def energy_report(
    cluster: Cluster, lo: datetime, hi: datetime, now: datetime | None = None
) -> EnergyReport:
    """The cluster's energy over [lo, hi) (hours), from the hourly rollups; NoEnergyData if
    the period has none."""
    from django.conf import settings

    now = now or timezone.now()
    params = {"cluster": cluster.id, "lo": lo, "hi": hi}
    rows = rows_fetch(_HOUR_JOB_SQL, params)
    if not rows:
        raise NoEnergyData(
            f"no energy data for cluster {cluster.name} from {lo:%Y-%m-%d} to {hi:%Y-%m-%d}:"
            " no GPU samples were accounted in that period"
        )
    n_hours = int(np.ceil((hi - lo) / HOUR))
    arr = np.array(rows, dtype=np.float64)
    hour_idx = ((arr[:, 0] - lo.timestamp()) // 3600).astype(np.int64)
    job_ids = arr[:, 1].astype(np.int64)
    arr = arr[:, 2:]
    gpu_j = arr[:, 0] + arr[:, 1] + arr[:, 2]
    covered_s, idle_j, idle_s = arr[:, 3], arr[:, 4], arr[:, 5]
    gpu_j_h = np.bincount(hour_idx, weights=gpu_j, minlength=n_hours)
    covered_h = np.bincount(hour_idx, weights=covered_s, minlength=n_hours)

    inputs, ipmi_h, periods, series, market_sources = hourly_inputs(
        cluster, lo, n_hours, gpu_j_h, params
    )
    it_h = inputs.it_j
    g_h = inputs.g_per_kwh
    fac_h, loc_h, mkt_h = attribution.hourly_facility(inputs)
    att = attribution.attribute(hour_idx, job_ids, gpu_j, inputs)

    # Per job: covered GPU-hours, idle (allocated-but-idle) energy.
    inv = np.searchsorted(att.jobs, job_ids)
    job_cov_h = np.bincount(inv, weights=covered_s, minlength=len(att.jobs)) / 3600
    job_idle_j = np.bincount(inv, weights=idle_j, minlength=len(att.jobs))
    job_idle_s = np.bincount(inv, weights=idle_s, minlength=len(att.jobs))
    meta = {
        j["id"]: j
        for j in Job.objects.filter(id__in=[int(j) for j in att.jobs if j]).values(
            "id",
            "scheduler_id",
            "name",
            "user",
            "team",
            "partition",
            "qos",
            "project",
            "job_type",
            "state",
            "start_at",
            "end_at",
            "last_checkpoint_at",
            "gpus_requested",
        )
    }
    total_fac = float(fac_h.sum())
    is_job = att.jobs != 0
    jobs_idx = np.flatnonzero(is_job)
    known = [i for i in jobs_idx if int(att.jobs[i]) in meta]

    def keys(attr):
        return [meta[int(att.jobs[i])][attr] or "(none)" for i in known]

    sub = attribution.Attributed(
        att.jobs[known],
        att.gpu_kwh[known],
        att.facility_kwh[known],
        att.co2e_location_kg[known],
        att.co2e_market_kg[known],
        0.0,
        0.0,
        0.0,
    )
    ones = [1] * len(known)
    cov_known = job_cov_h[known]
    resolver = TeamResolver()
    team_of = {int(att.jobs[i]): resolver.job_name(meta[int(att.jobs[i])]) for i in known}
    by_team = _lines([team_of[int(att.jobs[i])] for i in known], sub, cov_known, ones, total_fac)
    by_account = _lines(keys("team"), sub, cov_known, ones, total_fac)
    by_project = _lines(keys("project"), sub, cov_known, ones, total_fac)
    by_user = _lines(keys("user"), sub, cov_known, ones, total_fac)
    by_type = _lines(keys("job_type"), sub, cov_known, ones, total_fac)
    by_outcome = _lines(
        [outcome_of(meta[int(att.jobs[i])]["state"]) for i in known],
        sub,
        cov_known,
        ones,
        total_fac,
    )
    job_lines = []
    for k, i in enumerate(known):
        m = meta[int(att.jobs[i])]
        job_lines.append(
            Line(
                m["scheduler_id"],
                cov_known[k],
                sub.gpu_kwh[k],
                sub.facility_kwh[k],
                sub.co2e_location_kg[k],
                sub.co2e_market_kg[k],
                sub.facility_kwh[k] / total_fac if total_fac else 0.0,
                1,
                {
                    "id": m["id"],
                    "name": m["name"],
                    "user": m["user"],
                    "team": team_of[m["id"]],
                    "account": m["team"],
                    "job_type": m["job_type"],
                    "outcome": outcome_of(m["state"]),
                },
            )
        )
    job_lines.sort(key=lambda line: (-line.facility_kwh, line.key))

    idle_line = None
    if not is_job.all():
        i0 = int(np.flatnonzero(~is_job)[0])
        idle_line = Line(
            "(no job: idle)",
            job_cov_h[i0],
            att.gpu_kwh[i0],
            att.facility_kwh[i0],
            att.co2e_location_kg[i0],
            att.co2e_market_kg[i0],
            att.facility_kwh[i0] / total_fac if total_fac else 0.0,
        )

    # Energy lost to failures: the reliability page's lost GPU-hours (work since the last
    # checkpoint) of failed jobs that ended in the period, at the job's own kWh per GPU-hour.
    lost_kwh = lost_h = 0.0
    for k, i in enumerate(known):
        m = meta[int(att.jobs[i])]
        if outcome_of(m["state"]) not in ("failed", "node failure") or not m["end_at"]:
            continue
        if not lo <= m["end_at"] < hi or cov_known[k] <= 0:
            continue
        job = Job(
            **{
                f: m[f]
                for f in ("id", "start_at", "end_at", "last_checkpoint_at", "gpus_requested")
            }
        )
        h = gpu_hours_lost(job) or 0.0
        lost_h += h
        lost_kwh += h * sub.gpu_kwh[k] / cov_known[k]

    expected_h, per_node = _expected_gpu_hours(cluster, lo, hi, now)
    gpus_per_server = max(1, round(np.mean(list(per_node.values())))) if per_node else 1
    total_cov_h = float(covered_s.sum()) / 3600
    by_method_j = arr[:, :3].sum(axis=0)
    limit = cluster_power_limit_mean_w(cluster.id)

    days = []
    for d in range(0, n_hours, 24):
        sl = slice(d, min(d + 24, n_hours))
        it_kwh = float(it_h[sl].sum()) / J_PER_KWH
        fac_kwh = float(fac_h[sl].sum())
        cov = float(covered_h[sl].sum())
        if cov == 0 and it_kwh == 0:
            continue
        days.append(
            Day(
                lo + d * HOUR,
                float(gpu_j_h[sl].sum()) / J_PER_KWH,
                it_kwh,
                fac_kwh,
                float(loc_h[sl].sum()),
                fac_kwh / it_kwh if it_kwh else None,
                float(gpu_j_h[sl].sum()) / cov if cov else None,
            )
        )
    it_kwh = float(it_h.sum()) / J_PER_KWH
    tariff = settings.VIGIL_ENERGY_TARIFF_PER_KWH
    return EnergyReport(
        cluster=cluster,
        lo=lo,
        hi=hi,
        gpu_kwh=float(gpu_j.sum()) / J_PER_KWH,
        gpu_kwh_by_method={
            "counter": by_method_j[0] / J_PER_KWH,
            "integrated": by_method_j[1] / J_PER_KWH,
            "model": by_method_j[2] / J_PER_KWH,
        },
        it_kwh=it_kwh,
        it_kwh_measured=float(ipmi_h.sum()) / J_PER_KWH,
        facility_kwh=total_fac,
        pue=total_fac / it_kwh if it_kwh else None,
        pue_periods=periods,
        co2e_location_kg=float(loc_h.sum()),
        co2e_market_kg=float(mkt_h.sum()),
        market_source=", ".join(sorted(market_sources))
        or "none set: market-based = location-based",
        intensity_g_per_kwh=attribution.weighted_mean(g_h, fac_h),
        intensity_sources=series.sources,
        embodied_kg=embodied_kg(total_cov_h, gpus_per_server),
        gpu_hours=total_cov_h,
        expected_gpu_hours=expected_h,
        expected_until=max(lo, min(hi, hours_ended(now))),
        allocated_gpu_hours=float(cov_known.sum()),
        idle_kwh=idle_line.gpu_kwh if idle_line else 0.0,
        idle_gpu_hours=idle_line.gpu_hours if idle_line else 0.0,
        wasted_kwh=float(job_idle_j[known].sum()) / J_PER_KWH,
        wasted_gpu_hours=float(job_idle_s[known].sum()) / 3600,
        lost_kwh=lost_kwh,
        lost_gpu_hours=lost_h,
        unattributed_facility_kwh=att.unattributed_facility_kwh,
        mean_gpu_power_w=float(gpu_j.sum() / covered_s.sum()) if covered_s.sum() else None,
        mean_power_limit_w=limit,
        by_team=by_team,
        by_account=by_account,
        by_project=by_project,
        by_type=by_type,
        by_outcome=by_outcome,
        by_user=by_user,
        top_jobs=job_lines[:TOP_JOBS],
        idle_line=idle_line,
        days=days,
        cost=total_fac * tariff if tariff else None,
    )


def month_report(cluster: Cluster, month: str, now: datetime | None = None):
    """(this month's report, the previous month's or None) for 'YYYY-MM'."""
    lo, hi = month_bounds(month)
    report = energy_report(cluster, lo, hi, now)
    try:
        previous = energy_report(cluster, *month_before(lo), now)
    except NoEnergyData:
        previous = None
    return report, previous


# --- The version of a month's data, and the cached report ------------------------------------

# A month that has not ended is read at a moving "now" (the GPU-hours its GPUs should have
# sampled so far): its report is kept for one energy rollup refresh (the beat's 300 s). A
# closed month's report changes only with its rollup or the carbon inputs, which change its
# key; the lifetime bounds what neither tracks (a job moved to another team).
REPORT_CACHE_OPEN_S = 300
REPORT_CACHE_CLOSED_S = 3600
INPUTS_VERSION_KEY = "vigil:energy:inputs-version"
# Bumped when what is cached changes shape: entries of an older code are never read.
CACHE_FORMAT = "1"

T = TypeVar("T")


def month_key(t: datetime) -> str:
    return f"{t.astimezone(UTC):%Y-%m}"


def months_ending(month: str, count: int) -> list[str]:
    """The `count` months ending with `month`, oldest first (ValueError on a bad month)."""
    lo, _hi = month_bounds(month)
    out = [lo]
    for _ in range(count - 1):
        out.insert(0, month_before(out[0])[0])
    return [month_key(t) for t in out]


def inputs_version() -> int:
    """The version of the report inputs outside the rollup (PUE, market factors, intensity,
    grid zones, power profiles): a fresh value when the cache lost it, never an old one."""
    version = cache.get(INPUTS_VERSION_KEY)
    if version is None:
        cache.add(INPUTS_VERSION_KEY, time.time_ns(), None)
        version = cache.get(INPUTS_VERSION_KEY)
    return int(version or 0)


def data_version(cluster: Cluster, months: list[str]) -> str:
    """A digest of everything a figure of `months` is computed from: each month's rollup
    version (EnergyMonthVersion, bumped when the rollup rewrites an hour of it), the carbon
    inputs' version, the settings the arithmetic reads and the method."""
    versions = dict(
        EnergyMonthVersion.objects.filter(cluster=cluster, month__in=months).values_list(
            "month", "version"
        )
    )
    parts = [
        CACHE_FORMAT,
        METHOD_VERSION,
        str(cluster.pk),
        *(f"{m}={versions.get(m, 0)}" for m in months),
        str(inputs_version()),
        repr(django_settings.VIGIL_BUSY_UTIL_PCT),
        repr(django_settings.VIGIL_ENERGY_TARIFF_PER_KWH),
        repr(django_settings.VIGIL_ENERGY_CURRENCY),
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:40]


def cache_lifetime_s(month: str, now: datetime | None = None) -> int:
    _lo, hi = month_bounds(month)
    if hi > (now or timezone.now()):
        return REPORT_CACHE_OPEN_S
    return int(getattr(django_settings, "VIGIL_ENERGY_REPORT_CACHE_S", REPORT_CACHE_CLOSED_S))


def cached_for_months(
    name: str, cluster: Cluster, months: list[str], compute: Callable[[], T]
) -> T:
    """compute() once per version of the months' data (the last month sets the lifetime);
    what it raises (NoEnergyData) is not kept."""
    # The teams' rules too: a rule edit regroups the months' energy by team at once.
    key = f"vigil:energy:{name}:{data_version(cluster, months)}:{teams_version()}"
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, cache_lifetime_s(months[-1]))
    return value


def month_report_cached(cluster: Cluster, month: str):
    """month_report for the pages, CSVs and the report: computed once per data version."""
    months = months_ending(month, 2)
    return cached_for_months("report", cluster, months, lambda: month_report(cluster, month))


_TOTALS_GPU_SQL = """
SELECT cluster_id, extract(epoch FROM hour)::bigint, sum(counter_j), sum(integrated_j),
    sum(model_j)
FROM energy_jobenergyhour GROUP BY cluster_id, hour
"""


def energy_totals() -> list[dict]:
    """Per cluster, everything the rollup has accounted: GPU joules by method, IT joules
    (IPMI, model), facility joules and CO2e kg, with the report's hourly arithmetic."""
    rows = rows_fetch(_TOTALS_GPU_SQL, {})
    if not rows:
        return []
    arr = np.array(rows, dtype=np.float64)
    out = []
    for cluster in Cluster.objects.filter(id__in={int(c) for c in arr[:, 0]}).order_by("name"):
        mine = arr[arr[:, 0] == cluster.id]
        first = float(mine[:, 1].min())
        lo = datetime.fromtimestamp(first, UTC)
        n_hours = int((mine[:, 1].max() - first) // 3600) + 1
        idx = ((mine[:, 1] - first) // 3600).astype(np.int64)
        by_method = mine[:, 2:5]
        gpu_j_h = np.bincount(idx, weights=by_method.sum(axis=1), minlength=n_hours)
        inputs, ipmi_h, *_ = hourly_inputs(cluster, lo, n_hours, gpu_j_h, {"cluster": cluster.id})
        fac, loc, mkt = attribution.hourly_facility(inputs)
        out.append(
            {
                "cluster": cluster.name,
                "gpu_j": dict(
                    zip(
                        ("counter", "integrated", "model"),
                        by_method.sum(axis=0).tolist(),
                        strict=True,
                    )
                ),
                "ipmi_j": float(ipmi_h.sum()),
                "model_j": float(inputs.it_j.sum() - ipmi_h.sum()),
                "facility_j": float(fac.sum()) * J_PER_KWH,
                "co2e_location_kg": float(loc.sum()),
                "co2e_market_kg": float(mkt.sum()),
            }
        )
    return out


def rollup_newest_id() -> int | None:
    """The newest job-hour row's id: it moves whenever any hour is (re)computed."""
    return rows_fetch("SELECT max(id) FROM energy_jobenergyhour", {})[0][0]
