"""GPU energy from the NVML counter with resets, gaps, duplicates and implausible jumps,
and the fallbacks for GPUs without a counter. Pure: no Django."""

from __future__ import annotations

import numpy as np
import pytest

from webapp.energy.accounting import (
    COUNTER,
    INTEGRATED,
    MISSING,
    MODEL,
    gpu_intervals,
    segment_sums,
    trapezoid_j,
)

STEP_S = 15.0
DAY_S = 86_400.0


def power_at(t: np.ndarray) -> np.ndarray:
    """A GPU whose draw swings between 80 and 380 W every ten minutes."""
    return 230.0 + 150.0 * np.sin(2 * np.pi * t / 600.0)


def energy_between(a: float, b: float) -> float:
    """The exact integral of power_at from a to b, in joules."""
    k = 2 * np.pi / 600.0
    return 230.0 * (b - a) - 150.0 / k * (np.cos(k * b) - np.cos(k * a))


@pytest.fixture
def day():
    """One day at 15 s: true energy, and a counter with everything that goes wrong."""
    ts = np.arange(0.0, DAY_S + STEP_S, STEP_S)
    counter_j = np.array([energy_between(0.0, t) for t in ts])
    # The driver reloads at 30,007 s (between two samples): the counter restarts at 0.
    reload_at = 30_007.0
    after = ts > reload_at
    counter_j[after] = [energy_between(reload_at, t) for t in ts[after]]
    counter_mj = np.round(counter_j * 1000.0)
    # An implausible jump: one reading 5 MJ high (a bad read), then back to normal.
    glitch = int(50_000 / STEP_S)
    counter_mj[glitch] += 5e9
    power = power_at(ts)
    # The collector was down for 20 minutes: no samples, the counter went on counting.
    gap = (ts > 60_000.0) & (ts < 61_200.0)
    ts, counter_mj, power = ts[~gap], counter_mj[~gap], power[~gap]
    # A batch delivered twice: 40 samples again, out of order at the end.
    dup = slice(2000, 2040)
    ts_all = np.concatenate([ts, ts[dup]])
    return {
        "ts": ts_all,
        "energy_mj": np.concatenate([counter_mj, counter_mj[dup]]),
        "power_w": np.concatenate([power, power[dup]]),
        "true_j": energy_between(0.0, DAY_S),
        "reload_at": reload_at,
        "glitch_t": glitch * STEP_S,
    }


def test_counter_with_reset_gap_duplicates_and_jump_gives_true_energy(day):
    iv = gpu_intervals(
        day["ts"], day["energy_mj"], day["power_w"], power_limit_w=np.full(len(day["ts"]), 400.0)
    )
    assert iv.total_j() == pytest.approx(day["true_j"], rel=1e-3)
    # Each sample counts once: one interval per distinct timestamp but the first.
    assert len(iv) == len(np.unique(day["ts"])) - 1
    # The reload and the glitch fell back to power integration, flagged; all else is counter.
    assert iv.reset.sum() == 2  # the reload, and the step back down after the glitch
    assert iv.implausible.sum() == 1
    fell_back = iv.t1[iv.method == INTEGRATED]
    assert len(fell_back) == 3
    assert any(
        t0 < day["reload_at"] <= t1
        for t0, t1 in zip(iv.t0[iv.reset], iv.t1[iv.reset], strict=False)
    )
    assert day["glitch_t"] in iv.t1[iv.implausible]
    # The gap was measured by the counter across it (a collector restart loses nothing).
    assert iv.gap.sum() == 1
    assert iv.method[iv.gap][0] == COUNTER
    by = iv.energy_by_method()
    assert by["integrated"] < 0.001 * by["counter"]
    assert by["model"] == 0


