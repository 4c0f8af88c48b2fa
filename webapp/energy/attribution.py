"""Energy attribution over hourly rows: pure arithmetic (no Django), so the report's parts
add up to its totals by construction.

Input: per (hour, job) GPU energy (job 0 = no job held the GPU), and per hour the cluster's
IT energy, PUE, grid intensity and market factor. Each hour's facility energy and CO2e is
shared among that hour's GPU energy in proportion to it: a job's facility energy is its GPU
energy times that hour's facility-per-GPU-joule ratio. Node energy of an hour in which no GPU
energy was recorded stays with the cluster ("unattributed"), so nothing is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class HourlyInputs:
    """Parallel per-hour arrays for the cluster (length H)."""

    gpu_j: np.ndarray  # all GPU energy of the hour (sum over jobs and idle)
    it_j: np.ndarray  # node IT energy (IPMI + model); falls back to gpu_j where no node rows
    pue: np.ndarray
    g_per_kwh: np.ndarray  # location-based intensity
    market_kg_per_kwh: np.ndarray  # contractual factor; NaN where none (= location-based)


@dataclass(frozen=True)
class Attributed:
    """Per job (in `jobs` order): GPU, facility energy (kWh) and CO2e (kg)."""

    jobs: np.ndarray  # job ids (0 = no job)
    gpu_kwh: np.ndarray
    facility_kwh: np.ndarray
    co2e_location_kg: np.ndarray
    co2e_market_kg: np.ndarray
    unattributed_facility_kwh: float
    unattributed_co2e_location_kg: float
    unattributed_co2e_market_kg: float


def hourly_facility(h: HourlyInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per hour: facility kWh, location- and market-based CO2e kg."""
    facility_kwh = h.it_j * h.pue / J_PER_KWH
    loc = facility_kwh * h.g_per_kwh / 1000.0
    market = np.where(np.isnan(h.market_kg_per_kwh), h.g_per_kwh / 1000.0, h.market_kg_per_kwh)
    return facility_kwh, loc, facility_kwh * market


def attribute(
    hour_idx: np.ndarray, job_ids: np.ndarray, gpu_j: np.ndarray, h: HourlyInputs
) -> Attributed:
    """Share each hour's facility energy and CO2e among the (hour, job) GPU energies."""
    fac, loc, mkt = hourly_facility(h)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_j = np.where(h.gpu_j > 0, 1.0 / h.gpu_j, 0.0)
    share = gpu_j * per_j[hour_idx]
    jobs, inv = np.unique(job_ids, return_inverse=True)
    n = len(jobs)
    attributed_hours = h.gpu_j > 0
    return Attributed(
        jobs=jobs,
        gpu_kwh=np.bincount(inv, weights=gpu_j, minlength=n) / J_PER_KWH,
        facility_kwh=np.bincount(inv, weights=share * fac[hour_idx], minlength=n),
        co2e_location_kg=np.bincount(inv, weights=share * loc[hour_idx], minlength=n),
        co2e_market_kg=np.bincount(inv, weights=share * mkt[hour_idx], minlength=n),
        unattributed_facility_kwh=float(fac[~attributed_hours].sum()),
        unattributed_co2e_location_kg=float(loc[~attributed_hours].sum()),
        unattributed_co2e_market_kg=float(mkt[~attributed_hours].sum()),
    )


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> float | None:
    total = float(weights.sum())
    return float((values * weights).sum() / total) if total > 0 else None
