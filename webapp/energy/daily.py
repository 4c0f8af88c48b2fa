"""Reference section 8's daily rows (one per UTC day x team x account x project x job type,
with the rollup row's columns), from the hourly rollups: what the energy CSV export writes, each
figure rounded to its unit's CSV resolution (core.units.CSV_DIGITS). The team is the teams app's
Team (energy/teams.py), the account the scheduler's free text it is usually matched on."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
from django.utils import timezone

from webapp.core.units import csv_round
from webapp.energy import attribution
from webapp.energy.carbon import METHOD_VERSION, embodied_kg
from webapp.energy.selectors import (
    HOUR,
    J_PER_KWH,
    NoEnergyData,
    hourly_inputs,
    rows_fetch,
)
from webapp.energy.teams import JOB_DELETED, TeamResolver
from webapp.energy.trends import IDLE_KEY
from webapp.fleet.models import Cluster

DAILY_COLUMNS = (
    "day",
    "site",
    "cluster",
    "team",
    "account",
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
# Per hour and kind of row (0: a job's, 1: GPUs no job held, 2: a deleted job's), project, job
# type and the job fields the team rules read ({team_columns}, the account first).
_DAILY_SQL = """
SELECT extract(epoch FROM e.hour)::bigint,
    CASE WHEN e.job_id IS NULL THEN 1 WHEN j.id IS NULL THEN 2 ELSE 0 END,
    CASE WHEN e.job_id IS NULL THEN '' ELSE coalesce(nullif(j.project, ''), '(none)') END,
    coalesce(j.job_type, ''),
    sum(e.counter_j), sum(e.counter_j + e.integrated_j + e.model_j), sum(e.covered_s),
    sum(CASE WHEN e.job_id IS NULL THEN e.counter_j + e.integrated_j + e.model_j
             ELSE e.idle_j END),
    {team_columns}
FROM energy_jobenergyhour e
LEFT JOIN jobs_job j ON j.id = e.job_id
WHERE e.cluster_id = %(cluster)s AND e.hour >= %(lo)s AND e.hour < %(hi)s
GROUP BY 1, 2, 3, 4, {team_groups}
"""


def _team_account(kind: int, values: tuple, resolver: TeamResolver) -> tuple[str, str]:
    """A row's team and account: the idle GPUs and deleted jobs by their marks in both."""
    if kind == 1:
        return IDLE_KEY, ""
    if kind == 2:
        return JOB_DELETED, ""
    return resolver.name(values), values[0] or "(none)"


def energy_daily_rows(cluster: Cluster, lo: datetime, hi: datetime) -> list[dict]:
    """The period's energy per UTC day, team, project and job type (the idle GPUs as team
    IDLE_KEY), with the report's hourly arithmetic: each hour's IT energy (measured by IPMI
    and estimated), facility energy and CO2e shared by GPU energy. `idle_kwh`: GPU energy
    under the busy bound (allocated but idle; all of the idle GPUs' row). Rows and the
    period's unattributed node energy add up to the report's totals. NoEnergyData if none."""
    from django.conf import settings

    params = {"cluster": cluster.id, "lo": lo, "hi": hi}
    resolver = TeamResolver()
    n_team = len(resolver.fields)
    sql = _DAILY_SQL.format(
        team_columns=resolver.sql_columns(),
        team_groups=", ".join(str(9 + k) for k in range(n_team)),
    )
    rows = rows_fetch(sql, params)
    if not rows:
        raise NoEnergyData(
            f"no energy data for cluster {cluster.name} from {lo:%Y-%m-%d} to {hi:%Y-%m-%d}"
        )
    n_hours = int(np.ceil((hi - lo) / HOUR))
    hour_idx = np.array([(r[0] - int(lo.timestamp())) // 3600 for r in rows], dtype=np.int64)
    arr = np.array([r[4:8] for r in rows], dtype=np.float64)
    counter_j, gpu_j, covered_s, idle_j = arr.T
    gpu_j_h = np.bincount(hour_idx, weights=gpu_j, minlength=n_hours)
    inputs, ipmi_h, _periods, series, _ms = hourly_inputs(
        cluster, lo, n_hours, gpu_j_h, {"cluster": cluster.id}
    )
    fac_h, loc_h, mkt_h = attribution.hourly_facility(inputs)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_j = np.where(inputs.gpu_j > 0, 1.0 / inputs.gpu_j, 0.0)
    share = gpu_j * per_j[hour_idx]
    day_of = hour_idx // 24
    keys = [
        (int(d), *_team_account(r[1], r[8:], resolver), r[2], r[3])
        for d, r in zip(day_of, rows, strict=True)
    ]
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
    per_node = rows_fetch(
        "SELECT count(*) FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
        " WHERE n.cluster_id = %(cluster)s GROUP BY n.id",
        params,
    )
    gpus_per_server = max(1, round(float(np.mean([c for (c,) in per_node])))) if per_node else 1
    tariff = settings.VIGIL_ENERGY_TARIFF_PER_KWH
    now = timezone.now()
    out = []
    for i, (d, team, account, project, job_type) in enumerate(uniq):
        it_kwh = ipmi_kwh[i] + model_kwh[i]
        out.append(
            {
                "day": (lo + timedelta(days=d)).date().isoformat(),
                "site": cluster.name,  # a cluster is one site (its PUE and grid zone)
                "cluster": cluster.name,
                "team": team,
                "account": account,
                "project": project,
                "job_type": job_type,
                "gpu_hours": csv_round(gpu_h[i], "h"),
                "gpu_kwh": csv_round(gpu_kwh[i], "kwh"),
                "gpu_kwh_measured": csv_round(measured_kwh[i], "kwh"),
                "it_kwh_measured": csv_round(ipmi_kwh[i], "kwh"),
                "it_kwh_estimated": csv_round(model_kwh[i], "kwh"),
                "pue": csv_round(fac[i] / it_kwh, "ratio") if it_kwh else None,
                "facility_kwh": csv_round(fac[i], "kwh"),
                "intensity_g_per_kwh": csv_round(loc[i] / fac[i] * 1000, "g_per_kwh")
                if fac[i]
                else None,
                "intensity_source": day_sources[d],
                "co2e_location_kg": csv_round(loc[i], "kg"),
                "co2e_market_kg": csv_round(mkt[i], "kg"),
                "embodied_kg": csv_round(embodied_kg(float(gpu_h[i]), gpus_per_server), "kg"),
                "idle_kwh": csv_round(idle_kwh[i], "kwh"),
                # Money to the hundredth of the currency's unit.
                "cost": round(float(fac[i]) * tariff, 2) if tariff else None,
                "method_version": METHOD_VERSION,
                "computed_at": now.isoformat(),
            }
        )
    return out
