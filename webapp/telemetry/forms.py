"""Request parsing of the live pages: the time range of the node and GPU pages."""

from __future__ import annotations

from django import forms

from webapp.core.forms import FilterForm
from webapp.telemetry.selectors import DEFAULT_RANGE, RANGES, TimeRange


class RangeForm(FilterForm):
    """`?range=1h|1d|7d|90d|1y`; anything else is the default range (a stale link still draws)."""

    range = forms.ChoiceField(
        choices=[(r.key, r.label) for r in RANGES.values()], required=False, initial=DEFAULT_RANGE
    )

    @property
    def time_range(self) -> TimeRange:
        return RANGES[self.values["range"]]
