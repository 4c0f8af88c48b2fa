"""Energy by team: the teams app's Team of each job, resolved as teams.selectors does (the
enabled rules in order, first match), in bulk over rollup rows.

The team is not stored on a job (webapp/teams/selectors.py says why), so the rollup queries
group by the job fields the enabled rules read (the account always, as its own column) and
each distinct combination is matched once here: with the usual rules on the account alone the
queries group exactly as they did by account, and a rule on the user or partition adds only
the columns it needs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from webapp.teams.models import Team, TeamRule
from webapp.teams.selectors import FIELDS, CompiledTeamRule, team_match, team_rules

NO_TEAM = "(no team)"  # a job no rule gives a team
JOB_DELETED = "(job deleted)"  # a rollup row whose job is gone


class TeamResolver:
    """The team name for a job's (user, account, partition, qos), matched once per distinct
    combination: two queries (the rules, the team names) whatever the number of rows."""

    def __init__(self) -> None:
        self.rules: list[CompiledTeamRule] = team_rules()
        # The account first: it is a column of its own wherever the team is.
        used = {r.field for r in self.rules}
        self.fields: tuple[str, ...] = ("team",) + tuple(
            f for f in FIELDS if f != "team" and f in used
        )
        self.names: dict[int, str] = (
            dict(Team.objects.values_list("id", "name")) if self.rules else {}
        )
        self._cache: dict[tuple, str] = {}

    def sql_columns(self, alias: str = "j") -> str:
        """The job columns to select and group by, in `fields` order (names from FIELDS only,
        quoted: `user` is a reserved word in SQL)."""
        return ", ".join(f"coalesce({alias}.\"{f}\", '')" for f in self.fields)

    def name(self, values: Sequence[str]) -> str:
        """The team name for values in `fields` order; NO_TEAM where no rule matches."""
        key = tuple(values)
        found = self._cache.get(key)
        if found is None:
            team_id = team_match(self.rules, dict(zip(self.fields, key, strict=True)))
            found = self.names.get(team_id, NO_TEAM) if team_id is not None else NO_TEAM
            self._cache[key] = found
        return found

    def job_name(self, job: dict) -> str:
        """The team name of a job given as a dict of its fields."""
        return self.name([job.get(f) or "" for f in self.fields])


def teams_version() -> str:
    """A digest of what decides a job's team (the enabled rules in order and the teams'
    names), for cache keys of figures grouped by team."""
    rules = TeamRule.objects.filter(enabled=True).order_by("order", "id")
    parts = [repr(list(rules.values_list("field", "pattern", "team_id")))]
    parts.append(repr(list(Team.objects.order_by("id").values_list("id", "name"))))
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:12]
