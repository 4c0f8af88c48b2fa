"""Template filters the pages share (webapp/core/templatetags/vigil.py)."""

from __future__ import annotations

import pytest

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
