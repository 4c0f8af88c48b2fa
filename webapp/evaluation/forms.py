"""Request parsing of the evaluation page: which cluster and run to show (GET), and an
evaluation request (POST), whose checks beyond the form's live in services.py."""

from __future__ import annotations

import re

from django import forms

from webapp.core.forms import ClusterField, FilterForm
from webapp.evaluation.choices import PlanKind
from webapp.fleet.models import Cluster


def _clusters():
    return Cluster.objects.order_by("name")


class PageForm(FilterForm):
    cluster = ClusterField(_clusters())
    run = forms.IntegerField(required=False, min_value=1)

    @property
    def chosen_cluster(self) -> Cluster | None:
        return self.values["cluster"] or self.fields["cluster"].queryset.first()


class RequestForm(forms.Form):
    cluster = forms.ModelChoiceField(
        _clusters(), to_field_name="name", error_messages={"invalid_choice": "unknown cluster"}
    )
    model_path = forms.CharField(max_length=1024, strip=True)
    # One per line or comma-separated; what a name may be is the service's to say.
    datasets = forms.CharField(max_length=100_000, required=False)
    nodes = forms.IntegerField(min_value=1, max_value=10_000, initial=1)
    gpus_per_node = forms.IntegerField(min_value=1, max_value=64, initial=8)
    model_size_gb = forms.FloatField(required=False, min_value=0.001)
    plan = forms.ChoiceField(choices=PlanKind.choices, initial=PlanKind.DECOUPLED)

    @property
    def dataset_names(self) -> list[str]:
        return [d for d in re.split(r"[\s,]+", self.cleaned_data.get("datasets") or "") if d]

    @property
    def error(self) -> str | None:
        if self.is_valid():
            return None
        name, errors = next(iter(self.errors.items()))
        return f"{name}: {errors[0]}"
