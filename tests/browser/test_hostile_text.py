"""Text from outside drawn as text in a real Chromium: Plotly reads <b>, <span style> and
<a href> in labels, legends and hover text as markup, so a team, a project or a job id that
holds them would draw a link or restyle a chart. The figures escape such text
(webapp/core/charts.py `plain`); Plotly then shows it as written."""

from __future__ import annotations

import time

import pytest

from tests.browser.figures import drawn_figures
from tests.energy.conftest import build_rig
from tests.energy.helpers import teams_named_as_accounts
from tests.failures.conftest import make_fleet
from webapp.jobs.models import Job

pytestmark = pytest.mark.browser

LINK = '<a href="https://example.org/phish">log in again</a>'
TEAM = f"<b>llm</b>{LINK}"
PROJECT = '<span style="font-size:60px">7b</span>'
JOB_ID = f"9{LINK}"


def _texts(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def _links(page) -> int:
    """Links Plotly drew inside the figures (it draws <a> elements for <a href> markup)."""
    return page.locator("[data-figure] svg a").count()


def test_energy_figures_draw_team_and_project_names_as_written(
    page, live_server, transactional_db, operator_login, screenshot_dir, page_log
):
    built = build_rig()
    Job.objects.filter(scheduler_id="1").update(team=TEAM, project=PROJECT)
    teams_named_as_accounts(TEAM)  # the team energy groups by is the teams app's Team
    operator_login(f"/energy/?cluster=watt&month={built['month']}")
    figures = drawn_figures(page)
    assert figures["by-team"]["drawn"] and figures["by-project"]["drawn"]
    assert TEAM in _texts(page, '[data-figure="by-team"] .ytick text')
    assert PROJECT in _texts(page, '[data-figure="by-project"] .ytick text')
    assert TEAM in _texts(page, '[data-figure="trend-energy"] .legendtext')
    # The trend's hover names the team by reference to its trace, as written too.
    trend = '[data-figure="trend-energy"]'
    page.locator(f"{trend} .trace.bars").first.locator(".point path").last.hover(force=True)
    page.wait_for_selector(f"{trend} .hoverlayer .hovertext")
    assert TEAM in page.locator(f"{trend} .hoverlayer").text_content()
    assert _links(page) == 0
    # The tables below the figures are Django's, escaped as ever.
    assert page.locator("#team-table tbody td", has_text=TEAM).count() == 1
    page.locator("#teams").screenshot(path=screenshot_dir / "hostile-energy-teams.png")
    assert page_log.errors == []


def test_the_failure_timeline_draws_a_job_id_as_written(
    page, live_server, transactional_db, operator_login, screenshot_dir, page_log
):
    fleet = make_fleet()
    end = float(int(time.time())) - 600
    fleet.run_job(JOB_ID, end - 3600, end, state="NODE_FAIL", nodes=("gpu-node-01",))
    operator_login("/failures/?lane=job")
    figures = drawn_figures(page)
    assert figures["timeline"]["drawn"] and figures["timeline"]["points"] == 1
    assert f"job {JOB_ID}" in _texts(page, '[data-figure="timeline"] .ytick text')
    assert _links(page) == 0
    page.screenshot(path=screenshot_dir / "hostile-timeline.png", full_page=True)
    assert page_log.errors == []
