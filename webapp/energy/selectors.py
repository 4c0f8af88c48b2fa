"""Reads of the energy app: a cluster's energy, facility energy and CO2e over a period, with
its breakdowns (team, job type, outcome, jobs), idle / wasted / lost energy and data
completeness, all from the hourly rollups (never raw samples).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from webapp.energy import attribution
from webapp.energy.carbon import METHOD_VERSION, embodied_kg, intensity_hourly, pue_periods
from webapp.energy.formulas import SERVER_PER_GPU_POWER
from webapp.energy.models import MarketFactorPeriod
from webapp.failures.services import gpu_hours_lost
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job

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
    by_team: list[Line]
    by_type: list[Line]
    by_outcome: list[Line]
    by_user: list[Line]
    top_jobs: list[Line]
    idle_line: Line | None
    days: list[Day]
    cost: float | None
    method_version: str = METHOD_VERSION

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
_POWER_LIMIT_SQL = """
SELECT avg(l.power_limit_w) FROM telemetry_gpulatest l
JOIN fleet_gpu g ON g.id = l.gpu_id JOIN fleet_node n ON n.id = g.node_id
WHERE n.cluster_id = %(cluster)s
"""


def _fetch(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _hour_index(hours: list[datetime], lo: datetime) -> np.ndarray:
    return np.array([int((h - lo) / HOUR) for h in hours], dtype=np.int64)


def _expected_gpu_hours(cluster: Cluster, lo: datetime, hi: datetime, now: datetime):
    """GPU-hours the cluster's GPUs should have sampled in [lo, min(hi, now)); and the number
    of GPUs per node (for embodied carbon)."""
    params = {"cluster": cluster.id, "lo": lo, "hi": hi, "end": min(hi, now)}
    rows = _fetch(_EXPECTED_SQL, params)
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


def _hourly_inputs(cluster: Cluster, lo: datetime, n_hours: int, gpu_j_h: np.ndarray, params):
    """The cluster's per-hour IT energy, PUE, intensity and market factor over n_hours."""
    hi = lo + n_hours * HOUR
    ipmi_h = np.zeros(n_hours)
    model_h = np.zeros(n_hours)
    for i, ipmi, model in _fetch(_NODE_HOUR_SQL, {**params, "lo": lo, "hi": hi}):
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
    rows = _fetch(_HOUR_JOB_SQL, params)
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

    inputs, ipmi_h, periods, series, market_sources = _hourly_inputs(
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
    by_team = _lines(keys("team"), sub, cov_known, ones, total_fac)
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
                    "team": m["team"],
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
    limit = _fetch(_POWER_LIMIT_SQL, params)[0][0]

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


TREND_MONTHS = 12  # reference §8: "12 months of kWh and CO2e by team"
IDLE_KEY = "(no job: idle)"


@dataclass(frozen=True)
class TrendMonth:
    """One month of the trends: totals, PUE and intensity used, and facility energy and CO2e
    per team (the idle GPUs as IDLE_KEY). No data: zeros and None."""

    month: str
    it_kwh: float
    facility_kwh: float
    co2e_location_kg: float
    co2e_market_kg: float
    pue: float | None  # facility / IT of the month
    intensity_g_per_kwh: float | None  # energy-weighted, location-based
    intensity_sources: tuple[str, ...]
    team_kwh: dict[str, float]  # facility kWh
    team_co2e_kg: dict[str, float]  # location-based
    # Node energy of hours without GPU energy: in the month's total, in no team.
    unattributed_facility_kwh: float = 0.0

    @property
    def has_data(self) -> bool:
        return self.it_kwh > 0


@dataclass(frozen=True)
class Trends:
    months: list[TrendMonth]  # oldest first, ending with the report's month
    teams: list[str]  # by facility energy over the span, largest first; IDLE_KEY last
    method_version: str = METHOD_VERSION

    def table(self) -> list[tuple[TrendMonth, list[float | None]]]:
        """Per month, its facility kWh per team in `teams` order (None: the team used none)."""
        return [(m, [m.team_kwh.get(t) for t in self.teams]) for m in self.months]


# The span's GPU energy per hour and team (job-hour rows, a few per hour, joined to their job's
# team): tens of thousands of rows a year whatever the fleet's size.
_TREND_SQL = """
SELECT extract(epoch FROM e.hour)::bigint,
    CASE WHEN e.job_id IS NULL THEN %(idle)s
         WHEN j.id IS NULL THEN '(job deleted)'
         ELSE coalesce(nullif(j.team, ''), '(none)') END,
    sum(e.counter_j + e.integrated_j + e.model_j)
FROM energy_jobenergyhour e
LEFT JOIN jobs_job j ON j.id = e.job_id
WHERE e.cluster_id = %(cluster)s AND e.hour >= %(lo)s AND e.hour < %(hi)s
GROUP BY 1, 2
"""


def _month_starts(lo: datetime, months: int) -> list[datetime]:
    out = [lo]
    for _ in range(months - 1):
        out.insert(0, month_before(out[0])[0])
    return out


def energy_trends(cluster: Cluster, month: str, months: int = TREND_MONTHS) -> Trends:
    """The `months` months ending with `month`: facility kWh and location-based CO2e per team
    and month, each month's PUE and intensity, from the hourly rollups with the report's
    hourly arithmetic (a month's figures equal its report's)."""
    lo_last, hi = month_bounds(month)
    starts = _month_starts(lo_last, months)
    lo = starts[0]
    n_hours = int((hi - lo) / HOUR)
    rows = _fetch(_TREND_SQL, {"cluster": cluster.id, "lo": lo, "hi": hi, "idle": IDLE_KEY})
    team_names = sorted({r[1] for r in rows})
    team_idx = {t: i for i, t in enumerate(team_names)}
    hour_idx = np.array([(r[0] - int(lo.timestamp())) // 3600 for r in rows], dtype=np.int64)
    gpu_j = np.array([r[2] for r in rows], dtype=np.float64)
    teams_of_row = np.array([team_idx[r[1]] for r in rows], dtype=np.int64)
    gpu_j_h = np.bincount(hour_idx, weights=gpu_j, minlength=n_hours)
    inputs, _ipmi_h, _periods, series, _ms = _hourly_inputs(
        cluster, lo, n_hours, gpu_j_h, {"cluster": cluster.id}
    )
    fac_h, loc_h, mkt_h = attribution.hourly_facility(inputs)
    # Hours [bounds[m], bounds[m + 1]) are month m.
    bounds = [int((s - lo) / HOUR) for s in starts] + [n_hours]
    month_of_h = np.searchsorted(np.array(bounds[1:-1]), np.arange(n_hours), side="right")
    n_teams = max(1, len(team_names))
    key = month_of_h[hour_idx] * n_teams + teams_of_row
    att = attribution.attribute(hour_idx, key, gpu_j, inputs)
    unattributed_h = np.where(inputs.gpu_j > 0, 0.0, fac_h)
    per_month: list[tuple[dict, dict]] = [({}, {}) for _ in starts]
    for k, team_key in enumerate(att.jobs.tolist()):
        kwh, co2 = per_month[team_key // n_teams]
        kwh[team_names[team_key % n_teams]] = float(att.facility_kwh[k])
        co2[team_names[team_key % n_teams]] = float(att.co2e_location_kg[k])
    out = []
    for m, start in enumerate(starts):
        sl = slice(bounds[m], bounds[m + 1])
        it_j = float(inputs.it_j[sl].sum())
        fac = float(fac_h[sl].sum())
        out.append(
            TrendMonth(
                month=f"{start:%Y-%m}",
                it_kwh=it_j / J_PER_KWH,
                facility_kwh=fac,
                co2e_location_kg=float(loc_h[sl].sum()),
                co2e_market_kg=float(mkt_h[sl].sum()),
                pue=fac * J_PER_KWH / it_j if it_j else None,
                intensity_g_per_kwh=attribution.weighted_mean(inputs.g_per_kwh[sl], fac_h[sl]),
                intensity_sources=tuple(dict.fromkeys(h.source for h in series.hours[sl]))
                if it_j
                else (),
                team_kwh=per_month[m][0],
                team_co2e_kg=per_month[m][1],
                unattributed_facility_kwh=float(unattributed_h[sl].sum()),
            )
        )
    totals = {t: sum(x.team_kwh.get(t, 0.0) for x in out) for t in team_names}
    order = sorted((t for t in team_names if t != IDLE_KEY), key=lambda t: (-totals[t], t))
    if IDLE_KEY in totals:
        order.append(IDLE_KEY)
    return Trends(out, order)


# Reference §8's CSV: one row per day x team x project x job type, the rollup row's columns.
# Jobs carry no project (the wire schema has team, partition, qos, comment; no Slurm
# account), so `project` is empty until they do.
DAILY_COLUMNS = (
    "day",
    "site",
    "cluster",
    "team",
    "project",
    "job_type",
    "gpu_hours",
    "gpu_kwh",
    "gpu_kwh_measured",
    "it_kwh_measured",
    "it_kwh_estimated",
    "pue",
    "facility_kwh",
    "intensity_g_per_kwh",
    "intensity_source",
    "co2e_location_kg",
    "co2e_market_kg",
    "embodied_kg",
    "idle_kwh",
    "cost",
    "method_version",
    "computed_at",
)
_DAILY_SQL = """
SELECT extract(epoch FROM e.hour)::bigint,
    CASE WHEN e.job_id IS NULL THEN %(idle)s
         WHEN j.id IS NULL THEN '(job deleted)'
         ELSE coalesce(nullif(j.team, ''), '(none)') END,
    coalesce(j.job_type, ''),
    sum(e.counter_j), sum(e.counter_j + e.integrated_j + e.model_j), sum(e.covered_s),
    sum(CASE WHEN e.job_id IS NULL THEN e.counter_j + e.integrated_j + e.model_j
             ELSE e.idle_j END)
FROM energy_jobenergyhour e
LEFT JOIN jobs_job j ON j.id = e.job_id
WHERE e.cluster_id = %(cluster)s AND e.hour >= %(lo)s AND e.hour < %(hi)s
GROUP BY 1, 2, 3
"""


def energy_daily_rows(cluster: Cluster, lo: datetime, hi: datetime) -> list[dict]:
    """The period's energy per UTC day, team, project and job type (the idle GPUs as team
    IDLE_KEY), with the report's hourly arithmetic: each hour's IT energy (measured by IPMI
    and estimated), facility energy and CO2e shared by GPU energy. `idle_kwh`: GPU energy
    under the busy bound (allocated but idle; all of the idle GPUs' row). Rows and the
    period's unattributed node energy add up to the report's totals. NoEnergyData if none."""
    from django.conf import settings

    params = {"cluster": cluster.id, "lo": lo, "hi": hi, "idle": IDLE_KEY}
    rows = _fetch(_DAILY_SQL, params)
    if not rows:
        raise NoEnergyData(
            f"no energy data for cluster {cluster.name} from {lo:%Y-%m-%d} to {hi:%Y-%m-%d}"
        )
    n_hours = int(np.ceil((hi - lo) / HOUR))
    hour_idx = np.array([(r[0] - int(lo.timestamp())) // 3600 for r in rows], dtype=np.int64)
    arr = np.array([r[3:] for r in rows], dtype=np.float64)
    counter_j, gpu_j, covered_s, idle_j = arr.T
    gpu_j_h = np.bincount(hour_idx, weights=gpu_j, minlength=n_hours)
    inputs, ipmi_h, _periods, series, _ms = _hourly_inputs(
        cluster, lo, n_hours, gpu_j_h, {"cluster": cluster.id}
    )
    fac_h, loc_h, mkt_h = attribution.hourly_facility(inputs)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_j = np.where(inputs.gpu_j > 0, 1.0 / inputs.gpu_j, 0.0)
    share = gpu_j * per_j[hour_idx]
    day_of = hour_idx // 24
    keys = [(int(d), r[1], r[2]) for d, r in zip(day_of, rows, strict=True)]
    uniq = sorted(set(keys))
    index = {k: i for i, k in enumerate(uniq)}
    inv = np.array([index[k] for k in keys], dtype=np.int64)
    n = len(uniq)

    def total(weights: np.ndarray) -> np.ndarray:
        return np.bincount(inv, weights=weights, minlength=n)

    gpu_h = total(covered_s) / 3600
    gpu_kwh = total(gpu_j) / J_PER_KWH
    measured_kwh = total(counter_j) / J_PER_KWH
    ipmi_kwh = total(share * ipmi_h[hour_idx]) / J_PER_KWH
    model_kwh = total(share * (inputs.it_j - ipmi_h)[hour_idx]) / J_PER_KWH
    fac = total(share * fac_h[hour_idx])
    loc = total(share * loc_h[hour_idx])
    mkt = total(share * mkt_h[hour_idx])
    idle_kwh = total(idle_j) / J_PER_KWH
    sources = [h.source for h in series.hours]
    day_sources = {
        d: "; ".join(dict.fromkeys(sources[d * 24 : (d + 1) * 24])) for d in {k[0] for k in uniq}
    }
    per_node = _fetch(
        "SELECT count(*) FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
        " WHERE n.cluster_id = %(cluster)s GROUP BY n.id",
        params,
    )
    gpus_per_server = max(1, round(float(np.mean([c for (c,) in per_node])))) if per_node else 1
    tariff = settings.VIGIL_ENERGY_TARIFF_PER_KWH
    now = timezone.now()
    out = []
    for i, (d, team, job_type) in enumerate(uniq):
        it_kwh = ipmi_kwh[i] + model_kwh[i]
        out.append(
            {
                "day": (lo + timedelta(days=d)).date().isoformat(),
                "site": cluster.name,  # a cluster is one site (its PUE and grid zone)
                "cluster": cluster.name,
                "team": team,
                "project": "",
                "job_type": job_type,
                "gpu_hours": float(gpu_h[i]),
                "gpu_kwh": float(gpu_kwh[i]),
                "gpu_kwh_measured": float(measured_kwh[i]),
                "it_kwh_measured": float(ipmi_kwh[i]),
                "it_kwh_estimated": float(model_kwh[i]),
                "pue": float(fac[i] / it_kwh) if it_kwh else None,
                "facility_kwh": float(fac[i]),
                "intensity_g_per_kwh": float(loc[i] / fac[i] * 1000) if fac[i] else None,
                "intensity_source": day_sources[d],
                "co2e_location_kg": float(loc[i]),
                "co2e_market_kg": float(mkt[i]),
                "embodied_kg": embodied_kg(float(gpu_h[i]), gpus_per_server),
                "idle_kwh": float(idle_kwh[i]),
                "cost": float(fac[i]) * tariff if tariff else None,
                "method_version": METHOD_VERSION,
                "computed_at": now.isoformat(),
            }
        )
    return out


@dataclass(frozen=True)
class JobEnergy:
    gpu_kwh: float
    facility_kwh: float
    co2e_location_kg: float
    co2e_market_kg: float
    gpu_kwh_measured: float  # from the NVML counter
    method_version: str = METHOD_VERSION


_JOB_HOURS_SQL = """
WITH mine AS (
    SELECT hour, sum(counter_j) AS c, sum(counter_j + integrated_j + model_j) AS j
    FROM energy_jobenergyhour WHERE job_id = %(job)s GROUP BY hour
)
SELECT m.hour, m.c, m.j, (
    SELECT sum(counter_j + integrated_j + model_j) FROM energy_jobenergyhour e
    WHERE e.cluster_id = %(cluster)s AND e.hour = m.hour
) FROM mine m ORDER BY m.hour
"""


def job_energy(job: Job) -> JobEnergy | None:
    """A job's GPU and facility energy and CO2e from the rollups (None before any): its
    share of each hour's facility energy, as in the monthly report."""
    rows = _fetch(_JOB_HOURS_SQL, {"job": job.id, "cluster": job.cluster_id})
    if not rows:
        return None
    lo = rows[0][0]
    n_hours = int((rows[-1][0] - lo) / HOUR) + 1
    idx = _hour_index([r[0] for r in rows], lo)
    cluster_j = np.zeros(n_hours)
    cluster_j[idx] = [r[3] for r in rows]
    inputs, *_ = _hourly_inputs(job.cluster, lo, n_hours, cluster_j, {"cluster": job.cluster_id})
    mine = np.array([r[2] for r in rows], dtype=np.float64)
    att = attribution.attribute(idx, np.ones(len(rows), dtype=np.int64), mine, inputs)
    return JobEnergy(
        float(att.gpu_kwh[0]),
        float(att.facility_kwh[0]),
        float(att.co2e_location_kg[0]),
        float(att.co2e_market_kg[0]),
        sum(r[1] for r in rows) / J_PER_KWH,
    )


_TOTALS_GPU_SQL = """
SELECT cluster_id, extract(epoch FROM hour)::bigint, sum(counter_j), sum(integrated_j),
    sum(model_j)
FROM energy_jobenergyhour GROUP BY cluster_id, hour
"""


def energy_totals() -> list[dict]:
    """Per cluster, everything the rollup has accounted: GPU joules by method, IT joules
    (IPMI, model), facility joules and CO2e kg, with the report's hourly arithmetic."""
    rows = _fetch(_TOTALS_GPU_SQL, {})
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
        inputs, ipmi_h, *_ = _hourly_inputs(cluster, lo, n_hours, gpu_j_h, {"cluster": cluster.id})
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
    return _fetch("SELECT max(id) FROM energy_jobenergyhour", {})[0][0]
