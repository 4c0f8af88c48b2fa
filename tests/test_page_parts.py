"""The parts every page shares, written once: the pager (`templates/includes/pager.html`), an
app's sub-navigation (`templates/includes/subnav.html`, declared in `webapp/core/nav.py`), the
badges' tones and the primary button (`static/base.css`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.paginator import Paginator
from django.template import Context, Template

from webapp.core.nav import Tab, Tabs
from webapp.core.templatetags.vigil_badges import tone

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"


def _pager(number: int, query: str) -> str:
    page = Paginator(range(120), 50).get_page(number)
    html = Template('{% include "includes/pager.html" %}')
    return html.render(Context({"page": page, "query": query}))


def test_the_pager_keeps_the_filters_and_names_its_links_the_same_everywhere():
    html = _pager(2, "cluster=alpha&state=failed")
    assert re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', html) == [
        ("?cluster=alpha&amp;state=failed&amp;page=1", "‹ previous"),
        ("?cluster=alpha&amp;state=failed&amp;page=3", "next ›"),
    ]
    assert "page 2 of 3" in html
    # With no filter the link is the page alone; one page needs no pager.
    assert 'href="?page=2"' in _pager(1, "")
    assert "pager" not in Template('{% include "includes/pager.html" %}').render(
        Context({"page": Paginator(range(3), 50).get_page(1), "query": ""})
    )


def test_no_page_writes_its_own_pager_or_tabs():
    own = [
        str(p.relative_to(ROOT))
        for p in TEMPLATES.rglob("*.html")
        if p.parent.name != "includes"
        and re.search(r'class="(pager|subnav|[^"]*\btabs?\b)"', p.read_text())
    ]
    assert own == []


TABS = Tabs(
    "test pages",
    (
        Tab("alerts", "alerts:list", "Alerts", link_id="first"),
        Tab("recovery", "recovery:cluster", "Recovery", keep_cluster=True),
        Tab("approvals", "recovery:approvals", "Approvals", count=lambda: 3, count_id="n"),
    ),
)


def test_the_subnav_marks_the_current_page_keeps_the_cluster_and_counts_what_waits():
    class Chosen:
        name = "alpha"

    html = Template('{% load vigil_nav %}{% subnav "tests.test_page_parts.TABS" "recovery" %}')
    out = html.render(Context({"cluster": Chosen()}))
    assert re.findall(r'<a href="([^"]+)"', out) == [
        "/alerts/",
        "/recovery/?cluster=alpha",
        "/recovery/approvals/",
    ]
    assert re.findall(r'class="active"[^>]*>([^<]+)<', out) == ["Recovery"]
    assert '<span class="count" id="n">3</span>' in out
    assert 'aria-label="test pages"' in out and 'id="first"' in out


def test_a_subnav_naming_a_page_it_lacks_is_refused():
    with pytest.raises(ValueError, match="no tab 'nodes'"):
        Template('{% load vigil_nav %}{% subnav "tests.test_page_parts.TABS" "nodes" %}').render(
            Context()
        )
    with pytest.raises(ValueError, match="distinct keys"):
        Tabs("doubled", (Tab("a", "alerts:list", "A"), Tab("a", "alerts:list", "B")))


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("succeeded", "ok"),
        ("resolved", "ok"),
        ("sent", "ok"),
        ("firing", "bad"),
        ("critical", "bad strong"),
        ("failed", "bad"),
        ("pending", "warn"),
        ("awaiting_approval", "warn"),
        ("drained", "warn"),
        ("simulated", "info"),
        ("planned", ""),
        (True, "ok"),
        (False, ""),
    ],
)
def test_every_status_has_one_tone(status, expected):
    assert tone(status) == expected


def _rules(css: str) -> list[tuple[str, str]]:
    """(selector, declarations) of each rule, comments left out."""
    return re.findall(r"([^{}]+)\{([^{}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S))


def test_badge_tones_and_the_primary_button_are_declared_in_base_css_only():
    """Another stylesheet may size or place a button (the login form's is full width) but never
    colour a badge or a button."""
    found = []
    for path in STATIC.rglob("*.css"):
        if path.name == "base.css" or "vendor" in path.parts:
            continue
        for selector, body in _rules(path.read_text()):
            colours = re.search(r"(^|;)\s*(background|color|border)", body)
            for one in selector.split(","):
                if re.search(r"\.badge\b|\bbutton\b", one) and colours:
                    found.append(f"{path.relative_to(ROOT)}: {one.strip()}")
    assert found == []
    base = [s.strip() for s, _ in _rules((STATIC / "base.css").read_text())]
    assert base.count("button") == 1
    for t in ("ok", "warn", "bad", "info"):
        assert any(f".badge.{t}" in s for s in base), t
