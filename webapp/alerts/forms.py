"""Request parsing of the alerts pages: the alert list's and delivery log's filters (lenient,
as every filter bar), the silence form and the subscription form (strict: a write says what
was wrong and writes nothing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.utils import timezone

from webapp.alerts.choices import AlertState, NotificationStatus, RuleKind, Severity
from webapp.core.forms import FilterForm, ValueChoiceField
from webapp.failures import taxonomy
from webapp.fleet.models import Cluster, Node

# The form's default "until": a maintenance window of two hours, long enough for a reboot
# and a health check (recovery's drain-check-return takes minutes), short enough to be
# noticed if forgotten.
SILENCE_DEFAULT_HOURS = 2
# datetime-local's value format (HTML spec, "valid normalized local date and time string").
DATETIME_LOCAL = "%Y-%m-%dT%H:%M"


class AlertFilterForm(FilterForm):
    """The alert list's filters; an unknown cluster, rule or node matches no alert."""

    cluster = forms.CharField(required=False)
    state = ValueChoiceField(AlertState.choices)
    severity = ValueChoiceField(Severity.choices)
    rule = forms.CharField(required=False)
    node = forms.CharField(required=False)
    page = forms.IntegerField(required=False, min_value=1, initial=1)

    @property
    def filters(self) -> dict[str, str]:
        """Keyword arguments of `selectors.alerts_filter`."""
        v = self.values
        return {k: v[k] for k in ("cluster", "state", "severity", "rule", "node")}


class DeliveryFilterForm(FilterForm):
    channel = forms.IntegerField(required=False, min_value=1)
    status = ValueChoiceField(NotificationStatus.choices)
    page = forms.IntegerField(required=False, min_value=1, initial=1)


def silence_causes() -> list[tuple[str, str]]:
    """What a silence's cause may be: a failure cause or a rule kind (services.silence_create)."""
    return [
        ("", "any"),
        *((c, c) for c in taxonomy.CAUSES),
        *((k.value, f"{k.value} ({k.label})") for k in RuleKind),
    ]


def silence_default_until() -> str:
    return (timezone.now() + timedelta(hours=SILENCE_DEFAULT_HOURS)).strftime(DATETIME_LOCAL)


# The time of day a silence starts or ends, on a 24-hour clock in half hours: a select, not the
# browser's datetime picker, which an en-US browser draws with AM/PM.
TIMES_OF_DAY = [(f"{h:02d}:{m:02d}", f"{h:02d}:{m:02d}") for h in range(24) for m in (0, 30)]


def _at(day: Any, time_of_day: str) -> datetime:
    """A UTC datetime from a date and an "HH:MM" of TIMES_OF_DAY."""
    hours, minutes = (int(x) for x in time_of_day.split(":"))
    return datetime(day.year, day.month, day.day, hours, minutes, tzinfo=UTC)


class SilenceForm(forms.Form):
    """A silence: what it matches (cluster, node, cause, team), from when (UTC, blank: now)
    until when, and why. The start and end are a date and a 24-hour time of day each
    (`start_date`/`start_time`, `until_date`/`until_time`); `until` as one value
    ("YYYY-MM-DDTHH:MM" or ISO 8601) is also taken, for scripts.

    `teams` is what the user may silence: every team for an operator, their own teams for a
    member (who must then name one: they silence their own team's alerts only).
    """

    cluster = forms.ModelChoiceField(
        Cluster.objects.order_by("name"), to_field_name="name", required=False, empty_label="any"
    )
    node = forms.CharField(required=False, max_length=128, help_text="hostname")
    cause = forms.ChoiceField(choices=silence_causes, required=False)
    team = forms.ModelChoiceField(queryset=None, required=False, empty_label="any")
    start_date = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    start_time = forms.ChoiceField(choices=[("", "now"), *TIMES_OF_DAY], required=False)
    until_date = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    until_time = forms.ChoiceField(choices=TIMES_OF_DAY, required=False)
    until = forms.DateTimeField(
        input_formats=[DATETIME_LOCAL, "iso-8601"], required=False, help_text="UTC"
    )
    why = forms.CharField(max_length=512)

    def __init__(self, *args: Any, teams: QuerySet, team_required: bool, **kwargs: Any) -> None:
        initial = kwargs.get("initial") or {}
        if isinstance(initial.get("until"), str):
            # The default end as the two fields the page shows.
            at = datetime.strptime(initial["until"], DATETIME_LOCAL)
            rounded = at.replace(minute=0 if at.minute < 30 else 30)
            initial.setdefault("until_date", rounded.strftime("%Y-%m-%d"))
            initial.setdefault("until_time", rounded.strftime("%H:%M"))
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        self.fields["team"].required = team_required
        self.fields["cluster"].error_messages["invalid_choice"] = "unknown cluster"
        self.fields["team"].error_messages["invalid_choice"] = (
            "not a team whose alerts you may silence"
        )
        if team_required:
            self.fields["team"].error_messages["required"] = (
                "choose your team: a team member silences their own team's alerts only"
            )

    def _times(self, data: dict[str, Any]) -> None:
        """`start` (None: now) and `until` from the date and time fields (or `until`)."""
        now = timezone.now()
        start = None
        if data.get("start_date") or data.get("start_time"):
            if not (data.get("start_date") and data.get("start_time")):
                self.add_error("start_date", "give both the start date and time, or neither")
            else:
                start = _at(data["start_date"], data["start_time"])
        data["start"] = start
        until = data.get("until")
        if data.get("until_date") and data.get("until_time"):
            until = _at(data["until_date"], data["until_time"])
        elif data.get("until_date") or data.get("until_time"):
            self.add_error("until_date", "give both the end date and time")
            return
        if until is None:
            if "until" not in self.errors:
                self.add_error("until", "give the end date and time (UTC)")
            return
        if until <= now:
            self.add_error("until", "must be in the future")
        elif start is not None and until <= start:
            self.add_error("until", "must be after the start")
        data["until"] = until

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        self._times(data)
        hostname = (data.get("node") or "").strip()
        data["node"] = None
        if hostname:
            nodes = Node.objects.filter(hostname=hostname).select_related("cluster")
            if data.get("cluster"):
                nodes = nodes.filter(cluster=data["cluster"])
            found = list(nodes[:2])
            if not found:
                self.add_error("node", f"no node {hostname!r}" + self._on_cluster(data))
            elif len(found) > 1:
                self.add_error("node", f"{hostname!r} is on several clusters: choose the cluster")
            else:
                data["node"] = found[0]
        return data

    @staticmethod
    def _on_cluster(data: dict) -> str:
        return f" on cluster {data['cluster'].name}" if data.get("cluster") else ""

    @property
    def error(self) -> str | None:
        """The first problem, naming its field, as the filter bars say it."""
        for name, errors in self.errors.items():
            return errors[0] if name == "__all__" else f"{name}: {errors[0]}"
        return None


class SubscriptionForm(forms.Form):
    """Clusters and severities (none chosen: all of them); `active` on the edit page."""

    clusters = forms.ModelMultipleChoiceField(
        Cluster.objects.order_by("name"), to_field_name="name", required=False
    )
    severities = forms.MultipleChoiceField(choices=Severity.choices, required=False)
    active = forms.BooleanField(required=False)

    @property
    def error(self) -> str | None:
        for name, errors in self.errors.items():
            return errors[0] if name == "__all__" else f"{name}: {errors[0]}"
        return None
