"""GPU energy from NVML's cumulative counter, with power integration and a power model as
fallbacks: pure functions over numpy arrays (no Django), docs/energy-carbon.md §1.

One GPU's samples become *intervals* (t_prev, t_now]: each interval gets an energy in joules
and the method that produced it. The counter is trusted when it moved forward at a plausible
rate; otherwise the interval's power readings are integrated (trapezoid); without power, a
utilization model estimates it; with none of these the interval has no energy and counts
against data completeness. An interval is never given 0 J for want of a counter (CodeCarbon
issue #1316 reported 0 kWh on GPUs without one).

Counter resets (driver reload, GPU reset), gaps (a collector restart, a lost batch),
duplicate deliveries and implausible jumps are handled interval by interval, so the energy of
the intervals around them is neither lost nor counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Method codes of an interval, stored as small integers in arrays and named in reports.
COUNTER, INTEGRATED, MODEL, MISSING = 0, 1, 2, 3
METHODS: tuple[str, ...] = ("counter", "integrated", "model")

# Counter rate above this multiple of the enforced power limit is implausible: reference §1
# (suggested bound; A100s peak near 1.5x TDP).
PLAUSIBLE_LIMIT_FACTOR = 2.0
# A step longer than this many sampling intervals is a gap: no interpolation across it
# (reference §1). A counter delta across it is still a measurement, so it is kept.
GAP_INTERVALS = 3
# Power model when a GPU reports neither counter nor power: P = idle + util x (max - idle).
# Unknown-GPU defaults: Cloud Carbon Footprint A100 min/max 46 / 407 W (reference §1).
MODEL_IDLE_W = 46.0
MODEL_MAX_W = 407.0
# Power limit assumed when a sample names none, for the plausibility bound only: Green
# Algorithms' unknown-GPU default TDP, 200 W, would flag real A100 draw, so the A100 SXM TDP
# (400 W, reference §7) is used.
DEFAULT_LIMIT_W = 400.0


@dataclass(frozen=True)
class Intervals:
    """One GPU's intervals, ordered by end time. Arrays are parallel, one entry per interval."""

    t0: np.ndarray  # start, epoch seconds (float64)
    t1: np.ndarray  # end, epoch seconds
    energy_j: np.ndarray  # float64; 0 where method is MISSING (and then not counted)
    method: np.ndarray  # int8: COUNTER, INTEGRATED, MODEL or MISSING
    reset: np.ndarray  # bool: the counter went backwards in this interval
    implausible: np.ndarray  # bool: the counter moved faster than the bound allows
    gap: np.ndarray  # bool: longer than GAP_INTERVALS sampling intervals

    def __len__(self) -> int:
        return len(self.t1)

    @property
    def covered(self) -> np.ndarray:
        """Intervals with an energy: not a gap, or a gap the counter measured across."""
        return self.method != MISSING

    def energy_by_method(self) -> dict[str, float]:
        return {
            name: float(self.energy_j[self.method == code].sum())
            for code, name in enumerate(METHODS)
        }

    def total_j(self) -> float:
        return float(self.energy_j[self.covered].sum())


def _nan(values) -> np.ndarray:
    """Values as float64 with None as NaN (an NVML field the GPU does not report)."""
    return np.asarray(values, dtype=np.float64)


def dedupe(ts: np.ndarray) -> np.ndarray:
    """Indices that sort `ts` and keep the first of each repeated timestamp (a redelivered
    batch or a replayed spool brings the same sample twice)."""
    order = np.argsort(ts, kind="stable")
    sorted_ts = ts[order]
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = sorted_ts[1:] != sorted_ts[:-1]
    return order[keep]


def nominal_step_s(ts: np.ndarray) -> float:
    """The sampling interval: the median step (robust to gaps and to a few odd steps)."""
    if len(ts) < 2:
        return float("nan")
    return float(np.median(np.diff(ts)))


