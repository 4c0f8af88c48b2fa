"""Template filters the pages share (webapp/core/templatetags/vigil.py)."""

from __future__ import annotations

import pytest

from webapp.core.templatetags.vigil import span


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "–"),
        (0, "0 s"),
        (45.4, "45 s"),
        (119, "119 s"),
        (1200, "20 min"),
        (7199, "119 min"),
        (7200, "2 h"),
        (12_000, "3 h 20 min"),
        (2 * 86400, "2 d"),
        (2 * 86400 + 4 * 3600 + 59, "2 d 4 h"),
        (-3, "0 s"),
    ],
)
def test_span_reads_as_a_person_says_it(seconds, text):
    assert span(seconds) == text
