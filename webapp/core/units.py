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
