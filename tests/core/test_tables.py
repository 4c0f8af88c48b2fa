"""Tables declared once (webapp/core/tables.py): the CSV and the page's header come from the
same columns."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import pytest
from django.template import Context, Template
from django.utils.html import format_html

from webapp.core.tables import Column, Table


@dataclass
class Row:
    name: str
    power_w: float | None
    owner: dict | None = None


TABLE = Table(
    Column("name", "Name"),
    Column(
        "power_kw",
        "Power",
        lambda r: None if r.power_w is None else r.power_w / 1000,
        unit="kW",
        num=True,
    ),
    Column("team", accessor="owner.team", csv_only=True),
    Column("link", "Open", html_only=True),
)


def _csv(response) -> list[list[str]]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.reader(io.StringIO(body.decode())))


@pytest.mark.parametrize("method", ["csv_response", "csv_stream"])
def test_the_csv_has_the_declared_header_and_each_row_read_by_its_accessors(method):
    rows = [Row("a", 1500.0, {"team": "ml"}), Row("=cmd", None)]
    response = getattr(TABLE, method)("t.csv", rows)
    assert response["Content-Disposition"] == 'attachment; filename="t.csv"'
    assert _csv(response) == [
        ["name", "power_kw", "team"],
        ["a", "1.5", "ml"],
        # A formula-looking cell is defused and a missing value is an empty cell, as before.
        ["'=cmd", "", ""],
    ]


def test_the_page_header_shows_the_page_columns_with_their_units():
    html = Template('{% load vigil_tables %}{% table_head "tests.core.test_tables.TABLE" %}')
    assert html.render(Context()).strip() == (
        '<thead><tr><th>Name</th><th class="num">Power (kW)</th><th>Open</th></tr></thead>'
    )


DOT = Table(Column("busy", format_html('<span class="dot {}"></span>Busy', "busy"), unit="<n>"))


def test_a_header_given_as_markup_keeps_it_and_text_is_escaped():
    html = Template('{% load vigil_tables %}{% table_head "tests.core.test_tables.DOT" %}')
    assert '<th><span class="dot busy"></span>Busy (&lt;n&gt;)</th>' in html.render(Context())


def test_a_bad_declaration_is_refused_with_its_column_named():
    with pytest.raises(ValueError, match="twice: name"):
        Table(Column("name"), Column("name"))
    with pytest.raises(ValueError, match="'x' cannot be both"):
        Column("x", csv_only=True, html_only=True)


def test_table_head_refuses_what_is_not_a_table():
    html = Template('{% load vigil_tables %}{% table_head "tests.core.test_tables.Row" %}')
    with pytest.raises(TypeError, match="not a Table"):
        html.render(Context())


ORDERED = Table(
    Column("id", "Id"),
    Column("when", "When", digits=1),
    Column("note", csv_only=True),
    page_order=("when", "id"),
)


def test_a_page_may_order_its_columns_apart_from_the_csv_which_rounds_as_declared():
    assert [c.key for c in ORDERED.headers()] == ["when", "id"]
    assert ORDERED.csv_header() == ["id", "when", "note"]
    assert ORDERED.csv_row({"id": 7, "when": 2.345, "note": None}) == [7, 2.3, None]
    with pytest.raises(ValueError, match="must name each page column once"):
        Table(Column("a"), Column("b"), page_order=("a",))


def test_a_page_may_give_a_column_the_text_it_computes_and_no_other():
    html = Template(
        '{% load vigil_tables %}{% table_head "tests.core.test_tables.TABLE" name=label %}'
    )
    assert "<th>Team &amp; co</th>" in html.render(Context({"label": "Team & co"}))
    bad = Template(
        '{% load vigil_tables %}{% table_head "tests.core.test_tables.TABLE" team="x" %}'
    )
    with pytest.raises(ValueError, match="no page column team"):
        bad.render(Context())
