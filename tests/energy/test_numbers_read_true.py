"""Energy figures a reader can trust: the share of GPU-hours with samples compares the hours
the rollup can account (it does not fall all hour long), the headline table gives each column
one unit, and the CSVs carry no binary float noise."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.core.cache import cache

from tests.energy import rig
from webapp.energy.daily import energy_daily_rows
from webapp.energy.report import kpis
from webapp.energy.selectors import energy_report

# A decimal with more than 6 places: what float noise (1.5800000000000003) looks like.
NOISE = re.compile(r"^-?\d+\.\d{7,}$")


def test_numbers_read_true(built, operator_client):
    cluster, lo, hi = built["cluster"], built["lo"], built["hi"]
    end = built["t0"] + timedelta(hours=rig.HOURS)  # the rig's samples end on the hour
    # Every ended hour had samples (but a few seconds of one GPU's outage): the same share at
    # ten past and at fifty past the next hour (before: 98 % falling to 86 %, the hour under
    # way expected but not accounted).
    early = energy_report(cluster, lo, hi, now=end + timedelta(minutes=10))
    late = energy_report(cluster, lo, hi, now=end + timedelta(minutes=50))
    assert early.completeness == late.completeness == pytest.approx(1.0, abs=0.001)
    assert early.expected_until == end
    # An hour later the silent hour that ended counts against it.
    assert energy_report(cluster, lo, hi, now=end + timedelta(minutes=70)).completeness < 1.0

    # The headline table: one energy unit and one mass unit for all its rows.
    rows = {k["key"]: k for k in kpis(late, None)}
    energy = {rows[k]["unit"] for k in ("gpu_kwh", "it_kwh", "facility_kwh", "idle_kwh",
                                         "wasted_kwh", "lost_kwh")}  # fmt: skip
    mass = {rows[k]["unit"] for k in ("co2e_location_kg", "co2e_market_kg", "embodied_kg")}
    assert energy == {"kWh"} and mass == {"kg"}  # the rig's 14 kWh is not 0.014 MWh

    # The daily export and the page's CSVs: no value with float noise, and the PUE is 1.58.
    daily = energy_daily_rows(cluster, lo, hi)
    noisy = [(r["team"], k, v) for r in daily for k, v in r.items() if NOISE.match(repr(v))]
    assert noisy == []
    assert {r["pue"] for r in daily} == {1.58}
    cache.clear()
    for table in ("days", "teams", "summary"):
        response = operator_client.get(
            f"/api/v1/energy/{table}.csv?cluster={cluster.name}&month={built['month']}"
        )
        assert response.status_code == 200, table
        cells = [c for row in csv.reader(io.StringIO(response.content.decode())) for c in row]
        assert [c for c in cells if NOISE.match(c)] == [], table
