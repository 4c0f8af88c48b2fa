"""The team rules are edited in the admin; a pattern that does not compile is refused there."""

from __future__ import annotations

import pytest

from webapp.teams.models import Team, TeamRule

pytestmark = pytest.mark.django_db


def _post(client, team: Team, pattern: str):
    return client.post(
        "/admin/teams/teamrule/add/",
        {"order": 10, "field": "user", "pattern": pattern, "team": team.pk, "enabled": "on"},
    )


def test_admin_adds_a_rule_and_refuses_a_broken_pattern(admin_client):
    team = Team.objects.create(name="nlp")
    response = _post(admin_client, team, "(unclosed")
    assert response.status_code == 200
    assert "missing )" in response.content.decode()
    assert not TeamRule.objects.exists()
    assert _post(admin_client, team, "alice|bob").status_code == 302
    assert TeamRule.objects.get().pattern == "alice|bob"
    assert admin_client.get("/admin/teams/team/").status_code == 200
