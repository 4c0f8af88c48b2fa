"""Unit conversions, defined once; names say what and in which unit."""

from __future__ import annotations

from datetime import UTC, datetime

GIB = 2**30  # bytes in a GiB

# NVML's energy counter is in millijoules: 1 kWh = 3.6e6 J = 3.6e9 mJ.
MJ_PER_KWH = 3.6e9
MJ_PER_J = 1000  # millijoules in a joule


def mj_to_kwh(energy_mj: float) -> float:
    return energy_mj / MJ_PER_KWH


def mj_to_joules(energy_mj: float) -> float:
    """NVML's millijoule counter in joules, the unit Prometheus names (`_joules`)."""
    return energy_mj / MJ_PER_J


def epoch_to_utc(ts: float | None) -> datetime | None:
    """A wire timestamp (seconds since the epoch) as a timezone-aware UTC datetime."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


def iso_utc(ts: datetime | None, timespec: str = "auto") -> str | None:
    """ISO 8601 in UTC with an explicit +00:00 offset (None stays None), for JSON, CSV and
    log lines (`timespec="seconds"`, as a kernel or scheduler prints them)."""
    return None if ts is None else ts.astimezone(UTC).isoformat(timespec=timespec)


# --- One unit per table column -----------------------------------------------------------------

# (unit, factor from the stored unit, digits shown, the largest value from which it is used):
# a table picks one row of these for all its energy (stored in kWh) or all its masses (kg),
# from its largest value, so no column mixes MWh with kWh or t with kg.
ENERGY_UNITS: tuple[tuple[str, float, int, float], ...] = (
    ("MWh", 1e-3, 3, 1000.0),
    ("kWh", 1.0, 1, 0.0),
)
MASS_UNITS: tuple[tuple[str, float, int, float], ...] = (
    ("t", 1e-3, 3, 1000.0),
    ("kg", 1.0, 1, 0.0),
)


def unit_for(
    values: list[float | None], units: tuple[tuple[str, float, int, float], ...]
) -> tuple[str, float, int]:
    """(unit, factor, digits) of `units` for a column holding `values` (stored unit)."""
    largest = max((abs(v) for v in values if v is not None), default=0.0)
    for unit, factor, digits, above in units:
        if largest >= above:
            return unit, factor, digits
    unit, factor, digits, _ = units[-1]
    return unit, factor, digits


# What a CSV value is rounded to, per unit: finer than anything a reader compares, coarse
# enough that binary float noise (1.5800000000000003) never shows. kWh to the milliwatt-hour,
# kg to the milligram, hours to the millisecond, PUE and ratios to 1e-6, W to the milliwatt.
CSV_DIGITS: dict[str, int] = {"kwh": 6, "kg": 6, "h": 6, "ratio": 6, "w": 3, "g_per_kwh": 3}


def csv_round(value: float | None, unit: str) -> float | None:
    """`value` rounded to its unit's CSV resolution (CSV_DIGITS); None stays None."""
    if value is None:
        return None
    return round(float(value), CSV_DIGITS[unit])
