"""Energy by team: the energy page, its CSVs, the daily CSV and the trends group by the teams
app's Team (the rules' answer), not by the scheduler's free-text account, which stays a column
of its own. Two accounts one team owns read as one team row, equal to the rollup tables' sum."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.db import connection
from django.urls import reverse

from webapp.energy.daily import energy_daily_rows
from webapp.energy.selectors import J_PER_KWH, month_report
from webapp.energy.trends import IDLE_KEY, energy_trends
from webapp.teams.models import Team, TeamRule

# The rig's jobs: alice (account llm), bob and carol (account vision).
_ROLLUP_SQL = """
SELECT sum(e.counter_j + e.integrated_j + e.model_j), sum(e.covered_s)
FROM energy_jobenergyhour e JOIN jobs_job j ON j.id = e.job_id
WHERE e.cluster_id = %s AND j."user" = ANY(%s)
"""


def _teams() -> None:
    """research owns both accounts; carol's jobs are evals' by a user rule read first."""
    research = Team.objects.create(name="research")
    evals = Team.objects.create(name="evals")
    TeamRule.objects.create(order=1, field="user", pattern="carol", team=evals)
    TeamRule.objects.create(order=2, field="team", pattern="llm", team=research)
    TeamRule.objects.create(order=3, field="team", pattern="vision", team=research)


def _rollup(cluster_id: int, users: list[str]) -> tuple[float, float]:
    """GPU kWh and GPU-hours of these users' jobs, summed straight from the rollup table."""
    with connection.cursor() as cur:
        cur.execute(_ROLLUP_SQL, [cluster_id, users])
        j, s = cur.fetchone()
    return j / J_PER_KWH, s / 3600


def _row_cells(html: str, table_id: str) -> dict[str, list[str]]:
    """Each row of one table on the page: its data-key and the text of its number cells."""
    table = re.search(rf'<table class="data" id="{table_id}">(.*?)</table>', html, re.S)
    assert table, table_id
    rows = re.findall(r'<tr data-key="([^"]*)">(.*?)</tr>', table.group(1), re.S)
    return {k: re.findall(r'<td class="num">([^<]*)</td>', cells) for k, cells in rows}


def test_two_accounts_of_one_team_are_one_team_row(outsider_client, operator_client, built):
    cluster, month = built["cluster"], built["month"]
    url = reverse("energy:cluster")
    # Read once before the rules exist: the page must not keep the grouping it cached then.
    before = outsider_client.get(url, {"month": month}).content.decode()
    assert "llm" not in _row_cells(before, "team-table")
    _teams()
    research_kwh, research_h = _rollup(cluster.id, ["alice", "bob"])
    evals_kwh, _ = _rollup(cluster.id, ["carol"])
    assert research_kwh > 0 and evals_kwh > 0

    response = outsider_client.get(url, {"month": month})
    html = response.content.decode()
    figure = response.context["figures"]["by-team"]
    assert figure["layout"]["title"]["text"] == "Facility kWh by team"  # its unit, stated
    assert figure["data"][0]["y"][:2] == ["research", "evals"]
    teams = _row_cells(html, "team-table")
    assert set(teams) == {"research", "evals"}  # the idle GPUs: a row of their own, unmatched
    # GPU-hours, then GPU kWh, as the page rounds them.
    assert teams["research"][:2] == [f"{research_h:.1f}", f"{research_kwh:.1f}"]
    assert teams["evals"][1] == f"{evals_kwh:.1f}"
    assert set(_row_cells(html, "account-table")) == {"llm", "vision"}

    q = {"cluster": cluster.name, "month": month}

    def csv_rows(table: str) -> dict[str, dict]:
        response = operator_client.get(reverse("energy_api:csv", args=[table]), q)
        return {x["key"]: x for x in csv.DictReader(io.StringIO(response.content.decode()))}

    by_key = csv_rows("teams")
    assert set(by_key) == {"research", "evals", IDLE_KEY}
    assert float(by_key["research"]["gpu_kwh"]) == pytest.approx(research_kwh, abs=1e-3)
    accounts = csv_rows("accounts")
    assert set(accounts) == {"llm", "vision"}
    assert sum(float(x["gpu_kwh"]) for x in accounts.values()) == pytest.approx(
        research_kwh + evals_kwh, abs=2e-3
    )

    daily = energy_daily_rows(cluster, built["lo"], built["hi"])
    research = [x for x in daily if x["team"] == "research"]
    assert {x["account"] for x in research} == {"llm", "vision"}
    assert sum(x["gpu_kwh"] for x in research) == pytest.approx(research_kwh, abs=1e-2)
    assert {(x["team"], x["account"]) for x in daily if x["team"] != "research"} == {
        ("evals", "vision"),
        (IDLE_KEY, ""),
    }

    r, _ = month_report(cluster, month)
    t = energy_trends(cluster, month)
    assert t.teams == ["research", "evals", IDLE_KEY]
    line = next(x for x in r.by_team if x.key == "research")
    assert t.months[-1].team_kwh["research"] == pytest.approx(line.facility_kwh, rel=1e-9)
    assert line.gpu_kwh == pytest.approx(research_kwh, rel=1e-9)
