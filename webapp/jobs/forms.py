"""Request parsing of the jobs pages: the job list's filters, the characterization window and
the wasted-GPU threshold."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django import forms

from webapp.core.forms import ClusterField, FilterForm, NumberField, ValueChoiceField, WindowForm
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobState, JobType

DEFAULT_IDLE_MINUTES = 30


# The job list's orders: each walks an index or sorts only the page's matches.
JOB_SORTS = {
    "newest": ("-submit_at", "newest submission first"),
    "oldest": ("submit_at", "oldest submission first"),
    "gpus": ("-gpus_requested", "most GPUs first"),
}


class JobListForm(FilterForm):
    """The job list's filters: a Slurm admin's search by scheduler id, cluster, type, state,
    user, the submission dates and the order. A value no job can have (an unknown cluster,
    type or state, a date that is not one) is refused with its field named, as every other
    page does, rather than silently listing everything."""

    id = forms.CharField(required=False, max_length=128, strip=True)
    cluster = ClusterField(Cluster.objects.order_by("name"))
    type = ValueChoiceField(JobType.choices)
    state = ValueChoiceField(JobState.choices)
    user = forms.CharField(required=False, max_length=128, strip=True)
    since = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    until = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    sort = forms.ChoiceField(
        choices=[(k, label) for k, (_, label) in JOB_SORTS.items()],
        required=False,
        initial="newest",
    )
    page = forms.IntegerField(required=False, min_value=1, initial=1)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and until < since:
            raise forms.ValidationError("until: before since")
        return data

    @property
    def filters(self) -> dict[str, Any]:
        """Keyword arguments of `jobs_filter` (submission dates as UTC day bounds)."""
        v = self.values
        return {
            "cluster": v["cluster"] or "",
            "scheduler_id": v["id"],
            "job_type": v["type"],
            "state": v["state"],
            "user": v["user"],
            "submitted_from": _day_start(v["since"]),
            "submitted_before": _day_start(v["until"], 1),
            "order_by": JOB_SORTS[v["sort"] or "newest"][0],
        }


def _day_start(day: date | None, plus_days: int = 0) -> datetime | None:
    if day is None:
        return None
    return datetime.combine(day, time(), UTC) + timedelta(days=plus_days)


class CharacterizationForm(WindowForm):
    """A cluster (default: the first) and the submission window of the jobs characterized."""

    cluster = ClusterField(Cluster.objects.order_by("name"))
    field_order = ["cluster", "since", "until"]


class WastedForm(FilterForm):
    """GPUs idle for at least `minutes`, on one cluster or all."""

    cluster = ClusterField(Cluster.objects.order_by("name"))
    minutes = NumberField(
        initial=DEFAULT_IDLE_MINUTES,
        allowed=lambda minutes: minutes >= 1,
        invalid="a whole number of minutes, at least 1",
    )
