"""A job's team from its scheduler user, account, partition or QOS: an ordered list of regex
rules. Pure functions over plain data (no Django), like webapp/jobs/typing_rules.py.

The first enabled rule whose pattern matches the WHOLE field wins (`re.fullmatch`, case-
sensitive): a rule is a grant of access to log lines, so `alice` must not also match
`alice2` or `Alice`; write `nlp-.*` for a prefix. A rule with a broken pattern ends the search
with no team (fail closed) instead of letting a later, broader rule grant the job to
another team.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Job fields a rule may look at (webapp/jobs/models.py Job): `team` is the scheduler's
# account or project (Slurm --account), `user` its user.
FIELDS = ("user", "team", "partition", "qos")


@dataclass(frozen=True)
class CompiledTeamRule:
    field: str
    regex: re.Pattern[str] | None  # None: the pattern does not compile
    team_id: int


def pattern_compile(pattern: str) -> re.Pattern[str]:
    """Compile one rule pattern (case-sensitive); ValueError with the regex problem."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r}: {exc}") from None


def rules_compile(rules: Iterable[tuple[str, str, int]]) -> list[CompiledTeamRule]:
    """Compile (field, pattern, team id) rules in order; ValueError names an unknown field."""
    compiled = []
    for field, pattern, team_id in rules:
        if field not in FIELDS:
            raise ValueError(f"rule field {field!r}: expected one of {', '.join(FIELDS)}")
        try:
            regex = pattern_compile(pattern)
        except ValueError:
            regex = None
        compiled.append(CompiledTeamRule(field, regex, team_id))
    return compiled


def team_match(rules: Iterable[CompiledTeamRule], values: Mapping[str, str]) -> int | None:
    """The team id of the first rule whose pattern matches its whole field; None if none
    does, or if a broken rule comes first."""
    for rule in rules:
        if rule.regex is None:
            return None
        value = values.get(rule.field, "")
        if value and rule.regex.fullmatch(value):
            return rule.team_id
    return None
