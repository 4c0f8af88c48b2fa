"""`manage.py team_create NAME --account PATTERN [--user PATTERN] [--member USERNAME]`: a
team and the rules that give jobs to it (the admin's form, for scripts and the demo). A team
that exists already is left as it is (running it twice changes nothing)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.teams.models import Team
from webapp.teams.services import team_create


class Command(BaseCommand):
    help = "Create a team with the rules that map scheduler accounts or users to it."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--account", action="append", default=[], help="account pattern")
        parser.add_argument("--user", action="append", default=[], help="scheduler user pattern")
        parser.add_argument("--member", action="append", default=[], help="a Vigil username")

    def handle(self, *args, **opts):
        if Team.objects.filter(name=opts["name"]).exists():
            self.stdout.write(f"team {opts['name']} exists")
            return
        users = list(get_user_model().objects.filter(username__in=opts["member"]))
        missing = sorted(set(opts["member"]) - {u.username for u in users})
        if missing:
            raise CommandError(f"--member: no user named {', '.join(missing)}")
        rules = [("team", p) for p in opts["account"]] + [("user", p) for p in opts["user"]]
        if not rules:
            raise CommandError("a team needs at least one --account or --user pattern")
        try:
            team = team_create(opts["name"], users=users, rules=rules)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"team {team.name}: {len(rules)} rule(s)")
