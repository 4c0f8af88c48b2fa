"""`{% table_head "webapp.jobs.tables.JOBS" %}`: a page table's `<thead>` from its declaration
in `webapp/core/tables.py`, so the page and the CSV name the same columns in the same order."""

from __future__ import annotations

from functools import cache

from django import template
from django.utils.module_loading import import_string

from webapp.core.tables import Column, Table

register = template.Library()


@cache
def _table(path: str) -> Table:
    table = import_string(path)
    if not isinstance(table, Table):
        raise TypeError(f"{path} is a {type(table).__name__}, not a Table")
    return table


@register.inclusion_tag("includes/table_head.html")
def table_head(path: str) -> dict[str, list[Column]]:
    """The header row of the Table at the dotted `path`."""
    return {"columns": _table(path).headers()}
