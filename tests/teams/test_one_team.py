"""One concept of a team: Vigil's Team (the rules' answer) is what every page calls a team,
the scheduler's account is shown as the account, and the demo has teams for its accounts."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from collectors.backends.simworkload import TEAMS
from webapp.core.management.commands.demo import DEMO_TEAMS
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobType
from webapp.jobs.models import Job
from webapp.teams.models import Team, TeamRule


def test_every_simulated_account_belongs_to_a_demo_team():
    # The simulator's accounts: its users' teams, and the job type for the other users.
    accounts = set(TEAMS.values()) | {t.value for t in JobType}
    orphans = [a for a in accounts if not any(re.fullmatch(p, a) for p in DEMO_TEAMS.values())]
    assert orphans == []


def test_team_create_command_makes_the_team_and_its_rules_once(db):
    call_command("team_create", "pretraining", "--account", "pretrain", stdout=io.StringIO())
    call_command("team_create", "pretraining", "--account", "pretrain", stdout=io.StringIO())
    [team] = Team.objects.all()
    assert [(r.field, r.pattern) for r in TeamRule.objects.filter(team=team)] == [
        ("team", "pretrain")
    ]
    with pytest.raises(CommandError, match="unbalanced|missing|pattern"):
        call_command("team_create", "broken", "--account", "(", stdout=io.StringIO())


def test_job_page_names_vigils_team_and_the_schedulers_account(operator_client, db):
    call_command("team_create", "pretraining", "--account", "pretrain", stdout=io.StringIO())
    cluster = Cluster.objects.create(name="kestrel")
    job = Job.objects.create(cluster=cluster, scheduler_id="9", team="pretrain", state="running")
    other = Job.objects.create(cluster=cluster, scheduler_id="10", team="misc", state="running")
    page = operator_client.get(f"/jobs/{job.id}/").content.decode()
    assert '<dd id="job-team">pretraining</dd>' in page
    assert '<dd id="job-account">pretrain</dd>' in page
    page = operator_client.get(f"/jobs/{other.id}/").content.decode()
    assert '<dd id="job-team">none (no team rule matches)</dd>' in page


def test_the_silence_form_offers_the_teams(operator_client, db):
    call_command("team_create", "pretraining", "--account", "pretrain", stdout=io.StringIO())
    page = operator_client.get("/alerts/silences/").content.decode()
    assert re.search(r"<option value=\"\d+\">pretraining</option>", page)
