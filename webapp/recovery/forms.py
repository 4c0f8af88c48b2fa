"""Request parsing of the recovery pages: the cluster and window, a page number, and the
operators' small POST forms (a cluster's mode, a rejection's reason)."""

from __future__ import annotations

from django import forms

from webapp.core.forms import (
    ClusterField,
    FilterForm,
    NamedErrorForm,
    ValueChoiceField,
    days_field,
)
from webapp.fleet.models import Cluster
from webapp.recovery.choices import ActionKind, ActionStatus, ExecutorKind, Mode

DEFAULT_DAYS = 7
MAX_DAYS = 3650  # ten years, as the failure pages allow


def _clusters():
    return Cluster.objects.order_by("name")


class RecoveryForm(FilterForm):
    """A cluster (default: the first), the last `days` days, and the page of the plans table."""

    cluster = ClusterField(_clusters())
    days = days_field(initial=DEFAULT_DAYS, max_days=MAX_DAYS)
    page = forms.IntegerField(required=False, min_value=1, initial=1)

    @property
    def chosen_cluster(self) -> Cluster | None:
        return self.values["cluster"] or self.fields["cluster"].queryset.first()


class ListForm(FilterForm):
    """The approvals queue and the drained nodes: an optional cluster and a page."""

    cluster = ClusterField(_clusters())
    page = forms.IntegerField(required=False, min_value=1, initial=1)


class ModeForm(NamedErrorForm):
    """An operator sets a cluster's recovery mode (POST)."""

    cluster = forms.ModelChoiceField(
        _clusters(), to_field_name="name", error_messages={"invalid_choice": "unknown cluster"}
    )
    mode = forms.ChoiceField(
        choices=Mode.choices, error_messages={"invalid_choice": "%(value)r is not a mode"}
    )


class RejectForm(forms.Form):
    why = forms.CharField(required=False, max_length=400, strip=True)


class ActionsForm(RecoveryForm):
    """The actions export: the recovery page's window, narrowed by status, kind or executor."""

    status = ValueChoiceField(ActionStatus.choices)
    kind = ValueChoiceField(ActionKind.choices)
    executor = ValueChoiceField(ExecutorKind.choices)
