"""team_create: members and ordered rules in one write; a bad rule writes nothing."""

from __future__ import annotations

import pytest

from webapp.teams.models import Team, TeamRule
from webapp.teams.services import team_create

pytestmark = pytest.mark.django_db


def test_team_with_members_and_rules(owner):
    team = team_create("infra", users=[owner], rules=[("team", "infra"), ("user", "ops-.*")])
    assert list(team.users.all()) == [owner]
    assert list(TeamRule.objects.values_list("order", "field", "pattern")) == [
        (100, "team", "infra"),
        (110, "user", "ops-.*"),
    ]


@pytest.mark.parametrize(
    "rule, message", [(("user", "(x"), "pattern"), (("name", "x"), "rule field 'name'")]
)
def test_a_bad_rule_is_named_and_nothing_is_written(rule, message):
    with pytest.raises(ValueError, match=message):
        team_create("infra", rules=[("team", "infra"), rule])
    assert not Team.objects.exists() and not TeamRule.objects.exists()
