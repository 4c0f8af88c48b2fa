"""Templates carry no inline code or style, so a Content-Security-Policy without 'unsafe-inline'
holds: scripts come from static/ by `src`, data by `json_script`, style from static CSS."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = sorted((Path(__file__).resolve().parent.parent / "templates").rglob("*.html"))

INLINE = {
    "inline <script>": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE),
    "style attribute": re.compile(r"<[^>]+\sstyle=", re.IGNORECASE),
    "<style> element": re.compile(r"<style[\s>]", re.IGNORECASE),
    "event handler attribute": re.compile(r"<[^>]+\son[a-z]+=", re.IGNORECASE),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_no_inline_script_or_style(template):
    text = template.read_text()
    found = [what for what, pattern in INLINE.items() if pattern.search(text)]
    assert found == []


# A quantity in seconds rendered as a bare number: the header beside it says the unit, and
# nothing ties the two together (a "GPU-h" column once showed GPU-seconds). Seconds go through
# the unit filters of webapp/core/templatetags/vigil.py: |seconds (a duration for people),
# |hms (H:MM:SS) or |hours.
RAW_SECONDS = re.compile(r"\{\{\s*[\w.]+_s\s*\|\s*(floatformat|intcomma|stringformat)\b")


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_seconds_reach_the_page_through_a_unit_filter(template):
    lines = [
        f"{n}: {line.strip()[:120]}"
        for n, line in enumerate(template.read_text().splitlines(), 1)
        if RAW_SECONDS.search(line)
    ]
    assert lines == []
