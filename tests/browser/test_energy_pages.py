"""Energy pages in a real Chromium: the cluster's month draws its ten figures (the 12-month
trends among them) and its tables, the daily CSV is asked for and its row appears, the printable
report lays out as four A4 sheets (the fourth: trends) with its figures drawn; no console
errors, no request leaves the server. Data: the energy rig (tests/energy/rig.py), committed."""

from __future__ import annotations

import pytest

from tests.browser.figures import drawn_figures
from tests.energy.conftest import build_rig
from tests.energy.helpers import teams_named_as_accounts
from webapp.energy.models import EnergyExport
from webapp.energy.selectors import month_report
from webapp.energy.trends import TREND_MONTHS, energy_trends

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
    assert page.locator("section.sheet").count() == 4
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
