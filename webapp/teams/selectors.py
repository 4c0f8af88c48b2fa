"""Who may read a job's log lines: its owner, its team, and operators.

Everyone logged in sees every job's metadata and diagnosis (as `squeue` shows every job); the
log lines (and the evidence in context built from them) are the job's own: they hold paths,
hyperparameters and the code's own messages.

A job's team is worked out here, when a page asks, and not cached on the job: caching would
cost the trace import a column for each of its million rows, make every rule edit an UPDATE of
up to a million rows, and a stale cached team is a wrong grant. Asked here it costs one query
of the rules table (a few rows) and a few regex matches, once per page that shows one job's
log lines, and a match per job for the few pages that list jobs with their team (energy's
breakdowns match once per distinct account, user, partition and QOS: webapp/energy/teams.py).

A team is this model, everywhere: the scheduler's free-text account (`Job.team`, Slurm's
--account) is what a rule matches, and pages show it as "Account".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q

from webapp.teams.models import Team, TeamRule
from webapp.teams.rules import FIELDS as FIELDS  # the job fields a rule reads, for readers
from webapp.teams.rules import CompiledTeamRule as CompiledTeamRule
from webapp.teams.rules import rules_compile
from webapp.teams.rules import team_match as team_match

# Members of this group are operators (as are staff and superusers); migration 0002 creates it.
OPERATORS_GROUP = "operators"

# What a page or export says in place of log lines its viewer may not read.
LOG_LINES_HIDDEN = "Log lines are visible to the job's team and operators."


class Job(Protocol):
    """What a team rule reads of a job (a jobs.Job, or anything shaped like it): teams sit
    below jobs, so they name the fields they match, not the model."""

    user: str
    team: str  # the scheduler's account (Slurm --account), which a rule may match
    partition: str
    qos: str


def user_is_operator(user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    if user.is_staff or user.is_superuser:
        return True
    return user.groups.filter(name=OPERATORS_GROUP).exists()


def team_rules() -> list[CompiledTeamRule]:
    """The enabled rules in order, read on every call so an edit or a revocation counts at
    once in every process."""
    rows = TeamRule.objects.filter(enabled=True).order_by("order", "id")
    return rules_compile(rows.values_list("field", "pattern", "team_id"))


def job_team_id(job: Job) -> int | None:
    """The id of the team that owns the job (first matching rule), or None."""
    values = {"user": job.user, "team": job.team, "partition": job.partition, "qos": job.qos}
    return team_match(team_rules(), values)


def job_team_names(jobs: Iterable[Job]) -> list[str]:
    """The name of each job's team ("" where no rule gives it one), in `jobs` order: at most
    two queries (the rules, the names of the teams found) whatever the number of jobs, for
    pages that list jobs with their team."""
    rules = team_rules()
    ids = [
        team_match(rules, {"user": j.user, "team": j.team, "partition": j.partition, "qos": j.qos})
        for j in jobs
    ]
    wanted = {i for i in ids if i is not None}
    names = dict(Team.objects.filter(id__in=wanted).values_list("id", "name")) if wanted else {}
    return [names.get(i, "") if i is not None else "" for i in ids]


def team_has_member(team_id: int, user: AbstractBaseUser) -> bool:
    """True if the user is in the team, directly or through one of their groups."""
    return Team.objects.filter(pk=team_id).filter(Q(users=user) | Q(groups__user=user)).exists()


def job_logs_visible(user: AbstractBaseUser | AnonymousUser, job: Job | None) -> bool:
    """May this user read the job's log lines? A failure with no job (a node's GPU error) has
    only the fleet's kernel lines, which every logged-in user sees."""
    if not user.is_authenticated or not user.is_active:
        return False
    if job is None or user_is_operator(user):
        return True
    if job.user and job.user == user.get_username():
        return True
    team_id = job_team_id(job)
    return team_id is not None and team_has_member(team_id, user)
