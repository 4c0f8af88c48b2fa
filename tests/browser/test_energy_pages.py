"""Energy pages in a real Chromium: the cluster's month draws its ten figures (the 12-month
trends among them) and its tables, the daily CSV is asked for and its row appears, the printable
report lays out as five A4 sheets (the fourth: trends, the fifth: each team's months, which fits
at a site's forty teams) with its figures drawn; no console
errors, no request leaves the server. Data: the energy rig (tests/energy/rig.py), committed."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from tests.browser.figures import drawn_figures
from tests.energy.conftest import build_rig
from tests.energy.helpers import teams_named_as_accounts
from webapp.energy.models import EnergyExport
from webapp.energy.report import file_assets, report_team_months
from webapp.energy.selectors import month_report
from webapp.energy.trends import IDLE_KEY, TREND_MONTHS, TrendMonth, Trends, energy_trends

pytestmark = pytest.mark.browser


@pytest.fixture
def live_energy(transactional_db) -> dict:
    return build_rig()


def test_energy_page_draws_figures_and_tables(
    page, live_server, live_energy, operator_login, screenshot_dir, page_log
):
    month = live_energy["month"]
    teams_named_as_accounts("llm", "vision")  # a team is the teams app's Team
    r, _ = month_report(live_energy["cluster"], month)
    operator_login(f"/energy/?cluster=watt&month={month}")
    figures = drawn_figures(page)
    assert set(figures) == {
        "daily-energy",
        "daily-co2",
        "power",
        "by-team",
        "by-project",
        "by-type",
        "by-outcome",
        "trend-energy",
        "trend-co2",
        "trend-pue",
    }
    assert all(f["drawn"] for f in figures.values())
    # Trends: one bar per team and month (llm, vision, idle GPUs over 12 months).
    trends = energy_trends(live_energy["cluster"], month)
    assert figures["trend-energy"]["traces"] == len(trends.teams) == 3
    assert figures["trend-energy"]["points"] == 3 * TREND_MONTHS
    rows = page.locator("#trend-table tbody tr")
    assert rows.count() == TREND_MONTHS
    this = page.locator(f"#trend-table tr[data-month='{month}'] td")
    assert this.nth(1).inner_text() == f"{trends.months[-1].facility_kwh:.1f}"
    assert this.nth(4).inner_text() == f"{trends.months[-1].pue:.2f}"
    assert (
        page.locator("#trends a.csv").get_attribute("href").startswith("/api/v1/energy/trends.csv")
    )
    assert figures["by-team"]["points"] == 3  # llm, vision, idle GPUs
    assert page.locator("#gpu-kwh").inner_text() == f"{r.gpu_kwh:.1f} kWh"
    teams = page.locator("#team-table tbody tr")
    assert teams.count() == 3
    assert page.locator("#job-table tbody tr").count() == 3
    assert page.locator("#waste-table tr[data-key=lost] td").nth(1).inner_text() == (
        f"{r.lost_kwh:.1f}"
    )
    assert "Method version" in page.locator("#method").inner_text()
    page.screenshot(path=screenshot_dir / "energy-cluster.png", full_page=True)
    # Every breakdown table shows all its columns at the page's width (none cut off at the
    # right, none needing a scroll).
    assert figures["by-project"]["points"] == 3  # llm-7b, vit-ft, (none)
    assert page.locator("#project-table tbody tr").count() == 3
    for card in ("team-table", "project-table", "type-table", "outcome-table", "job-table"):
        table = page.locator(f"#{card}")
        box, holder = table.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
        assert box <= holder, f"{card}: {box} px wide in {holder} px"
        assert table.locator("thead th").last.is_visible()
    page.locator("#types").screenshot(path=screenshot_dir / "energy-types.png")
    page.locator("#projects").screenshot(path=screenshot_dir / "energy-projects.png")
    # The nav leads here, and the report link opens the printable report.
    assert page.locator("#nav-energy").count() == 1
    page.click("#report-link")
    page.wait_for_load_state("load")
    report_figures = drawn_figures(page)
    assert all(f["drawn"] for f in report_figures.values())
    assert page.locator("section.sheet").count() == 5
    assert set(report_figures) >= {"trend-energy", "trend-co2", "trend-pue"}
    assert page.locator("#report-trends tbody tr").count() == TREND_MONTHS
    assert page.locator("#report-completeness").inner_text().endswith("%")
    page.emulate_media(media="print")
    # Printed, each sheet fits its A4 page: no sheet taller than 273 mm (297 less 12 mm margins).
    heights = page.evaluate(
        "Array.from(document.querySelectorAll('section.sheet')).map(s => s.scrollHeight)"
    )
    assert all(h <= 273 / 25.4 * 96 + 1 for h in heights), heights
    page.screenshot(path=screenshot_dir / "energy-report.png", full_page=True)
    page.locator("#sheet-trend-teams").screenshot(path=screenshot_dir / "energy-report-teams.png")
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_daily_csv_is_asked_for_on_the_page(
    page, live_server, live_energy, operator_login, page_log
):
    month = live_energy["month"]
    operator_login(f"/energy/?cluster=watt&month={month}")
    assert "None yet" in page.locator("#export-table").inner_text()
    page.click("#export-button")
    page.wait_for_load_state("load")
    # No worker runs in this test: the row is listed, pending, with no link yet.
    export = EnergyExport.objects.get()
    row = page.locator(f"#export-table tr[data-export='{export.pk}']")
    assert row.get_attribute("data-status") == "pending"
    assert row.locator("a").count() == 0
    assert page.url.endswith("#exports")
    assert page_log.errors == []


def test_the_printed_team_table_of_forty_teams_fits_its_a4_sheet(page, tmp_path):
    # A real site's tens of teams with six-figure monthly kWh: the printed report's team table
    # (this month, the month before, the change, twelve months and their share) stays on the
    # sheet, its rows the 20 largest teams, the others as one row, and the idle GPUs.
    teams = [f"team-{n:02d}-with-a-long-name" for n in range(40)]
    months = [
        TrendMonth(f"2026-{m:02d}", 1.0, 1.0, 1.0, 1.0, 1.5, 400.0, (),
                   {t: 512_345.6 - n + (m == 12) * 51_234.5 for n, t in enumerate(teams)}
                   | {IDLE_KEY: 98_765.4}, {})
        for m in range(1, 13)
    ]  # fmt: skip
    t = report_team_months(Trends(months, [*teams, IDLE_KEY]), "2026-12")
    table = render_to_string("energy/includes/report_teams.html", {"t": t})
    assets = file_assets()
    (tmp_path / "report.html").write_text(
        f'<!DOCTYPE html><html><head><link rel="stylesheet" href="{assets["base_css"]}">'
        f'<link rel="stylesheet" href="{assets["css"]}"></head>'
        f'<body class="report"><section class="sheet">{table}</section></body></html>',
        encoding="utf-8",
    )
    page.goto((tmp_path / "report.html").as_uri())
    page.emulate_media(media="print")
    rows = page.locator("#report-trend-teams tbody tr")
    assert rows.count() == 22
    assert rows.nth(20).locator("td").first.inner_text() == "(20 other teams)"
    first = [c.inner_text() for c in rows.nth(0).locator("td").all()]
    # 512,345.6 kWh a month, 10% more in December; 12 months of the 40 teams' 122.9 GWh.
    total = 11 * 512_345.6 + 563_580.1
    grand = sum(12 * (512_345.6 - n) + 51_234.5 for n in range(40)) + 12 * 98_765.4
    assert first == [
        teams[0], "563,580.1", "512,345.6", "+10%", f"{total:,.1f}", f"{total / grand:.0%}"
    ]  # fmt: skip
    width, sheet, height = page.evaluate(
        "() => { const s = document.querySelector('section.sheet');"
        " return [s.querySelector('table').scrollWidth, s.clientWidth, s.scrollHeight]; }"
    )
    assert width <= sheet, f"{width} px of table on a {sheet} px sheet"
    assert height <= 273 / 25.4 * 96 + 1, height