def test_gap_without_counter_is_not_interpolated_and_counts_against_completeness(day):
    ts = day["ts"][:-40]
    iv = gpu_intervals(ts, None, day["power_w"][:-40])
    assert iv.gap.sum() == 1
    assert iv.method[iv.gap][0] == MISSING and iv.energy_j[iv.gap][0] == 0
    assert (iv.t1 - iv.t0)[iv.covered].sum() == pytest.approx(DAY_S - 1200.0)
    # The energy outside the gap is still all there.
    assert iv.total_j() == pytest.approx(
        day["true_j"] - energy_between(60_000.0, 61_200.0), rel=1e-3
    )


def test_gpu_without_counter_integrates_power_flagged_and_matches_a_trapezoid():
    ts = np.arange(0.0, 3600.0 + STEP_S, STEP_S)
    power = power_at(ts)
    iv = gpu_intervals(ts, [None] * len(ts), list(power))
    assert (iv.method == INTEGRATED).all()
    assert iv.total_j() == pytest.approx(trapezoid_j(ts, power), rel=5e-3)
    assert iv.total_j() == pytest.approx(energy_between(0.0, 3600.0), rel=5e-3)
    assert iv.energy_by_method()["counter"] == 0


def test_gpu_without_counter_or_power_is_estimated_never_zero():
    ts = np.arange(0.0, 600.0 + STEP_S, STEP_S)
    util = np.where(ts < 300, 100.0, 0.0)
    iv = gpu_intervals(ts, None, None, util_pct=util)
    assert (iv.method == MODEL).all()
    # 300 s at the model's maximum (407 W) and 300 s at its idle (46 W), one mixed interval.
    assert iv.total_j() == pytest.approx(300 * 407 + 300 * 46, rel=0.05)
    # Nothing to go on at all: no energy and no coverage, rather than a measured 0.
    nothing = gpu_intervals(ts, None, None)
    assert (nothing.method == MISSING).all() and not nothing.covered.any()


def test_segments_split_energy_by_method_and_idle():
    ts = np.arange(0.0, 7200.0 + STEP_S, STEP_S)
    power = np.where(ts < 3600, 300.0, 60.0)
    counter = np.concatenate([[0.0], np.cumsum((power[1:] + power[:-1]) / 2 * STEP_S)]) * 1000
    counter[ts > 5400] = np.nan  # the counter stops answering in the last half hour
    iv = gpu_intervals(ts, counter, power)
    hour = (np.ceil(iv.t1 / 3600.0) - 1).astype(int)
    busy = power[1:] > 100
    seg = segment_sums(iv, hour, 2, busy=busy)
    # Hour 0: 239 intervals at 300 W and the one ending at 3600 s, when the draw fell to 60 W.
    assert seg.energy_j[0].tolist() == pytest.approx([239 * 300 * 15 + 180 * 15, 0, 0])
    # Hour 1: counter until 5400 s, then power integration, each 120 intervals at 60 W.
    assert seg.energy_j[1].tolist() == pytest.approx([120 * 60 * 15, 120 * 60 * 15, 0])
    # Idle (not busy) intervals: the one ending at 3600 s, and all of hour 1.
    assert seg.idle_s.tolist() == pytest.approx([15, 3600])
    assert seg.idle_j[1] == pytest.approx(60 * 3600)
    assert seg.covered_s.tolist() == pytest.approx([3600, 3600])
    assert seg.samples.tolist() == [240, 240]


def test_a_reset_with_nothing_to_integrate_keeps_the_counter_as_a_lower_bound():
    ts = np.array([0.0, 15.0, 30.0, 45.0])
    counter = np.array([9_000_000.0, 12_000_000.0, 1_500_000.0, 4_500_000.0])  # mJ; reload
    iv = gpu_intervals(ts, counter, None)
    assert iv.reset.tolist() == [False, True, False]
    assert (iv.method == COUNTER).all()
    # 3 kJ, then at least the 1.5 kJ counted since the reload, then 3 kJ.
    assert iv.energy_j.tolist() == [3000.0, 1500.0, 3000.0]
