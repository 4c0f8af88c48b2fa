"""Energy pages in a real Chromium: the cluster's month draws its six figures and its tables,
the printable report lays out as three A4 sheets with its figures drawn; no console errors,
no request leaves the server. Data: the energy rig (tests/energy/rig.py), committed."""

from __future__ import annotations

import pytest

from tests.browser.figures import drawn_figures
from tests.energy.conftest import build_rig
from webapp.energy.selectors import month_report

pytestmark = pytest.mark.browser


@pytest.fixture
def live_energy(transactional_db) -> dict:
    return build_rig()


def test_energy_page_draws_figures_and_tables(
    page, live_server, live_energy, operator_login, screenshot_dir, page_log
):
    month = live_energy["month"]
    r, _ = month_report(live_energy["cluster"], month)
    operator_login(f"/energy/?cluster=watt&month={month}")
    figures = drawn_figures(page)
    assert set(figures) == {
        "daily-energy",
        "daily-co2",
        "power",
        "by-team",
        "by-type",
        "by-outcome",
    }
    assert all(f["drawn"] for f in figures.values())
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
    # The nav leads here, and the report link opens the printable report.
    assert page.locator("#nav-energy").count() == 1
    page.click("#report-link")
    page.wait_for_load_state("load")
    report_figures = drawn_figures(page)
    assert all(f["drawn"] for f in report_figures.values())
    assert page.locator("section.sheet").count() == 3
    assert page.locator("#report-completeness").inner_text().endswith("%")
    page.emulate_media(media="print")
    page.screenshot(path=screenshot_dir / "energy-report.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []
