"""Every URL pattern, visited as an anonymous visitor, is refused: it ends at a login page
(pages, CSV) or answers 401/403 with a JSON error (JSON endpoints, and those with their own
credential). The only exceptions are listed below, each with its reason.

The patterns are read from `webapp.urls` itself, through every include, so a new page is
walked the day it is added. Static files are not URL patterns (whitenoise serves them before
the URL resolver) and are public by design: Vigil's own CSS and JS.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

pytestmark = pytest.mark.django_db

# Pattern (as walked: prefix + pattern) -> why an anonymous visitor may reach it.
PUBLIC = {
    "login/": "the login form itself",
    "logout/": "logging out without a session changes nothing; it redirects to the login",
    "admin/login/": "the admin's login form",
    # An alert email's link: the signed token names one subscription and is the credential;
    # GET only shows what will be turned off (tests/alerts/test_views.py).
    "alerts/unsubscribe/<str:token>/": "an email's unsubscribe link, its token the credential",
    # The monthly energy report email's link, the same way (tests/energy/test_email.py).
    "energy/unsubscribe/<str:token>/": "an email's unsubscribe link, its token the credential",
}
# Pattern -> (the setting holding its credential, if any). Outside the login on purpose
# (a load balancer, Prometheus, a scheduler have no session); each refuses a visitor
# without its own credential, as checked below.
OWN_CREDENTIAL = {
    "healthz": "VIGIL_HEALTH_KEY",
    "metrics": "VIGIL_METRICS_KEY",
    "api/v1/job-events": None,  # a node token, looked up by its hash
}
LOGIN_PAGES = ("/login/", "/admin/login/")

# Plausible values for path converters and the admin's regex groups.
VALUES = {
    "int": "1",
    "slug": "x",
    "str": "x",
    "path": "1",
    "uuid": "00000000-0000-0000-0000-000000000001",
}


def _patterns(patterns, prefix: str = "") -> list[tuple[str, URLPattern]]:
    out = []
    for p in patterns:
        if isinstance(p, URLResolver):
            out += _patterns(p.url_patterns, prefix + str(p.pattern))
        else:
            out.append((prefix + str(p.pattern), p))
    return out


def _example(route: str) -> str:
    """A concrete path for a pattern: converters and regex groups filled in."""
    # Regex groups first: an alternation of names takes its first name, anything else "x".
    path = re.sub(
        r"\(\?P<\w+>([^)]*)\)",
        lambda m: m.group(1).split("|")[0] if re.fullmatch(r"[\w|]+", m.group(1)) else "x",
        route,
    )
    path = re.sub(r"<(?:(\w+):)?\w+>", lambda m: VALUES[m.group(1) or "str"], path)
    return "/" + path.replace("^", "").replace("$", "")


def _refused(response) -> str | None:
    """None if this answer refuses the visitor; otherwise what it did instead."""
    if response.status_code in (401, 403):
        return None if "error" in response.json() else "a 401/403 without a JSON error"
    if not response.redirect_chain:
        return f"answered {response.status_code} without a redirect"
    final = response.redirect_chain[-1][0].split("?")[0]
    if final not in LOGIN_PAGES or response.status_code != 200:
        return f"ended at {final} ({response.status_code})"
    return None


ALL = _patterns(get_resolver().url_patterns)


def test_the_walk_finds_the_pages_of_every_app():
    routes = {route for route, _ in ALL}
    assert {"", "jobs/", "failures/", "nodes/<int:node_id>/", "api/v1/job-events"} <= routes
    assert any(route.startswith("admin/") for route in routes)
    assert set(PUBLIC) | set(OWN_CREDENTIAL) <= routes  # no stale exception


@pytest.mark.parametrize(("route", "pattern"), ALL, ids=[route or "/" for route, _ in ALL])
def test_anonymous_visitor_is_refused(route, pattern, settings):
    path = _example(route)
    assert resolve(path).func == pattern.callback, f"{path} does not reach {route!r}"
    if route in PUBLIC:
        return
    settings.VIGIL_HEALTH_KEY = "health-key-for-the-walk"
    settings.VIGIL_METRICS_KEY = "metrics-key-for-the-walk"
    for method in ("get", "post"):
        client = Client()
        response = getattr(client, method)(path, follow=True)
        if route in OWN_CREDENTIAL:
            assert response.status_code in (401, 403, 405), (method, path, response.status_code)
            if response.status_code != 405:  # GET of the job-events API: POST is checked
                assert "error" in response.json()
            continue
        problem = _refused(response)
        assert problem is None, f"{method.upper()} {path}: {problem}"


def test_every_json_and_csv_endpoint_is_under_api_v1():
    """One URL convention: pages at their path, data at /api/v1/ from each app's api_urls."""
    from django.urls import reverse

    data = [route for route, _ in ALL if route.endswith((".csv", ".json"))]
    assert len(data) >= 12
    assert [r for r in data if not r.startswith("api/v1/")] == []
    assert reverse("pages_api:overview_json") == "/api/v1/overview.json"
    assert reverse("jobs_api:job_events") == "/api/v1/job-events"


def test_the_admin_is_vigils(admin_client):
    """The admin names Vigil in its header, tab title and index, not Django."""
    html = admin_client.get("/admin/").content.decode()
    assert "<title>What Vigil stores | Vigil admin</title>" in html
    assert ">Vigil administration</a>" in html and "Django administration" not in html
