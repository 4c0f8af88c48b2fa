"""The figures' script tag: the same bytes as Django's json_script, hostile text included (a
label may hold "</script>"; node names, job names and users come from outside)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils.html import json_script

from webapp.core.templatetags.vigil import json_script_fast


def test_fast_json_script_is_djangos_byte_for_byte():
    value = {
        "name": "</script><script>alert(1)</script>",
        "amp": "a & b <!-- c -->",
        "at": datetime(2026, 12, 2, 10, 30, tzinfo=UTC),
        "unicode": "grün \u2028 \u2029",
        "nested": [1.5, None, {"x": ">"}],
    }
    fast = json_script_fast(value, "figures-data")
    assert fast == json_script(value, "figures-data")
    assert "</script><script>" not in fast[: -len("</script>")]
