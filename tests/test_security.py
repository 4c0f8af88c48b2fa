"""The web edge as a visitor meets it: login throttling (django-axes) and the CSP header."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

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


class _Proxy(BaseHTTPRequestHandler):
    """A reverse proxy as nginx's `proxy_set_header X-Forwarded-For
    $proxy_add_x_forwarded_for` runs one: it passes each request on and appends the address
    it was connected from to X-Forwarded-For."""

    upstream: tuple[str, int] = ("127.0.0.1", 0)

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "x-forwarded-for"}
        seen = self.headers.get("X-Forwarded-For")
        client = self.client_address[0]
        headers["X-Forwarded-For"] = f"{seen}, {client}" if seen else client
        conn = http.client.HTTPConnection(*type(self).upstream, timeout=30)
        conn.request(self.command, self.path, body=body or None, headers=headers)
        reply = conn.getresponse()
        data = reply.read()
        self.send_response(reply.status)
        for k, v in reply.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_POST = _forward  # noqa: N815 (http.server's names)

    def log_message(self, *args):
        pass


class _Browser:
    """A client on its own loopback address (127.0.0.x), talking to Vigil through the proxy,
    keeping its cookies and the login form's CSRF token as a browser does."""

    def __init__(self, proxy_port: int, address: str) -> None:
        self.port, self.address, self.cookies = proxy_port, address, {}

    def _request(self, method: str, path: str, body: bytes | None = None, **headers: str):
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=30, source_address=(self.address, 0)
        )
        headers["Host"] = "localhost"  # the site's name (ALLOWED_HOSTS), as a browser sends it
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        conn.request(method, path, body=body, headers=headers)
        reply = conn.getresponse()
        reply.read()
        for k, v in reply.getheaders():
            if k.lower() == "set-cookie":
                name, value = v.split(";", 1)[0].split("=", 1)
                self.cookies[name] = value
        conn.close()
        return reply.status

    def login(self, username: str, password: str, *, forwarded_for: str = "") -> int:
        assert self._request("GET", "/login/") == 200
        form = urlencode(
            {
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": self.cookies["csrftoken"],
            }
        ).encode()
        extra = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        return self._request(
            "POST",
            "/login/",
            form,
            **{"Content-Type": "application/x-www-form-urlencoded", **extra},
        )


@pytest.fixture
def proxy(transactional_db, live_server):
    _Proxy.upstream = (live_server.thread.host, live_server.thread.port)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_through_a_real_proxy_a_guesser_locks_out_only_itself(proxy, operator, settings):
    settings.VIGIL_TRUSTED_PROXY_COUNT = 1
    guesser = _Browser(proxy, "127.0.0.5")
    for _ in range(5):
        guesser.login("operator", "wrong-guess")
    assert guesser.login("operator", PASSWORD) == 429
    # A header of its own does not help it: the proxy appends the address it saw.
    assert _Browser(proxy, "127.0.0.5").login("operator", PASSWORD, forwarded_for="10.9.9.9") == (
        429
    )
    assert _Browser(proxy, "127.0.0.6").login("operator", PASSWORD) == 302  # the operator
