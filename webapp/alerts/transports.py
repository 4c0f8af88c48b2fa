"""How a Notification reaches its channel: one transport class per channel kind (healthchecks'
registry), each sending the message already rendered on the row.

A transport raises `TransientError` (try again later: the server is away, an SMTP 4xx, an
HTTP 5xx) or `PermanentError` (this destination refuses: an SMTP 5xx for the recipient, an
HTTP 4xx). A permanent error that names the destination (`disables=True`) disables the
channel, with the error kept on it for its page.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import os
import smtplib
import socket
import threading
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.mail.backends.smtp import EmailBackend as SMTPBackend
from django.utils.module_loading import import_string

from webapp.alerts.choices import ChannelKind
from webapp.alerts.destinations import (
    DestinationError,
    secret_env_check,
    url_check,
    url_redacted,
)
from webapp.alerts.models import Notification

SIGNATURE_HEADER = "X-Vigil-Signature"
# What a webhook or Alertmanager answers is read (and dropped) up to this much: a receiver
# acknowledges, it does not send documents.
MAX_REPLY_BYTES = 64 * 1024


class TransientError(Exception):
    pass


class PermanentError(Exception):
    def __init__(self, message: str, *, disables: bool = True) -> None:
        super().__init__(message)
        self.disables = disables


class Transport:
    def __init__(self, notification: Notification) -> None:
        self.n = notification
        self.channel = notification.channel

    def send(self) -> None:
        raise NotImplementedError


class Deadline:
    """A total limit on one send. Socket timeouts bound each read, not their sum: a server
    that answers every step just in time could hold a send past its claim's lease, and then
    another worker claims the row and sends it again. At the deadline the sockets registered
    here are shut down, which ends whatever read or write is waiting on them."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def register(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def error(self, what: str) -> TransientError:
        return TransientError(f"{what} took longer than the send's deadline ({self.seconds} s)")


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _deadline_smtp(backend_class: type, deadline: Deadline) -> type:
    """Django's SMTP backend whose connections register their socket with `deadline` as
    soon as it is connected (before the banner, TLS or login)."""

    class Registering(smtplib.SMTP):
        def _get_socket(self, host, port, timeout):  # noqa: ANN001, ANN202
            return deadline.register(super()._get_socket(host, port, timeout))

    class RegisteringSSL(smtplib.SMTP_SSL, Registering):
        pass  # SMTP_SSL wraps the socket Registering made and registered

    class Backend(backend_class):
        @property
        def connection_class(self) -> type:
            return RegisteringSSL if self.use_ssl else Registering

    return Backend


def email_connection(deadline: Deadline):  # noqa: ANN201 (a Django mail backend)
    """A mail connection whose send ends by `deadline` (the SMTP backend) or as configured."""
    backend_class = import_string(settings.EMAIL_BACKEND)
    timeout = settings.VIGIL_ALERTS_SEND_TIMEOUT_S
    if issubclass(backend_class, SMTPBackend):
        return _deadline_smtp(backend_class, deadline)(timeout=timeout)
    return get_connection(timeout=timeout)


class EmailTransport(Transport):
    def send(self) -> None:
        headers = {"Message-ID": self.n.message_id}
        unsubscribe = self.n.payload.get("unsubscribe_url")
        if unsubscribe:
            headers["List-Unsubscribe"] = f"<{unsubscribe}>"
        message = EmailMultiAlternatives(
            subject=self.n.subject,
            body=self.n.body_text,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[self.n.to],
            headers=headers,
        )
        if self.n.body_html:
            message.attach_alternative(self.n.body_html, "text/html")
        with Deadline(settings.VIGIL_ALERTS_SEND_TIMEOUT_S) as deadline:
            message.connection = email_connection(deadline)
            try:
                email_send(message, self.n.to)
            except TransientError:
                if deadline.expired:
                    raise deadline.error("the mail server") from None
                raise


