"""Writes of the teams app. Sites edit teams and rules in the admin; this is the same write
for the demo and the tests."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction

from webapp.teams.models import Team, TeamRule
from webapp.teams.rules import FIELDS, pattern_compile


def team_create(
    name: str,
    *,
    users: Iterable[AbstractBaseUser] = (),
    groups: Iterable[Group] = (),
    rules: Iterable[tuple[str, str]] = (),
    order: int = 100,
) -> Team:
    """A team with its members and its (field, pattern) rules, appended from `order` on, ten
    apart. ValueError names a bad field or pattern; nothing is written then."""
    rules = list(rules)
    for field, pattern in rules:
        if field not in FIELDS:
            raise ValueError(f"rule field {field!r}: expected one of {', '.join(FIELDS)}")
        pattern_compile(pattern)
    with transaction.atomic():
        team = Team.objects.create(name=name)
        team.users.set(users)
        team.groups.set(groups)
        TeamRule.objects.bulk_create(
            TeamRule(order=order + 10 * i, field=field, pattern=pattern, team=team)
            for i, (field, pattern) in enumerate(rules)
        )
    return team
