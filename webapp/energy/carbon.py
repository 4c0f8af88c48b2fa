"""Reads for carbon accounting: PUE, grid intensity, market factors, node power profiles.

What the energy rollup and the monthly report call. Each answer is a frozen plain-data value
that names its source, so every figure can say which PUE and intensity it used; the
arithmetic is in `formulas.py` (re-exported here: `co2e_kg`, `embodied_kg`, `METHOD_VERSION`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Q

from webapp.energy import models as m
from webapp.energy.formulas import (
    DEFAULT_PUE,
    DEFAULT_PUE_SOURCE,
    GRID_TABLE,
    METHOD_VERSION,
    WORLD_G_PER_KWH,
    WORLD_SOURCE,
    GridRow,
    co2e_kg,
    embodied_kg,
    node_power_model_w,
    parse_grid_table,
    yearly_row,
)
from webapp.fleet.models import Cluster, Node

__all__ = [
    "METHOD_VERSION",
    "IntensityHour",
    "IntensitySeries",
    "MarketFactor",
    "Pue",
    "PuePeriod",
    "co2e_kg",
    "embodied_kg",
    "grid_zone_of",
    "intensity_hourly",
    "known_zones",
    "market_factor",
    "node_power_estimate_w",
    "pue_at",
    "pue_periods",
]

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Pue:
    value: float
    basis: str  # "measured" | "assumed"
    source: str


@dataclass(frozen=True)
class PuePeriod:
    """PUE over [since, until); until None = open-ended (still valid)."""

    value: float
    since: datetime
    until: datetime | None
    basis: str
    source: str


@dataclass(frozen=True)
class MarketFactor:
    kg_per_kwh: float
    since: datetime
    until: datetime | None
    source: str


@dataclass(frozen=True)
class IntensityHour:
    start: datetime  # UTC, on the hour
    g_per_kwh: float
    source: str  # "hourly:<dataset>", "yearly:<source> <year>", "site:<source>", "world:IEA 2019"


@dataclass(frozen=True)
class IntensitySeries:
    """Grid intensity for every hour of [lo, hi) of one zone, each hour with its source."""

    zone: str
    hours: tuple[IntensityHour, ...]

    def __iter__(self) -> Iterator[IntensityHour]:
        return iter(self.hours)

    def __len__(self) -> int:
        return len(self.hours)

    def g_per_kwh_at(self, at: datetime) -> float:
        """The intensity of the hour that holds `at` (KeyError outside the series)."""
        start = _floor_hour(at)
        i = int((start - self.hours[0].start) / HOUR) if self.hours else -1
        if not 0 <= i < len(self.hours):
            raise KeyError(f"{at.isoformat()} is outside the series")
        return self.hours[i].g_per_kwh

    @property
    def sources(self) -> tuple[str, ...]:
        """Distinct sources, in order of first use (for a report's method footnote)."""
        return tuple(dict.fromkeys(h.source for h in self.hours))

    @property
    def mean_g_per_kwh(self) -> float | None:
        """Unweighted mean over the hours (weight by energy for a real average)."""
        return sum(h.g_per_kwh for h in self.hours) / len(self.hours) if self.hours else None


# -- PUE ---------------------------------------------------------------------------------------


def _default_pue(cluster: Cluster) -> Pue:
    # The fleet cluster carries a plain PUE (default 1.58); nothing says it was measured.
    if cluster.pue == DEFAULT_PUE:
        return Pue(DEFAULT_PUE, m.PueBasis.ASSUMED, DEFAULT_PUE_SOURCE)
    return Pue(cluster.pue, m.PueBasis.ASSUMED, "cluster setting (fleet)")


def pue_at(cluster: Cluster, at: datetime) -> Pue:
    """The PUE valid at `at`: the dated table's row, else the cluster's default (assumed)."""
    row = (
        m.PuePeriod.objects.filter(cluster=cluster, since__lte=at)
        .filter(Q(until__isnull=True) | Q(until__gt=at))
        .first()
    )
    if row is None:
        return _default_pue(cluster)
    return Pue(row.value, row.basis, row.source)


def pue_periods(cluster: Cluster, lo: datetime, hi: datetime) -> list[PuePeriod]:
    """Periods covering [lo, hi) exactly, in order, clipped to it; gaps in the table are
    filled with the cluster's default PUE (assumed), so the caller never meets a hole."""
    if hi <= lo:
        return []
    rows = (
        m.PuePeriod.objects.filter(cluster=cluster, since__lt=hi)
        .filter(Q(until__isnull=True) | Q(until__gt=lo))
        .order_by("since")
    )
    default = _default_pue(cluster)
    out: list[PuePeriod] = []
    cursor = lo
    for r in rows:
        since = max(r.since, lo)
        until = hi if r.until is None else min(r.until, hi)
        if since > cursor:
            out.append(PuePeriod(default.value, cursor, since, default.basis, default.source))
        out.append(PuePeriod(r.value, since, until, r.basis, r.source))
        cursor = until
    if cursor < hi:
        out.append(PuePeriod(default.value, cursor, hi, default.basis, default.source))
    return out


# -- Grid intensity ----------------------------------------------------------------------------


@functools.cache
def grid_table() -> dict[str, list[GridRow]]:
    """The shipped yearly table (data/grid_intensity.csv), zone -> rows, preferred first."""
    with GRID_TABLE.open(newline="", encoding="utf-8") as f:
        return parse_grid_table(f)


def grid_zone_of(cluster: Cluster) -> str:
    """The cluster's grid zone: its carbon settings', else the fleet cluster's ("" if none)."""
    s = m.ClusterCarbonSettings.objects.filter(cluster=cluster).first()
    return ((s.grid_zone if s else "") or cluster.grid_zone).strip()


def known_zones() -> set[str]:
    """Zones an import may name: the shipped table's and those clusters use."""
    zones = set(grid_table())
    zones.update(z for z in Cluster.objects.values_list("grid_zone", flat=True) if z)
    zones.update(
        z for z in m.ClusterCarbonSettings.objects.values_list("grid_zone", flat=True) if z
    )
    return {z.strip().upper() for z in zones}


def _floor_hour(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError("naive datetime: give timezone-aware UTC times")
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def intensity_hourly(cluster: Cluster, lo: datetime, hi: datetime) -> IntensitySeries:
    """g CO2e/kWh for every hour starting in [floor(lo), hi), for the cluster's grid zone.

    Order of sources (reference §4): a per-site override; the imported hourly series; the
    yearly value of the zone or its country (shipped table); the world fallback, 475 g/kWh.
    """
    settings = m.ClusterCarbonSettings.objects.filter(cluster=cluster).first()
    zone = ((settings.grid_zone if settings else "") or cluster.grid_zone).strip()
    start = _floor_hour(lo)
    starts: list[datetime] = []
    t = start
    while t < hi:
        starts.append(t)
        t += HOUR
    if settings is not None and settings.intensity_override_g_per_kwh is not None:
        label = f"site:{settings.intensity_override_source}"
        value = settings.intensity_override_g_per_kwh
        return IntensitySeries(zone, tuple(IntensityHour(s, value, label) for s in starts))
    measured: dict[datetime, tuple[float, str]] = {}
    if zone and starts:
        for hour, g, dataset in m.IntensityHour.objects.filter(
            zone=zone.upper(), hour__gte=start, hour__lt=hi
        ).values_list("hour", "g_per_kwh", "dataset__name"):
            measured[hour.astimezone(UTC)] = (g, f"hourly:{dataset}")
    row = yearly_row(grid_table(), zone) if zone else None
    fallback = (row.g_per_kwh, row.label) if row else (WORLD_G_PER_KWH, WORLD_SOURCE)
    return IntensitySeries(
        zone, tuple(IntensityHour(s, *measured.get(s, fallback)) for s in starts)
    )


# -- Market-based factor -----------------------------------------------------------------------


def market_factor(cluster: Cluster, at: datetime) -> MarketFactor | None:
    """The contractual factor valid at `at`; None = none set (market-based = location-based,
    and the report says so)."""
    row = (
        m.MarketFactorPeriod.objects.filter(cluster=cluster, since__lte=at)
        .filter(Q(until__isnull=True) | Q(until__gt=at))
        .first()
    )
    if row is None:
        return None
    return MarketFactor(row.kg_per_kwh, row.since, row.until, row.source)


# -- Node power --------------------------------------------------------------------------------


def node_power_estimate_w(node: Node, gpu_power_w: float, cpu_util: float | None) -> float:
    """Modelled whole-server power (W) of a node without measured power, from its cluster's
    profile (longest matching hostname prefix); no profile: 1.5 x GPU power.

    `gpu_power_w` is the node's total GPU power (the sum over its GPUs), `cpu_util` the node
    row's percentage: a profile's CPU, memory and other power is per server, so passing one
    GPU's power would count them once per GPU.
    """
    profiles = m.NodePowerProfile.objects.filter(cluster_id=node.cluster_id)
    best = max(
        (p for p in profiles if node.hostname.startswith(p.hostname_prefix)),
        key=lambda p: len(p.hostname_prefix),
        default=None,
    )
    if best is None:
        return node_power_model_w(gpu_power_w, cpu_util)
    return node_power_model_w(
        gpu_power_w,
        cpu_util,
        cpu_tdp_w=best.cpu_tdp_w,
        cpu_sockets=best.cpu_sockets,
        memory_gb=best.memory_gb,
        other_w=best.other_w,
    )