def email_send(message: EmailMultiAlternatives, to: str) -> None:
    """Send one email, the mail server's refusals sorted: PermanentError (a 5xx; for the
    recipient it disables the channel) or TransientError (try again later)."""
    try:
        message.send()
    except smtplib.SMTPRecipientsRefused as exc:
        code, text = next(iter(exc.recipients.values()))
        reply = f"{code} {_text(text)}"
        if 500 <= code < 600:
            raise PermanentError(f"the mail server refused {to}: {reply}") from None
        raise TransientError(f"the mail server deferred {to}: {reply}") from None
    except smtplib.SMTPResponseException as exc:
        reply = f"{exc.smtp_code} {_text(exc.smtp_error)}"
        if 500 <= exc.smtp_code < 600:
            # Refused for a reason other than the recipient (the message, the sender):
            # this message fails, the channel stays.
            raise PermanentError(
                f"the mail server refused the message: {reply}", disables=False
            ) from None
        raise TransientError(f"the mail server answered {reply}") from None
    except (smtplib.SMTPException, OSError) as exc:
        raise TransientError(f"could not reach the mail server: {exc}") from None


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Connections:
    """http.client connections whose socket is registered with a deadline once connected."""

    def __init__(self, base: type, deadline: Deadline) -> None:
        self.base, self.deadline = base, deadline

    def __call__(self, host: str, **kwargs: object) -> http.client.HTTPConnection:
        conn = self.base(host, **kwargs)
        create = conn._create_connection

        def connect(*args: object, **kw: object) -> socket.socket:
            return self.deadline.register(create(*args, **kw))

        conn._create_connection = connect  # before TLS: the handshake is covered too
        return conn


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.connections = _Connections(http.client.HTTPConnection, deadline)

    def http_open(self, req):  # noqa: ANN001, ANN201
        return self.do_open(self.connections, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.connections = _Connections(http.client.HTTPSConnection, deadline)

    def https_open(self, req):  # noqa: ANN001, ANN201
        return self.do_open(self.connections, req, context=self._context)


def _opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """http(s) only, and no redirect handler: a 3xx is answered as an error, never followed
    (the channel names its server; a redirect could send the signed body anywhere), and no
    file://, ftp:// or data: handler whatever a URL says. Its sockets end at `deadline`."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTPHandler(deadline),
        _HTTPSHandler(deadline),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def _post_json(url: str, body: bytes, headers: dict[str, str], what: str) -> None:
    try:
        url_check(url)
    except DestinationError as exc:
        raise PermanentError(f"{what}: {exc}") from None
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", **headers}, method="POST"
    )
    deadline = Deadline(settings.VIGIL_ALERTS_SEND_TIMEOUT_S)
    try:
        with deadline, _opener(deadline).open(request, timeout=deadline.seconds) as response:
            response.read(MAX_REPLY_BYTES)  # the whole answer, inside the deadline
        if deadline.expired:  # a cut-off answer can read as a short, complete one
            raise deadline.error(what)
        return
    except urllib.error.HTTPError as exc:
        reply = f"HTTP {exc.code} {exc.reason}"
        if 300 <= exc.code < 400:
            raise PermanentError(
                f"{what} answered {reply}: redirects are not followed (set the final URL)"
            ) from None
        if 400 <= exc.code < 500 and exc.code not in (408, 429):
            raise PermanentError(f"{what} refused the notification: {reply}") from None
        raise TransientError(f"{what} answered {reply}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        if deadline.expired:
            raise deadline.error(what) from None
        raise TransientError(f"could not reach {what}: {_reason(exc, url)}") from None


def _reason(exc: Exception, url: str) -> str:
    """The error's words without the URL (urllib may repeat it)."""
    text = str(getattr(exc, "reason", exc))
    return text.replace(url, url_redacted(url))


def webhook_secret(config: dict) -> str:
    """The channel's HMAC key: from the environment variable its config names (only a
    VIGIL_CHANNEL_SECRET_* one), or VIGIL_WEBHOOK_SECRET. Never stored, never logged."""
    try:
        name = secret_env_check(config.get("secret_env"))
    except DestinationError as exc:
        raise PermanentError(str(exc)) from None
    return (os.environ.get(name, "") if name else "") or settings.VIGIL_WEBHOOK_SECRET


def signature(secret: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of the exact body (GitHub's X-Hub-Signature-256 form)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookTransport(Transport):
    def send(self) -> None:
        url = self.channel.config.get("url", "")
        if not url:
            raise PermanentError("the webhook channel has no url in its config")
        body = json.dumps(self.n.payload, sort_keys=True).encode()
        headers = {"X-Vigil-Notification": str(self.n.pk)}
        secret = webhook_secret(self.channel.config)
        if secret:
            headers[SIGNATURE_HEADER] = signature(secret, body)
        _post_json(url, body, headers, f"the webhook {url_redacted(url)}")


class AlertmanagerTransport(Transport):
    def send(self) -> None:
        base = self.channel.config.get("url", "").rstrip("/")
        if not base:
            raise PermanentError("the alertmanager channel has no url in its config")
        body = json.dumps(self.n.payload.get("alerts", [])).encode()
        _post_json(f"{base}/api/v2/alerts", body, {}, f"Alertmanager {url_redacted(base)}")


TRANSPORTS: dict[str, type[Transport]] = {
    ChannelKind.EMAIL: EmailTransport,
    ChannelKind.WEBHOOK: WebhookTransport,
    ChannelKind.ALERTMANAGER: AlertmanagerTransport,
}


def transport_for(notification: Notification) -> Transport:
    return TRANSPORTS[notification.channel.kind](notification)
