"""Teams of people (Django users and groups) and the ordered rules that give a job its team.

The team is worked out when a page asks (webapp/teams/selectors.py), not stored on the job:
that module's docstring says why.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import models

from webapp.teams.rules import pattern_compile


class Team(models.Model):
    name = models.CharField(max_length=128, unique=True)
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="vigil_teams")
    # Members through a group: a site that keeps teams in LDAP groups maps a group once.
    groups = models.ManyToManyField(Group, blank=True, related_name="vigil_teams")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamRule(models.Model):
    """The first enabled rule (by order) whose pattern matches the whole field names the job's
    team (webapp/teams/rules.py)."""

    class Field(models.TextChoices):
        USER = "user", "Scheduler user"
        TEAM = "team", "Account / project"
        PARTITION = "partition", "Partition"
        QOS = "qos", "QOS"

    order = models.PositiveIntegerField(default=100)
    field = models.CharField(max_length=16, choices=Field.choices, default=Field.TEAM)
    pattern = models.CharField(
        max_length=256,
        help_text="Python regular expression matched against the whole field, case-sensitive "
        "(nlp-.* for a prefix)",
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="rules")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["order", "id"]

    def __str__(self) -> str:
        return f"{self.order}: {self.field} ~ /{self.pattern}/ -> {self.team}"

    def clean(self) -> None:
        try:
            pattern_compile(self.pattern)
        except ValueError as exc:
            raise ValidationError({"pattern": str(exc)}) from None
