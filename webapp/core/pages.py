"""Answers every page shares."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
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


class NotFoundInDebugMiddleware:
    """The branded 404 while DEBUG is on too: Django uses `handler404` only outside debug and
    otherwise answers with its technical page (the URL patterns tried, on yellow), and `make
    demo` runs with DEBUG on (runserver serves its static files), so a person trying Vigil
    met that page for a mistyped address or a missing object. A page's own 404 (the job
    page's, a JSON API's) is kept; outside debug this does nothing. Inside CommonMiddleware,
    which still redirects an address missing its slash."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # No resolver match: the address matched no page (the technical 404 of the resolver).
        unmatched = getattr(request, "resolver_match", None) is None
        if settings.DEBUG and response.status_code == 404 and unmatched:
            return not_found(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if settings.DEBUG and isinstance(exception, Http404):
            return not_found(request, exception)
        return None
