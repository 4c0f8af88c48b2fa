"""Template filters the pages share (webapp/core/templatetags/vigil.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from webapp.core.templatetags import vigil
from webapp.core.templatetags.vigil import seconds


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "–"),
        (0.4, "0.4 s"),
        (45.4, "45 s"),
        (185, "3 min 5 s"),
        (1200, "20 min"),
        (7800, "2 h 10 min"),
        (12_000, "3 h 20 min"),
        (2 * 86400, "2 d"),
        (2 * 86400 + 4 * 3600 + 59, "2 d 4 h"),
        (-3, "0.0 s"),
    ],
)
def test_seconds_reads_as_a_person_says_it(value, text):
    assert seconds(value) == text


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "–"), (0, "0:00:00"), (245.4, "0:04:05"), (97380, "27:03:00"), (-3, "0:00:00")],
)
def test_hms_reads_as_sacct_elapsed(value, shown):
    assert vigil.hms(value) == shown


def test_hours_turns_seconds_into_hours():
    assert vigil.hours(89184) == "24.8"
    assert vigil.hours(3600 * 1234.56, 2) == "1,234.56"
    assert vigil.hours(None) == "–"


def test_elapsed_hms_counts_from_the_start():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert vigil.elapsed_hms(start, start + timedelta(hours=2, seconds=5)) == "2:00:05"
    assert vigil.elapsed_hms(None) == "–"
