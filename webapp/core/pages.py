"""Answers every page shares."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def not_found(
    request: HttpRequest,
    exception: Exception | None = None,
    *,
    reason: str = "",
    hint: str = "",
    hint_url: str = "",
) -> HttpResponse:
    """The branded 404 page: what was not found and, where a person likely meant something
    else (a Slurm job id typed where Vigil's own id goes), a link to it. Also Django's
    `handler404`, so an address that matches no page gets the same page outside debug."""
    context = {"reason": reason, "hint": hint, "hint_url": hint_url}
    return render(request, "404.html", context, status=404)
