"""The energy pages' tables, declared once for the page's header and the CSV
(`webapp/core/tables.py`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from webapp.core.tables import Column, Table
from webapp.core.units import CSV_DIGITS
from webapp.energy import report


@dataclass(frozen=True)
class InMonth:
    """A row of a month's table with what the CSV repeats on each line: the cluster, the
    month and the method version of the arithmetic."""

    cluster: str
    month: str
    method_version: str
    row: Any


def in_month(cluster: str, month: str, method_version: str, rows: Iterable) -> Iterator[InMonth]:
    return (InMonth(cluster, month, method_version, x) for x in rows)


# A month's days (`energy/cluster.html`), rows InMonth of a day.
DAYS = Table(
    Column("cluster", csv_only=True),
    Column("day", "Day (UTC)", lambda d: d.row.day.date().isoformat()),
    Column("gpu_kwh", "GPU kWh", "row.gpu_kwh", num=True, digits=CSV_DIGITS["kwh"]),
    Column("it_kwh", "IT kWh", "row.it_kwh", num=True, digits=CSV_DIGITS["kwh"]),
    Column("facility_kwh", "Facility kWh", "row.facility_kwh", num=True, digits=CSV_DIGITS["kwh"]),
    Column(
        "co2e_location_kg", "CO2e kg", "row.co2e_location_kg", num=True, digits=CSV_DIGITS["kg"]
    ),
    Column("pue", "PUE", "row.pue", num=True, digits=CSV_DIGITS["ratio"]),
    Column(
        "mean_gpu_power_w", "Mean GPU W", "row.mean_gpu_power_w", num=True, digits=CSV_DIGITS["w"]
    ),
    Column("method_version", csv_only=True),
)

# The headline figures beside last month's (`energy/includes/kpis.html`, whose value column
# is headed by the month), rows InMonth of a kpis() dict.
SUMMARY = Table(
    Column("cluster", csv_only=True),
    Column("month", csv_only=True),
    Column("figure", "Figure", "row.label"),
    Column("unit", accessor="row.unit", csv_only=True),
    Column("value", "This month", "row.value", num=True, digits=CSV_DIGITS["ratio"]),
    Column(
        "previous_month", "Previous month", "row.previous", num=True, digits=CSV_DIGITS["ratio"]
    ),
    Column("change", "Change", "row.change", num=True, digits=CSV_DIGITS["ratio"]),
)

# A breakdown of the month's energy (`energy/includes/lines.html`, one include for teams,
# projects, job types, outcomes, users and top jobs: the page heads the key column with what
# it lists), rows InMonth of a line.
LINES = Table(
    Column("cluster", csv_only=True),
    Column("month", csv_only=True),
    Column("key", "Key", "row.key"),
    Column("gpu_hours", "GPU-hours", "row.gpu_hours", num=True, digits=CSV_DIGITS["h"]),
    Column("gpu_kwh", "GPU kWh", "row.gpu_kwh", num=True, digits=CSV_DIGITS["kwh"]),
    Column("facility_kwh", "Facility kWh", "row.facility_kwh", num=True, digits=CSV_DIGITS["kwh"]),
    Column(
        "co2e_location_kg",
        "CO2e kg (location)",
        "row.co2e_location_kg",
        num=True,
        digits=CSV_DIGITS["kg"],
    ),
    Column(
        "co2e_market_kg",
        "CO2e kg (market)",
        "row.co2e_market_kg",
        num=True,
        digits=CSV_DIGITS["kg"],
    ),
    Column("share_of_facility", "Share", "row.share", num=True, digits=CSV_DIGITS["ratio"]),
    Column("method_version", csv_only=True),
)


def _positional(header: Sequence[str]) -> Table:
    """A CSV-only table over the row tuples report.py writes in its header's order (the
    monthly report's CSV, also written by `manage.py energy_report`)."""
    return Table(*(Column(key, accessor=itemgetter(i)) for i, key in enumerate(header)))


# The whole report, long form (CSV only: the page shows its sections as tables above).
REPORT = _positional(report.CSV_HEADER)

# The months' trend, long form with one row per team (CSV only: the page pivots the teams
# into columns, `energy/includes/trends.html`).
TRENDS = _positional(report.TRENDS_CSV_HEADER)
