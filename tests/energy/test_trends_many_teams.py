"""The trends at a real site's tens of teams: the stacked figures draw the largest teams and the
rest as one trace (a legend of forty names was a scroll box over the bars), and the page's
month table keeps its totals while a team × month table gives each team's facility kWh (a
column per team was 4,800 px in a 1,350 px card)."""

from __future__ import annotations

import re

from django.urls import reverse

from tests.energy.conftest import built  # noqa: F401 (a fixture)
from tests.energy.helpers import teams_named_as_accounts
from webapp.energy.figures import TREND_TEAMS, trend_energy_figure
from webapp.energy.trends import IDLE_KEY, TrendMonth, Trends, energy_trends


def _month(month: str, team_kwh: dict[str, float]) -> TrendMonth:
    total = sum(team_kwh.values())
    return TrendMonth(month, total / 1.58, total, total * 0.4, total * 0.4, 1.58, 400.0, (),
                      team_kwh, {k: v * 0.4 for k, v in team_kwh.items()})  # fmt: skip


def test_the_trend_figure_draws_the_largest_teams_and_the_rest_as_one():
    teams = [f"team-{n:02d}-with-a-long-name" for n in range(40)]
    months = [
        _month("2026-11", {t: 100.0 - n for n, t in enumerate(teams)} | {IDLE_KEY: 5.0}),
        _month("2026-12", {t: 50.0 for t in teams[:30]} | {IDLE_KEY: 7.0}),
    ]
    figure = trend_energy_figure(Trends(months, [*teams, IDLE_KEY]))
    names = [trace["name"] for trace in figure["data"]]
    assert names == [*teams[:TREND_TEAMS], "30 other teams", IDLE_KEY]
    other = figure["data"][TREND_TEAMS]["y"]
    assert other == [sum(100.0 - n for n in range(TREND_TEAMS, 40)), 50.0 * (30 - TREND_TEAMS)]
    # Every month's stack still adds up to its teams' facility kWh.
    for i, m in enumerate(months):
        assert sum(t["y"][i] for t in figure["data"]) == sum(m.team_kwh.values())


def test_the_page_gives_each_teams_kwh_by_month_in_a_table_of_its_own(built, operator_client):  # noqa: F811
    teams_named_as_accounts("llm", "vision")
    month = built["month"]
    html = operator_client.get(
        reverse("energy:cluster"), {"cluster": "watt", "month": month}
    ).content.decode()
    months_table = html.split('id="trend-table"', 1)[1].split("</table>", 1)[0]
    assert "llm kWh" not in months_table  # the month table's columns do not grow with teams
    team_table = html.split('id="trend-team-table"', 1)[1].split("</table>", 1)[0]
    t = energy_trends(built["cluster"], month)
    rows = dict(re.findall(r'<tr data-team="([^"]*)">(.*?)</tr>', team_table, re.S))
    assert list(rows) == t.teams
    for team in t.teams:
        cells = re.findall(r'<td class="num">([^<]*)</td>', rows[team])
        assert cells[-1] == f"{t.months[-1].team_kwh[team]:.1f}"
