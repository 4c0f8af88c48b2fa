"""Tables declared once: one list of columns renders a page table's header and its CSV.

A `Column` names its CSV column (`key`, with the unit in the name: `power_kw`, `gpu_time_s`),
the page's header text, how a value is read from a row, and whether it shows on the page
only or in the CSV only. A `Table` writes the CSV header and every row from those same
accessors (`csv_response`, `csv_stream`), and `headers()` feeds the page's `<thead>` through
one include, `templates/includes/table_head.html` (`{% table_head "webapp.jobs.tables.JOBS" %}`
from `webapp/core/templatetags/vigil_tables.py`).

Why this module and not django-tables2 (NetBox's choice, exporting through tablib): the page
tables' cells carry links, badges, `data-*` attributes, ids and combined cells ("median /
mean") that scripts and browser tests read, so django-tables2 would mean a `render_<column>`
method or a template column for nearly every cell, moving each page's markup into Python
for no gain; and it is not installed, so it would add two dependencies (it and tablib) to
serve what about a hundred lines do here. The cells' markup stays in the templates; what
must not drift, which columns exist, in what order, under what name and unit, is declared
here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeData

from webapp.core.exports import csv_response, csv_stream

Accessor = Callable[[Any], object] | str | None


def _read(row: Any, path: str) -> object:
    """A dotted path read from a row: attributes, or keys of a mapping; None stops the walk."""
    value = row
    for part in path.split("."):
        if value is None:
            return None
        value = value.get(part) if isinstance(value, Mapping) else getattr(value, part)
    return value


@dataclass(frozen=True)
class Column:
    """One column. `key` is the CSV column's name (units in it); `header` the page's text (markup
    when given as a SafeString; "" for a column of buttons or links with no heading, None for
    the key itself), shown with `unit` in brackets when given; `accessor` reads the CSV value
    from a row: a callable, a dotted attribute or key path, or None for the path `key` itself.
    `num` right-aligns the page's cell; `csv_only` and `html_only` say where the column shows;
    `digits` rounds the CSV's number."""

    key: str
    header: str | None = None
    accessor: Accessor = None
    unit: str | None = None
    csv_only: bool = False
    html_only: bool = False
    num: bool = False
    digits: int | None = None

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a table column needs a key")
        if self.csv_only and self.html_only:
            raise ValueError(f"column {self.key!r} cannot be both csv_only and html_only")

    @property
    def label(self) -> str:
        """The page's header text: the header with its unit, "Power now (kW)"."""
        text = self.key if self.header is None else self.header
        if not self.unit:
            return text
        # A header given as markup (a legend's dot) keeps it; format_html escapes the unit.
        return (
            format_html("{} ({})", text, self.unit)
            if isinstance(text, SafeData)
            else (f"{text} ({self.unit})")
        )

    def value(self, row: Any) -> object:
        if callable(self.accessor):
            value = self.accessor(row)
        else:
            value = _read(row, self.accessor or self.key)
        if (
            self.digits is not None
            and isinstance(value, float | int)
            and not isinstance(value, bool)
        ):
            return round(value, self.digits)
        return value


class Table:
    """An ordered set of columns; the CSV gets every column but the html_only ones, the page
    every column but the csv_only ones, each in declaration order, or for the page in
    `page_order` (keys) where a page lists them in another order than its CSV."""

    def __init__(self, *columns: Column, page_order: Sequence[str] | None = None) -> None:
        keys = [c.key for c in columns]
        doubled = sorted({k for k in keys if keys.count(k) > 1})
        if doubled:
            raise ValueError(f"a table declares column(s) twice: {', '.join(doubled)}")
        if not columns:
            raise ValueError("a table needs at least one column")
        self.columns: tuple[Column, ...] = columns
        self._csv = tuple(c for c in columns if not c.html_only)
        page = [c for c in columns if not c.csv_only]
        if page_order is not None:
            by_key = {c.key: c for c in page}
            if sorted(page_order) != sorted(by_key):
                raise ValueError(
                    f"page_order {list(page_order)} must name each page column once: "
                    f"{sorted(by_key)}"
                )
            page = [by_key[k] for k in page_order]
        self._page = tuple(page)

    def headers(self) -> list[Column]:
        """The page's columns, for `includes/table_head.html`."""
        return list(self._page)

    def csv_header(self) -> list[str]:
        return [c.key for c in self._csv]

    def csv_row(self, row: Any) -> list:
        return [c.value(row) for c in self._csv]

    def csv_rows(self, rows: Iterable[Any]) -> Iterable[list]:
        return (self.csv_row(r) for r in rows)

    def csv_response(self, filename: str, rows: Iterable[Any]) -> HttpResponse:
        """The CSV download of `rows` (whole in memory: for tables of bounded size)."""
        return csv_response(filename, self.csv_header(), self.csv_rows(rows))

    def csv_stream(self, filename: str, rows: Iterable[Any]) -> StreamingHttpResponse:
        """The CSV written as the client reads it, for exports that may be large."""
        return csv_stream(filename, self.csv_header(), self.csv_rows(rows))


def iso(path: str) -> Callable[[Any], str | None]:
    """An accessor for a datetime at a dotted path, written in ISO 8601; None when unset."""

    def read(row: Any) -> str | None:
        value = _read(row, path)
        return value.isoformat() if value else None

    return read


def tables_of(namespace: Mapping[str, object]) -> dict[str, Table]:
    """Every Table bound to a name in a module's namespace (`vars(module)`), by name: what
    the tests walk to check each CSV against its declaration."""
    return {name: t for name, t in namespace.items() if isinstance(t, Table)}


def keyed(*keys: str, num: bool = False) -> Sequence[Column]:
    """Columns read from the row by their own key (a dict row or a dataclass), CSV only:
    for machine-readable tables whose page shows them differently or not at all."""
    return [Column(k, csv_only=True, num=num) for k in keys]
