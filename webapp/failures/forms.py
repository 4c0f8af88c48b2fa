"""Request parsing of the failure pages: the timeline's filters and the reliability window."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms
from django.conf import settings

from webapp.core.forms import ClusterField, FilterForm, NumberField, ValueChoiceField, days_field
from webapp.failures import taxonomy
from webapp.failures.choices import FailureKind
from webapp.failures.selectors import FailureFilter
from webapp.fleet.models import Cluster
from webapp.jobs.choices import JobType

DEFAULT_DAYS = 30
MAX_DAYS = 3650  # ten years: more than any retention a site keeps failures for
MAX_CHECKPOINT_WRITE_S = 86400  # a checkpoint that takes longer than a day is a typo


class TimelineForm(FilterForm):
    """The timeline's filters; a bad value is dropped (and named in `error`)."""

    # One of the clusters (the page offers them as a choice): a name no cluster has is
    # refused, not a silently empty timeline.
    cluster = ClusterField(Cluster.objects.order_by("name"))
    category = ValueChoiceField([(c.value, c.value) for c in taxonomy.Category])
    cause = ValueChoiceField([(c, c) for c in taxonomy.CAUSES])
    job_type = ValueChoiceField(JobType.choices)
    kind = ValueChoiceField(FailureKind.choices)
    user = forms.CharField(required=False, initial="")
    days = days_field(initial=DEFAULT_DAYS, max_days=MAX_DAYS)
    lane = forms.ChoiceField(  # one lane per node or per job in the figure
        choices=[("node", "node"), ("job", "job")], required=False, initial="node"
    )
    job = forms.IntegerField(required=False, min_value=0)

    def failure_filter(self, now: datetime) -> FailureFilter:
        v = self.values
        return FailureFilter(
            cluster=v["cluster"].name if v["cluster"] else "",
            category=v["category"],
            cause=v["cause"],
            job_type=v["job_type"],
            user=v["user"],
            kind=v["kind"],
            job_id=v["job"],
            since=now - timedelta(days=v["days"]),
        )


class ReliabilityForm(FilterForm):
    """A cluster (default: the first), the last `days` days, and the checkpoint write time the
    Young/Daly interval assumes (default: VIGIL_CHECKPOINT_WRITE_S)."""

    cluster = ClusterField(Cluster.objects.order_by("name"))
    days = days_field(initial=DEFAULT_DAYS, max_days=MAX_DAYS)
    ckpt_write_s = NumberField(
        kind=float,
        initial=lambda: settings.VIGIL_CHECKPOINT_WRITE_S,
        allowed=lambda s: 0 < s <= MAX_CHECKPOINT_WRITE_S,
        invalid=f"%(value)r is not a number of seconds in (0, {MAX_CHECKPOINT_WRITE_S}]",
    )

    @property
    def chosen_cluster(self) -> Cluster | None:
        return self.values["cluster"] or self.fields["cluster"].queryset.first()
