"""Team rules as plain data: first match wins, the whole field must match, a broken rule
fails closed."""

from __future__ import annotations

import pytest

from webapp.teams.models import TeamRule
from webapp.teams.rules import FIELDS, rules_compile, team_match

JOB = {"user": "alice", "team": "nlp-pretrain", "partition": "llm", "qos": "normal"}


def test_first_matching_rule_names_the_team():
    rules = rules_compile([("partition", "eval", 1), ("team", "nlp-.*", 2), ("user", "alice", 3)])
    assert team_match(rules, JOB) == 2


def test_the_whole_field_must_match_and_case_counts():
    assert team_match(rules_compile([("user", "ali", 1)]), JOB) is None
    assert team_match(rules_compile([("user", "alice", 1)]), {**JOB, "user": "alice2"}) is None
    assert team_match(rules_compile([("user", "Alice", 1)]), JOB) is None
    assert team_match(rules_compile([("user", "alice|bob", 1)]), JOB) == 1


def test_an_empty_field_matches_no_rule():
    assert team_match(rules_compile([("team", ".*", 1)]), {**JOB, "team": ""}) is None


def test_a_broken_rule_ends_the_search_with_no_team():
    rules = rules_compile([("user", "(unclosed", 1), ("user", ".*", 2)])
    assert team_match(rules, JOB) is None


def test_an_unknown_field_is_refused_by_name():
    with pytest.raises(ValueError, match="'name'"):
        rules_compile([("name", "x", 1)])


def test_the_model_offers_exactly_the_fields_the_rules_read():
    assert set(TeamRule.Field.values) == set(FIELDS)
