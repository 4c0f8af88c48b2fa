"""Who reads a job's log lines: owner, team members (directly or through a group), operators
(staff, superusers, the operators group); nobody else, and not an anonymous visitor."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group

from webapp.fleet.models import Cluster
from webapp.jobs.models import Job
from webapp.teams.models import TeamRule
from webapp.teams.selectors import OPERATORS_GROUP, job_logs_visible, job_team_id
from webapp.teams.services import team_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(db) -> Job:
    cluster = Cluster.objects.create(name="teamcluster")
    return Job.objects.create(
        cluster=cluster, scheduler_id="7", user="alice", team="nlp-pretrain", partition="llm"
    )


def test_owner_teammate_and_outsider(job, owner, teammate, outsider):
    assert job_logs_visible(owner, job)
    assert job_logs_visible(teammate, job)
    assert not job_logs_visible(outsider, job)


def test_a_team_member_through_a_group(job, django_user_model):
    group = Group.objects.create(name="ldap-nlp")
    dave = django_user_model.objects.create_user("dave")
    dave.groups.add(group)
    team_create("nlp", groups=[group], rules=[("team", "nlp-.*")])
    assert job_logs_visible(dave, job)


def test_operators_staff_and_superusers_see_every_job(job, operator, django_user_model):
    staff = django_user_model.objects.create_user("sam", is_staff=True)
    root = django_user_model.objects.create_superuser("root")
    assert all(job_logs_visible(u, job) for u in (operator, staff, root))
    assert operator.groups.filter(name=OPERATORS_GROUP).exists()


def test_anonymous_and_inactive_users_see_no_log_lines(job, django_user_model):
    inactive = django_user_model.objects.create_user("alice2", is_active=False)
    inactive.username = "alice"  # even one whose name matches the job's user
    assert not job_logs_visible(AnonymousUser(), job)
    assert not job_logs_visible(inactive, job)


def test_a_rule_edit_counts_at_once(job, teammate):
    rule = TeamRule.objects.get(team__name="pretraining")
    rule.enabled = False
    rule.save()
    assert job_team_id(job) is None
    assert not job_logs_visible(teammate, job)


def test_first_rule_in_order_wins_across_teams(job, django_user_model):
    a = team_create("a", rules=[("partition", "llm")], order=20)
    b = team_create("b", rules=[("user", "alice")], order=10)
    assert job_team_id(job) == b.pk
    TeamRule.objects.filter(team=b).update(order=30)
    assert job_team_id(job) == a.pk


def test_a_failure_without_a_job_has_only_fleet_lines(outsider):
    assert job_logs_visible(outsider, None)
    assert not job_logs_visible(AnonymousUser(), None)
