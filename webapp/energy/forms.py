"""Request parsing of the energy pages: a cluster (default: the first) and a month."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from webapp.core.forms import ClusterField, FilterForm
from webapp.energy.selectors import month_bounds
from webapp.fleet.models import Cluster


def this_month() -> str:
    return f"{timezone.now():%Y-%m}"


class MonthField(forms.CharField):
    def clean(self, value):
        value = super().clean(value)
        if value:
            try:
                month_bounds(value)
            except ValueError as exc:
                raise ValidationError(str(exc)) from None
        return value


class EnergyForm(FilterForm):
    cluster = ClusterField(Cluster.objects.order_by("name"))
    month = MonthField(required=False, initial=this_month)

    @property
    def chosen_cluster(self) -> Cluster | None:
        return self.values["cluster"] or self.fields["cluster"].queryset.first()
