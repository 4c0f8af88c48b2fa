"""One job's energy, its one home: the hours the energy rollup has accounted (GPU energy, the
job's share of facility energy and CO2e, as the monthly report counts them) and, since, its
live GPU energy from telemetry's counter deltas. `selectors.py` re-exports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.utils import timezone

from webapp.energy import attribution
from webapp.energy.carbon import METHOD_VERSION
from webapp.energy.selectors import HOUR, J_PER_KWH, _hour_index, hourly_inputs, rows_fetch
from webapp.jobs.models import Job
from webapp.jobs.selectors import (
    AllocationRow,
    allocation_intervals,
    job_allocations_for,
    job_read_budget,
    job_span,
)
from webapp.telemetry.selectors import GpuInterval, intervals_energy

# --- One job's energy: its accounted hours and, since, its live energy ------------------------


@dataclass(frozen=True)
class GpuEnergy:
    """One allocation's GPU energy: its accounted hours' (the rollup's, in joules) and its
    live energy since (counter deltas: the readings summed and the counter resets crossed)."""

    allocation: AllocationRow
    accounted_j: float = 0.0
    live_mj: float = 0.0
    readings: int = 0
    resets: int = 0

    @property
    def energy_mj(self) -> float:
        return self.accounted_j * 1000.0 + self.live_mj

    @property
    def kwh(self) -> float:
        return self.energy_mj / 1000.0 / J_PER_KWH


@dataclass(frozen=True)
class JobEnergy:
    """A job's energy, the one figure set its page shows: GPU energy of the hours the hourly
    rollup has accounted (up to `accounted_until`), with their facility energy and CO2e (the
    job's share of each hour's, as in the monthly report), plus the GPU energy since then,
    live from the GPUs' energy counters; `method` says both in one line, and `per_gpu`
    splits the GPU energy per allocation."""

    method: str
    per_gpu: list[GpuEnergy] = field(default_factory=list)
    accounted_until: datetime | None = None  # None: no hour accounted yet
    accounted_gpu_kwh: float = 0.0
    live_gpu_kwh: float = 0.0
    facility_kwh: float | None = None  # of the accounted hours (None: none accounted)
    co2e_location_kg: float | None = None
    co2e_market_kg: float | None = None
    gpu_kwh_measured: float = 0.0  # of the accounted hours, from the NVML counter
    method_version: str = METHOD_VERSION

    @property
    def gpu_kwh(self) -> float:
        return self.accounted_gpu_kwh + self.live_gpu_kwh

    @property
    def kwh(self) -> float:
        return self.gpu_kwh

    @property
    def resets(self) -> int:
        return sum(e.resets for e in self.per_gpu)


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
# A job's accounted GPU energy per GPU; per GPU and hour for the GPUs it held more than once.
_JOB_GPUS_SQL = """
SELECT gpu_id, NULL::timestamptz, sum(counter_j + integrated_j + model_j)
FROM energy_gpuenergyhour WHERE job_id = %(job)s AND NOT gpu_id = ANY(%(again)s) GROUP BY 1
UNION ALL
SELECT gpu_id, hour, counter_j + integrated_j + model_j
FROM energy_gpuenergyhour WHERE job_id = %(job)s AND gpu_id = ANY(%(again)s)
"""
_ACCOUNTED = (
    "the hourly energy rollup (NVML counter deltas, power integrated where the counter "
    "fails, a utilization model without either; facility energy with PUE, CO2e with the "
    "grid's intensity, method {version})"
)


def _accounted_per_allocation(job: Job, allocations: list[AllocationRow]) -> dict[int, float]:
    """The accounted GPU energy (J) per allocation: a GPU the job held once gives it all its
    rows; one it held again (a requeue) gives each hour's row to the allocation that held it
    then (the first, if several)."""
    by_gpu: dict[int, list[AllocationRow]] = {}
    for a in allocations:
        if a.gpu_id is not None:
            by_gpu.setdefault(a.gpu_id, []).append(a)
    again = [g for g, mine in by_gpu.items() if len(mine) > 1]
    out: dict[int, float] = {}
    for gpu_id, hour, j in rows_fetch(_JOB_GPUS_SQL, {"job": job.id, "again": again}):
        mine = by_gpu.get(gpu_id)
        if not mine:
            continue
        held = [
            a
            for a in mine
            if hour is None or (a.start < hour + HOUR and (a.end is None or a.end > hour))
        ]
        a = (held or mine)[0]
        out[a.id] = out.get(a.id, 0.0) + float(j)
    return out


def job_energy(
    job: Job, allocations: list[AllocationRow] | None = None, *, now: datetime | None = None
) -> JobEnergy:
    """The job's energy: the hours the hourly rollup has accounted (GPU energy, its share
    of each hour's facility energy and CO2e, as in the monthly report), and after the last
    of them the GPU energy live from its allocations' energy counters (telemetry's
    intervals_energy: counter deltas that survive resets, from samples or a rollup)."""
    now = now or timezone.now()
    if allocations is None:
        allocations = job_allocations_for(job)
    rows = rows_fetch(_JOB_HOURS_SQL, {"job": job.id, "cluster": job.cluster_id})
    accounted: dict[int, float] = {}
    parts: list[str] = []
    figures: dict = {}
    until = None
    if rows:
        lo = rows[0][0]
        until = rows[-1][0] + HOUR
        n_hours = int((rows[-1][0] - lo) / HOUR) + 1
        idx = _hour_index([r[0] for r in rows], lo)
        cluster_j = np.zeros(n_hours)
        cluster_j[idx] = [r[3] for r in rows]
        inputs, *_ = hourly_inputs(job.cluster, lo, n_hours, cluster_j, {"cluster": job.cluster_id})
        mine = np.array([r[2] for r in rows], dtype=np.float64)
        att = attribution.attribute(idx, np.ones(len(rows), dtype=np.int64), mine, inputs)
        figures = {
            "accounted_gpu_kwh": float(att.gpu_kwh[0]),
            "facility_kwh": float(att.facility_kwh[0]),
            "co2e_location_kg": float(att.co2e_location_kg[0]),
            "co2e_market_kg": float(att.co2e_market_kg[0]),
            "gpu_kwh_measured": sum(r[1] for r in rows) / J_PER_KWH,
        }
        accounted = _accounted_per_allocation(job, allocations)
        parts.append(
            f"hours up to {until:%Y-%m-%d %H:%M} UTC accounted by "
            + _ACCOUNTED.format(version=METHOD_VERSION)
        )
    # Live: each allocation after the accounted hours, up to its end (an open one: now).
    start, end = job_span(job, allocations, now)
    live_lo = max(start, until) if until else start
    intervals = [
        GpuInterval(i.key, i.gpu_id, max(i.lo, live_lo), i.hi)
        for i in allocation_intervals(allocations, now)
        if i.hi > live_lo
    ]
    live: dict = {}
    if intervals:
        method, live = intervals_energy(
            intervals, lo=live_lo, hi=end, now=now, budget=job_read_budget(), noun="allocation"
        )
        when = f"since {until:%H:%M} UTC, " if until else ""
        parts.append(f"{when}live (not yet accounted, board energy only, no PUE): {method}")
    per_gpu = []
    for a in allocations:
        e = live.get(a.id)
        if a.id in accounted or e is not None:
            per_gpu.append(
                GpuEnergy(
                    a,
                    accounted.get(a.id, 0.0),
                    e.energy_mj if e else 0.0,
                    e.readings if e else 0,
                    e.resets if e else 0,
                )
            )
    live_kwh = sum(e.live_mj for e in per_gpu) / 1000.0 / J_PER_KWH
    if not parts:
        parts.append("no energy yet: no hour accounted and no allocation with a known GPU")
    return JobEnergy("; ".join(parts), per_gpu, until, live_gpu_kwh=live_kwh, **figures)
