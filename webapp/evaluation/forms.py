"""Request parsing of the evaluation page: which cluster and run to show (GET), and an
evaluation request (POST), whose checks beyond the form's live in services.py."""

from __future__ import annotations

import re
from pathlib import Path

from django import forms
from django.conf import settings

from webapp.core.forms import ClusterField, FilterForm, NamedErrorForm, WindowForm
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


# A checkpoint's place under the first model root, shown as the form's example (the demo makes
# this one, so the example is one the page accepts).
EXAMPLE_CHECKPOINT = ("internlm-7b", "step-1000")


def example_checkpoint() -> str:
    """Where the example checkpoint would be: under the first of VIGIL_EVAL_MODEL_ROOTS."""
    roots = settings.VIGIL_EVAL_MODEL_ROOTS
    return str(Path(roots[0] if roots else "/models", *EXAMPLE_CHECKPOINT))


class RequestForm(NamedErrorForm):
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
    def model_placeholder(self) -> str:
        return example_checkpoint()

    @property
    def dataset_names(self) -> list[str]:
        return [d for d in re.split(r"[\s,]+", self.cleaned_data.get("datasets") or "") if d]


class PhasesForm(WindowForm):
    """The evaluation phases' CSV: a cluster (default: the first) and the submission window,
    as the characterization page that links it."""

    cluster = ClusterField(_clusters())
    field_order = ["cluster", "since", "until"]
