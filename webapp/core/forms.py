"""The parts every filter bar shares: a lenient GET form, a cluster chosen by name, days, and a
since / until window.

A filter bar never refuses to draw its page: a field with bad input falls back to its default
(the field's `initial`) and `FilterForm.error` names the first bad field the way the pages and
CSV exports always have ("days: 'x' is not a whole number"). Core imports no app, so the
cluster field is given its queryset by the app that uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import QuerySet
from django.utils.functional import cached_property

from webapp.core.windows import Window, window_parse


class NamedErrorForm(forms.Form):
    """A form whose `error` says its first problem the way every page and CSV does."""

    @property
    def error(self) -> str | None:
        """The first problem, naming its field ("cluster: unknown cluster 'x'"), or None."""
        if self.is_valid():
            return None
        for name, errors in self.errors.items():
            if name == NON_FIELD_ERRORS:
                continue
            return f"{name}: {errors[0]}"
        return self.errors[NON_FIELD_ERRORS][0]


class FilterForm(NamedErrorForm):
    """A GET filter bar; `values` holds every field, with defaults where the input was bad."""

    @cached_property
    def values(self) -> dict[str, Any]:
        """Each field's cleaned value, or its `initial` when the input was empty or invalid."""
        self.is_valid()
        values = {}
        for name, field in self.fields.items():
            value = self.cleaned_data.get(name)
            if value in field.empty_values:
                initial = field.initial() if callable(field.initial) else field.initial
                if initial is not None or name not in self.cleaned_data:
                    value = initial  # a blank text field stays "" unless it has a default
            values[name] = value
        for name, value in self.cleaned_data.items():
            values.setdefault(name, value)  # what clean() derived (a window)
        return values


class ClusterField(forms.ModelChoiceField):
    """A cluster by its name (`?cluster=seren`); empty means none chosen."""

    default_error_messages = {"invalid_choice": "unknown cluster %(value)r"}

    def __init__(self, queryset: QuerySet, **kwargs: Any) -> None:
        super().__init__(queryset, to_field_name="name", required=False, **kwargs)


class ValueChoiceField(forms.ChoiceField):
    """One of a closed set of values (a TextChoices, a taxonomy); empty means any."""

    default_error_messages = {"invalid_choice": "unknown value %(value)r"}

    def __init__(self, choices: Any, **kwargs: Any) -> None:
        super().__init__(choices=[("", "any"), *choices], required=False, initial="", **kwargs)


class NumberField(forms.Field):
    """A number (`kind`: int or float) that `allowed` accepts; empty means the default.

    Both bad kinds of input get a message naming what was typed, formatted with `value`.
    """

    def __init__(
        self,
        *,
        initial: float,
        allowed: Callable[[float], bool],
        invalid: str,
        out_of_range: str | None = None,
        kind: type = int,
        **kwargs: Any,
    ) -> None:
        super().__init__(required=False, initial=initial, **kwargs)
        self.allowed, self.kind = allowed, kind
        self.invalid, self.out_of_range = invalid, out_of_range or invalid

    def to_python(self, value: Any) -> float | None:
        if value in self.empty_values:
            return None
        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            raise ValidationError(self.invalid, code="invalid", params={"value": value}) from None
        if not self.allowed(number):
            raise ValidationError(self.out_of_range, code="range", params={"value": value})
        return number


def days_field(*, initial: int, max_days: int) -> NumberField:
    """`?days=N`: a whole number of days in [1, max_days]."""
    return NumberField(
        initial=initial,
        allowed=lambda days: 1 <= days <= max_days,
        invalid="%(value)r is not a whole number",
        out_of_range=f"must be between 1 and {max_days}",
    )


class WindowForm(FilterForm):
    """A cluster (default: the first) and an optional since / until, cleaned into `window`."""

    since = forms.CharField(required=False)
    until = forms.CharField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if "cluster" not in data:
            return data  # the cluster field already failed
        cluster = data["cluster"] or self.fields["cluster"].queryset.first()
        if cluster is None:
            return data  # no cluster has reported yet: no window, no error
        try:
            data["window"] = window_parse(cluster, data.get("since"), data.get("until"))
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        return data

    @property
    def window(self) -> Window | None:
        return self.values.get("window")
