"""Pages that belong to no app: the unsubscribe link's page, one for every email with one.

Each app routes its own unsubscribe path (the links in emails already sent name it) to
`unsubscribe`, with an `UnsubscribePage` saying whose subscriptions its tokens name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.core import mail


@dataclass(frozen=True)
class UnsubscribePage:
    purpose: str  # the token's signing purpose (mail.unsubscribe_token)
    title: str  # "Unsubscribe from <title>"
    find: Callable[[int], Any]  # the subscription (with .active, .channel), or None
    turn_off: Callable[[Any], None]
    what: Callable[[Any], str]  # what the link turns off, in words
    note: str = ""  # what stays as it is


@login_not_required
def unsubscribe(request: HttpRequest, token: str, page: UnsubscribePage) -> HttpResponse:
    """GET says what the link turns off and changes nothing (mail scanners follow links);
    POST, with the page's CSRF token, turns it off. No login: the signature is the proof."""
    sub, problem = None, None
    try:
        sub = page.find(mail.unsubscribe_pk(page.purpose, token))
    except mail.UnsubscribeError as exc:
        problem = str(exc)
    else:
        if sub is None:
            problem = "this subscription no longer exists"
    done = False
    if sub is not None and request.method == "POST":
        page.turn_off(sub)
        done = True
    return render(
        request,
        "core/unsubscribe.html",
        {
            "page": page,
            "sub": sub,
            "what": page.what(sub) if sub is not None else "",
            "problem": problem[:1].upper() + problem[1:] + "." if problem else None,
            "done": done,
        },
        status=400 if problem else 200,
    )
