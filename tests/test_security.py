"""The web edge as a visitor meets it: login throttling (django-axes) and the CSP header."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery"


def login(client: Client, username: str, password: str, ip: str = "10.0.0.7"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def logged_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def test_sixth_try_with_the_right_password_is_refused(operator, django_user_model, settings):
    assert settings.AXES_FAILURE_LIMIT == 5
    client = Client()
    for _ in range(4):
        assert login(client, "operator", "wrong-guess").status_code == 200  # the form again
    assert login(client, "operator", "wrong-guess").status_code == 429  # the 5th locks
    response = login(client, "operator", PASSWORD)

    assert response.status_code == 429
    assert not logged_in(client)

    # The lockout is for that username from that address: a colleague, and the same person
    # from another address, still get in.
    django_user_model.objects.create_user("colleague", password=PASSWORD)
    colleague = Client()
    assert login(colleague, "colleague", PASSWORD).status_code == 302
    assert logged_in(colleague)
    elsewhere = Client()
    assert login(elsewhere, "operator", PASSWORD, ip="10.0.0.8").status_code == 302


def test_a_success_before_the_limit_forgets_the_failures(operator):
    client = Client()
    for _ in range(4):
        login(client, "operator", "wrong-guess")
    assert login(client, "operator", PASSWORD).status_code == 302
    client.logout()
    for _ in range(4):
        login(client, "operator", "wrong-guess")
    assert login(client, "operator", PASSWORD).status_code == 302


def test_pages_carry_a_content_security_policy_of_vigils_own_files(operator_client):
    response = operator_client.get("/")
    assert response.status_code == 200
    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"  # no inline scripts, nothing from elsewhere
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in policy["script-src"]


def test_the_login_page_carries_it_too(client):
    assert "default-src 'self'" in client.get("/login/")["Content-Security-Policy"]


# Behind the TLS proxy the README recommends, every request's REMOTE_ADDR is the proxy's.
PROXY = "10.0.0.1"


def via_proxy(client: Client, username: str, password: str, forwarded_for: str):
    """A login as the proxy passes it on: from the proxy's address, with the X-Forwarded-For
    it built (a client's own header, then the address the proxy saw)."""
    return client.post(
        "/login/",
        {"username": username, "password": password},
        REMOTE_ADDR=PROXY,
        HTTP_X_FORWARDED_FOR=forwarded_for,
    )


def test_behind_a_trusted_proxy_two_clients_are_locked_apart(operator, settings):
    settings.VIGIL_TRUSTED_PROXY_COUNT = 1
    guesser = Client()
    for _ in range(5):
        via_proxy(guesser, "operator", "wrong-guess", "198.51.100.9")
    assert via_proxy(guesser, "operator", PASSWORD, "198.51.100.9").status_code == 429
    # The guesser cannot get out by sending a header of its own: the proxy's entry counts.
    spoofed = via_proxy(Client(), "operator", PASSWORD, "192.0.2.50, 198.51.100.9")
    assert spoofed.status_code == 429
    # The real operator, at another address behind the same proxy, logs in.
    assert via_proxy(Client(), "operator", PASSWORD, "203.0.113.4").status_code == 302


def test_without_a_trusted_proxy_the_header_is_ignored(operator, settings):
    assert settings.VIGIL_TRUSTED_PROXY_COUNT == 0  # the default: no proxy trusted
    guesser = Client()
    for _ in range(5):
        via_proxy(guesser, "operator", "wrong-guess", "198.51.100.9")
    # A header a client writes itself does not make it another client.
    assert via_proxy(Client(), "operator", PASSWORD, "203.0.113.4").status_code == 429
