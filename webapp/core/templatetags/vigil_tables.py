"""`{% table_head "webapp.jobs.tables.JOBS" %}`: a page table's `<thead>` from its declaration
in `webapp/core/tables.py`, so the page and the CSV name the same columns in the same order."""

from __future__ import annotations

from functools import cache

from django import template
from django.utils.module_loading import import_string

from webapp.core.tables import Table

register = template.Library()


@cache
def _table(path: str) -> Table:
    table = import_string(path)
    if not isinstance(table, Table):
        raise TypeError(f"{path} is a {type(table).__name__}, not a Table")
    return table


@register.inclusion_tag("includes/table_head.html")
def table_head(path: str, **labels: str) -> dict[str, list[dict]]:
    """The header row of the Table at the dotted `path`; `key=text` gives a column the text a
    page computes (the month a column holds, what one include's first column lists)."""
    table = _table(path)
    unknown = sorted(set(labels) - {c.key for c in table.headers()})
    if unknown:
        raise ValueError(f"{path} has no page column {', '.join(unknown)}")
    return {"cells": [{"label": labels.get(c.key, c.label), "num": c.num} for c in table.headers()]}
