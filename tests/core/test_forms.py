"""The shared filter-bar parts: a bad field falls back to its default and is named in `error`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django import forms

from webapp.core.forms import (
    ClusterField,
    FilterForm,
    NumberField,
    ValueChoiceField,
    WindowForm,
    days_field,
)
from webapp.fleet.models import Cluster


class _Bar(FilterForm):
    days = days_field(initial=30, max_days=90)
    kind = ValueChoiceField([("a", "A"), ("b", "B")])
    user = forms.CharField(required=False)
    ratio = NumberField(
        kind=float,
        initial=lambda: 0.5,
        allowed=lambda r: 0 < r <= 1,
        invalid="%(value)r is not a ratio in (0, 1]",
    )


def test_an_empty_bar_has_every_default_and_no_error():
    form = _Bar({})
    assert form.error is None
    assert form.values == {"days": 30, "kind": "", "user": "", "ratio": 0.5}


def test_good_input_is_parsed():
    form = _Bar({"days": "7", "kind": "b", "user": " u3 ", "ratio": "0.25"})
    assert form.error is None
    assert form.values == {"days": 7, "kind": "b", "user": "u3", "ratio": 0.25}


@pytest.mark.parametrize(
    ("data", "error", "fallback"),
    [
        ({"days": "x"}, "days: 'x' is not a whole number", {"days": 30}),
        ({"days": "91"}, "days: must be between 1 and 90", {"days": 30}),
        ({"days": "0"}, "days: must be between 1 and 90", {"days": 30}),
        ({"kind": "z"}, "kind: unknown value 'z'", {"kind": ""}),
        ({"ratio": "-1"}, "ratio: '-1' is not a ratio in (0, 1]", {"ratio": 0.5}),
        ({"ratio": "nan"}, "ratio: 'nan' is not a ratio in (0, 1]", {"ratio": 0.5}),
    ],
)
def test_a_bad_field_is_named_and_falls_back_to_its_default(data, error, fallback):
    form = _Bar({**data, "user": "kept"})
    assert form.error == error
    assert form.values.items() >= {**fallback, "user": "kept"}.items()


class _Window(WindowForm):
    cluster = ClusterField(Cluster.objects.order_by("name"))


@pytest.mark.django_db
def test_window_defaults_to_the_first_cluster_and_parses_since_until():
    Cluster.objects.create(name="seren")
    Cluster.objects.create(name="kalos")
    window = _Window({"since": "2026-03-01", "until": "2026-03-02T08:00:00+08:00"}).window
    assert window.cluster.name == "kalos"
    assert window.since == datetime(2026, 3, 1, tzinfo=UTC)
    assert window.until == datetime(2026, 3, 2, tzinfo=UTC)
    assert _Window({"cluster": "seren"}).window.cluster.name == "seren"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"cluster": "nope"}, "cluster: unknown cluster 'nope'"),
        ({"since": "March"}, "since: 'March' is not an ISO 8601 date or date-time"),
        ({"since": "2026-03-02", "until": "2026-03-01"}, "since (2026-03-02T00:00:00+00:00) must"),
    ],
)
def test_a_bad_window_has_no_window_and_says_why(data, error):
    Cluster.objects.create(name="seren")
    form = _Window(data)
    assert form.window is None
    assert form.error.startswith(error)


@pytest.mark.django_db
def test_no_cluster_yet_is_no_window_and_no_error():
    form = _Window({})
    assert form.window is None and form.error is None
