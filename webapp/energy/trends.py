"""The 12 months before a report (reference section 8 "Trends"): facility kWh and CO2e by team
(the teams app's Team, energy/teams.py),
each month's PUE and the grid intensity used, from the hourly rollups with the monthly report's
hourly arithmetic (selectors.hourly_inputs), so a month of the trends equals its report."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from webapp.energy import attribution
from webapp.energy.carbon import METHOD_VERSION
from webapp.energy.selectors import (
    HOUR,
    J_PER_KWH,
    cached_for_months,
    hourly_inputs,
    month_before,
    month_bounds,
    months_ending,
    rows_fetch,
)
from webapp.energy.teams import JOB_DELETED, TeamResolver
from webapp.fleet.models import Cluster

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


# The span's GPU energy per hour and kind of row (0: a job's, 1: GPUs no job held, 2: a deleted
# job's) and the job fields the team rules read (job-hour rows, a few per hour, joined to their
# job): tens of thousands of rows a year whatever the fleet's size.
_TREND_SQL = """
SELECT extract(epoch FROM e.hour)::bigint,
    CASE WHEN e.job_id IS NULL THEN 1 WHEN j.id IS NULL THEN 2 ELSE 0 END,
    sum(e.counter_j + e.integrated_j + e.model_j),
    {team_columns}
FROM energy_jobenergyhour e
LEFT JOIN jobs_job j ON j.id = e.job_id
WHERE e.cluster_id = %(cluster)s AND e.hour >= %(lo)s AND e.hour < %(hi)s
GROUP BY 1, 2, {team_groups}
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
    resolver = TeamResolver()
    sql = _TREND_SQL.format(
        team_columns=resolver.sql_columns(),
        team_groups=", ".join(str(4 + k) for k in range(len(resolver.fields))),
    )
    rows = rows_fetch(sql, {"cluster": cluster.id, "lo": lo, "hi": hi})
    kinds = {1: IDLE_KEY, 2: JOB_DELETED}
    row_team = [kinds.get(r[1]) or resolver.name(r[3:]) for r in rows]
    team_names = sorted(set(row_team))
    team_idx = {t: i for i, t in enumerate(team_names)}
    hour_idx = np.array([(r[0] - int(lo.timestamp())) // 3600 for r in rows], dtype=np.int64)
    gpu_j = np.array([r[2] for r in rows], dtype=np.float64)
    teams_of_row = np.array([team_idx[t] for t in row_team], dtype=np.int64)
    gpu_j_h = np.bincount(hour_idx, weights=gpu_j, minlength=n_hours)
    inputs, _ipmi_h, _periods, series, _ms = hourly_inputs(
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


def energy_trends_cached(cluster: Cluster, month: str) -> Trends:
    """energy_trends for the pages and the report: computed once per version of the span's
    data (selectors.cached_for_months)."""
    months = months_ending(month, TREND_MONTHS)
    return cached_for_months("trends", cluster, months, lambda: energy_trends(cluster, month))
