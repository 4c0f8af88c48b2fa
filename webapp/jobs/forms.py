"""Request parsing of the jobs pages: the job list's filters, the characterization window and
the wasted-GPU threshold."""

from __future__ import annotations

from django import forms

from webapp.core.forms import ClusterField, FilterForm, NumberField, WindowForm
from webapp.fleet.models import Cluster

DEFAULT_IDLE_MINUTES = 30


class JobListForm(FilterForm):
    """The job list's filters. They narrow and never refuse: an unknown value matches no job."""

    cluster = forms.CharField(required=False)
    type = forms.CharField(required=False)
    state = forms.CharField(required=False)
    user = forms.CharField(required=False)
    page = forms.IntegerField(required=False, min_value=1, initial=1)

    @property
    def filters(self) -> dict[str, str]:
        """Keyword arguments of `jobs_filter`."""
        v = self.values
        return {
            "cluster": v["cluster"],
            "job_type": v["type"],
            "state": v["state"],
            "user": v["user"],
        }


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
