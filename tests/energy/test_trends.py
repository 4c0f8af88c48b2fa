"""Reference §8's trends: 12 months of facility energy and CO2e by team, each month's PUE and
intensity, from the hourly rollups. A month of the trends equals that month's report (the same
hourly arithmetic), a past month is computed with the PUE valid then, and the CSV and JSON
carry the same numbers."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from tests.energy.helpers import teams_named_as_accounts
from webapp.energy.models import PuePeriod
from webapp.energy.selectors import energy_report, month_bounds
from webapp.energy.trends import IDLE_KEY, TREND_MONTHS, energy_trends

SHIFT = timedelta(days=91)  # the rig's hours moved about three months back: another month


def _copy_rig_back(shift: timedelta) -> None:
    """The rig's job-hour and node-hour rows again, `shift` earlier (an older month)."""
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO energy_jobenergyhour (cluster_id, hour, job_id, gpus, counter_j,"
            " integrated_j, model_j, covered_s, idle_j, idle_s)"
            " SELECT cluster_id, hour - %s, job_id, gpus, counter_j, integrated_j, model_j,"
            " covered_s, idle_j, idle_s FROM energy_jobenergyhour",
            [shift],
        )
        cur.execute(
            "INSERT INTO energy_nodeenergyhour (cluster_id, node_id, hour, ipmi_j, ipmi_s,"
            " model_j, gpu_j, computed_at)"
            " SELECT cluster_id, node_id, hour - %s, ipmi_j, ipmi_s, model_j, gpu_j, computed_at"
            " FROM energy_nodeenergyhour",
            [shift],
        )


@pytest.fixture
def two_months(built) -> dict:
    teams_named_as_accounts("llm", "vision")
    _copy_rig_back(SHIFT)
    old = f"{built['t0'] - SHIFT:%Y-%m}"
    old_lo, old_hi = month_bounds(old)
    # The old month's facility had a measured PUE; the current one has none (1.58 assumed).
    PuePeriod.objects.create(
        cluster=built["cluster"],
        since=old_lo,
        until=old_hi,
        value=1.2,
        basis="measured",
        source="BMS",
    )
    return {**built, "old": old, "old_lo": old_lo, "old_hi": old_hi}


def test_each_month_of_the_trends_equals_its_report(two_months):
    b = two_months
    t = energy_trends(b["cluster"], b["month"])
    assert len(t.months) == TREND_MONTHS and t.months[-1].month == b["month"]
    assert t.teams == ["llm", "vision", IDLE_KEY]
    months = {m.month: m for m in t.months}
    assert [m.month for m in t.months if m.has_data] == [b["old"], b["month"]]
    for month, lo, hi, pue in (
        (b["month"], b["lo"], b["hi"], 1.58),
        (b["old"], b["old_lo"], b["old_hi"], 1.2),
    ):
        r = energy_report(b["cluster"], lo, hi)
        m = months[month]
        assert m.pue == pytest.approx(pue, rel=1e-9)
        assert m.facility_kwh == pytest.approx(r.facility_kwh, rel=1e-9)
        assert m.co2e_location_kg == pytest.approx(r.co2e_location_kg, rel=1e-9)
        assert m.intensity_g_per_kwh == pytest.approx(r.intensity_g_per_kwh, rel=1e-9)
        assert m.intensity_sources == r.intensity_sources
        teams = {x.key: x.facility_kwh for x in r.by_team} | {IDLE_KEY: r.idle_line.facility_kwh}
        assert m.team_kwh == pytest.approx(teams, rel=1e-9)
        co2 = {x.key: x.co2e_location_kg for x in r.by_team}
        assert {k: v for k, v in m.team_co2e_kg.items() if k != IDLE_KEY} == pytest.approx(
            co2, rel=1e-9
        )
        # Teams, idle GPUs and the node energy of hours without GPU energy add up.
        assert sum(m.team_kwh.values()) + m.unattributed_facility_kwh == pytest.approx(
            m.facility_kwh, rel=1e-9
        )
    # Same energy, a lower PUE: the old month's facility energy is 1.2 / 1.58 of this one's.
    assert months[b["old"]].facility_kwh == pytest.approx(
        months[b["month"]].facility_kwh * 1.2 / 1.58, rel=1e-9
    )
    empty = next(m for m in t.months if not m.has_data)
    assert empty.facility_kwh == 0 and empty.pue is None and empty.team_kwh == {}


def test_trends_csv_and_json_carry_the_same_numbers(two_months, operator_client, capsys):
    b = two_months
    t = energy_trends(b["cluster"], b["month"])
    response = operator_client.get(
        reverse("energy_api:csv", args=["trends"]), {"cluster": "watt", "month": b["month"]}
    )
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    totals = {r["month"]: r for r in rows if r["team"] == "(all)"}
    assert len(totals) == TREND_MONTHS
    old = next(m for m in t.months if m.month == b["old"])
    assert float(totals[b["old"]]["facility_kwh"]) == pytest.approx(old.facility_kwh)
    assert float(totals[b["old"]]["pue"]) == pytest.approx(1.2)
    vision = next(r for r in rows if r["month"] == b["old"] and r["team"] == "vision")
    assert float(vision["facility_kwh"]) == pytest.approx(old.team_kwh["vision"])
    call_command("energy_report", cluster="watt", month=b["month"], format="json")
    data = json.loads(capsys.readouterr().out)
    assert [m["month"] for m in data["trends"]] == [m.month for m in t.months]
    assert data["trends"][-1]["facility_kwh_by_team"]["llm"] == pytest.approx(
        t.months[-1].team_kwh["llm"]
    )


def test_energy_page_and_report_show_the_trends(two_months, operator_client):
    b = two_months
    t = energy_trends(b["cluster"], b["month"])
    q = {"cluster": "watt", "month": b["month"]}
    response = operator_client.get(reverse("energy:cluster"), q)
    figures = response.context["figures"]
    energy = figures["trend-energy"]["data"]
    assert [trace["name"] for trace in energy] == t.teams
    llm = energy[0]
    assert llm["x"] == [m.month for m in t.months]
    assert llm["y"][-1] == pytest.approx(t.months[-1].team_kwh["llm"])
    pue = figures["trend-pue"]["data"][0]["y"]
    assert pue[-1] == pytest.approx(1.58) and 1.2 in [pytest.approx(x) for x in pue if x]
    html = response.content.decode()
    assert 'id="trend-table"' in html and f'data-month="{b["old"]}"' in html
    report = operator_client.get(reverse("energy:report"), q).content.decode()
    assert 'id="sheet-trends"' in report and 'id="report-trends"' in report
    # The report's team table: each team's kWh this month, the month before and over the months.
    table = report.split('id="report-trend-teams"', 1)[1].split("</table>", 1)[0]
    rows = dict(re.findall(r'<tr data-team="([^"]*)">(.*?)</tr>', table, re.S))
    assert list(rows) == t.teams
    by_month = {m.month: m.team_kwh for m in t.months}
    year, mon = (int(x) for x in b["month"].split("-"))
    before = f"{year - 1}-12" if mon == 1 else f"{year}-{mon - 1:02d}"
    for team in t.teams:
        cells = re.findall(r'<td class="num">([^<]*)</td>', rows[team])
        assert cells[0] == f"{by_month[b['month']][team]:,.1f}"
        assert cells[1] == (f"{by_month[before][team]:,.1f}" if team in by_month[before] else "")
        assert cells[3] == f"{sum(kwh.get(team, 0.0) for kwh in by_month.values()):,.1f}"