def gpu_intervals(
    ts,
    energy_mj=None,
    power_w=None,
    *,
    power_limit_w=None,
    util_pct=None,
    step_s: float | None = None,
    model_idle_w: float = MODEL_IDLE_W,
    model_max_w: float = MODEL_MAX_W,
) -> Intervals:
    """Intervals between consecutive samples of one GPU (`ts` in epoch seconds, any order,
    duplicates allowed). `energy_mj` is the NVML counter, `power_w` the board power,
    `power_limit_w` the enforced limit, `util_pct` gpu_util; each may hold None/NaN where the
    GPU did not report it. `step_s` is the sampling interval (the median step if not given).

    The first sample only opens the first interval: pass the last sample before a window
    first to account the interval that crosses into it.
    """
    ts = _nan(ts)
    keep = dedupe(ts)
    ts = ts[keep]
    n = len(ts)

    def col(values) -> np.ndarray:
        if values is None:
            return np.full(n, np.nan)
        return _nan(values)[keep]

    e, p, lim, u = col(energy_mj), col(power_w), col(power_limit_w), col(util_pct)
    if n < 2:
        empty = np.zeros(0)
        flags = np.zeros(0, dtype=bool)
        return Intervals(empty, empty, empty, np.zeros(0, np.int8), flags, flags, flags)
    step = step_s if step_s else nominal_step_s(ts)
    t0, t1 = ts[:-1], ts[1:]
    dt = t1 - t0
    gap = dt > GAP_INTERVALS * step * (1 + 1e-9)

    # Counter: forward, both ends known, at most PLAUSIBLE_LIMIT_FACTOR x the limit.
    de_j = (e[1:] - e[:-1]) / 1000.0
    have_counter = ~np.isnan(de_j)
    reset = have_counter & (de_j < 0)
    limit = np.where(np.isnan(lim[1:]), lim[:-1], lim[1:])
    limit = np.where(np.isnan(limit), DEFAULT_LIMIT_W, limit)
    with np.errstate(invalid="ignore", divide="ignore"):
        implausible = have_counter & ~reset & (de_j / dt > PLAUSIBLE_LIMIT_FACTOR * limit)
    counter_ok = have_counter & ~reset & ~implausible

    # Trapezoid over power, one end standing in for a missing other end.
    p0, p1 = p[:-1], p[1:]
    p0f, p1f = np.where(np.isnan(p0), p1, p0), np.where(np.isnan(p1), p0, p1)
    integ_j = (p0f + p1f) / 2.0 * dt
    have_power = ~np.isnan(integ_j)

    # Model from utilization (the end sample's, else the start's).
    uu = np.where(np.isnan(u[1:]), u[:-1], u[1:])
    model_j = (model_idle_w + np.clip(uu, 0, 100) / 100.0 * (model_max_w - model_idle_w)) * dt
    have_model = ~np.isnan(model_j)

    method = np.full(n - 1, MISSING, dtype=np.int8)
    energy = np.zeros(n - 1)
    # Across a gap only the counter measures anything; power or a model would interpolate.
    fallback = ~counter_ok & ~gap
    use_model = fallback & ~have_power & have_model
    use_integ = fallback & have_power
    method[use_model], energy[use_model] = MODEL, model_j[use_model]
    method[use_integ], energy[use_integ] = INTEGRATED, integ_j[use_integ]
    method[counter_ok], energy[counter_ok] = COUNTER, de_j[counter_ok]
    # A reset across a gap, or with nothing to integrate: the counter since the reload is a
    # lower bound, better than nothing (reference §1).
    lower = reset & (gap | (~have_power & ~have_model)) & ~np.isnan(e[1:])
    method[lower], energy[lower] = COUNTER, e[1:][lower] / 1000.0
    return Intervals(t0, t1, energy, method, reset, implausible, gap)


def trapezoid_j(ts, power_w) -> float:
    """Plain trapezoid of power over time, in joules (the integrator's reference, §1)."""
    ts, p = _nan(ts), _nan(power_w)
    return float(np.sum((p[1:] + p[:-1]) / 2.0 * np.diff(ts)))


@dataclass(frozen=True)
class Segments:
    """Interval energy summed into segments (hours x allocations), by method."""

    energy_j: np.ndarray  # (segments, 3): counter, integrated, model
    covered_s: np.ndarray  # seconds with an energy
    idle_j: np.ndarray  # energy of intervals whose utilization was under the busy bound
    idle_s: np.ndarray
    samples: np.ndarray  # intervals ending in the segment (with or without energy)


def segment_sums(
    iv: Intervals, segment: np.ndarray, count: int, busy: np.ndarray | None = None
) -> Segments:
    """Sum intervals into `count` segments: `segment[i]` is interval i's segment (-1 drops
    it); `busy[i]` False marks an idle interval (util under the busy bound)."""
    keep = segment >= 0
    seg = segment[keep]
    method = iv.method[keep]
    energy = iv.energy_j[keep]
    dt = (iv.t1 - iv.t0)[keep]
    covered = method != MISSING
    by_method = np.zeros((count, len(METHODS)))
    for code in range(len(METHODS)):
        sel = method == code
        by_method[:, code] = np.bincount(seg[sel], weights=energy[sel], minlength=count)
    covered_s = np.bincount(seg[covered], weights=dt[covered], minlength=count)
    idle = np.zeros(len(seg), dtype=bool) if busy is None else ~busy[keep] & covered
    idle_j = np.bincount(seg[idle], weights=energy[idle], minlength=count)
    idle_s = np.bincount(seg[idle], weights=dt[idle], minlength=count)
    samples = np.bincount(seg, minlength=count)
    return Segments(by_method, covered_s, idle_j, idle_s, samples)
