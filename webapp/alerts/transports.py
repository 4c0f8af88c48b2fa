"""How a Notification reaches its channel: one transport class per channel kind (healthchecks'
registry, `TRANSPORTS`), each writing its kind's message onto the row when a group is flushed
(`prepare`) and sending it later (`send`). A kind with no class is refused (UnknownChannelKind),
never taken for another.

A transport raises `TransientError` (try again later: the server is away, an SMTP 4xx, an
HTTP 5xx) or `PermanentError` (this destination refuses: an SMTP 5xx for the recipient, an
HTTP 4xx). A permanent error that names the destination (`disables=True`) disables the
channel, with the error kept on it for its page. Emails are sent by core.mail.send, which
sorts the mail server's answers.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass

from django.conf import settings

from webapp.alerts import emails
from webapp.alerts.choices import AlertState, ChannelKind, NotificationKind
from webapp.alerts.destinations import (
    DestinationError,
    secret_env_check,
    url_check,
    url_redacted,
)
from webapp.alerts.models import Alert, Notification, Subscription
from webapp.alerts.services import unsubscribe_url
from webapp.core import mail
from webapp.core.mail import Deadline

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
    rate_limited = False

    def __init__(self, notification: Notification) -> None:
        self.n = notification
        self.channel = notification.channel

    @classmethod
    def prepare(cls, n: Notification, m: Message) -> None:
        """Write this kind's message for `m` onto `n` (to, subject, bodies, payload)."""
        raise NotImplementedError

    def send(self) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Message:
    """What one flush tells one recipient: the alerts (firing first), each as the email
    templates show it to that recipient (emails.alert_context), and the group's title."""

    kind: str  # NotificationKind
    alerts: list[Alert]
    items: list[dict]
    title: str
    subscription: Subscription | None


class EmailTransport(Transport):
    rate_limited = True  # VIGIL_ALERTS_RATE_LIMIT_PER_HOUR: people read these

    @classmethod
    def prepare(cls, n: Notification, m: Message) -> None:
        unsub = unsubscribe_url(m.subscription) if m.subscription else ""
        if m.kind == NotificationKind.FIRING:
            r = emails.email_alert_firing(m.items[0], unsubscribe_url=unsub)
        elif m.kind == NotificationKind.APPROVAL:
            r = emails.email_approval_waiting(m.items[0], unsubscribe_url=unsub)
        elif m.kind == NotificationKind.RESOLVED:
            r = emails.email_alerts_resolved(m.items, group=m.title, unsubscribe_url=unsub)
        elif m.kind == NotificationKind.GROUPED:
            r = emails.email_alerts_grouped(m.items, group=m.title, unsubscribe_url=unsub)
        else:
            raise ValueError(f"no email for notification kind {m.kind!r}")
        n.to = n.channel.config.get("address", "")
        n.subject, n.body_text, n.body_html = r.subject, r.text, r.html
        n.payload = {"unsubscribe_url": unsub}

    def send(self) -> None:
        headers = {"Message-ID": self.n.message_id}
        unsubscribe = self.n.payload.get("unsubscribe_url")
        if unsubscribe:
            headers["List-Unsubscribe"] = f"<{unsubscribe}>"
        outcome = mail.send(
            f"alert-{self.n.kind}",
            self.n.to,
            {},
            rendered=mail.Rendered(self.n.subject, self.n.body_text, self.n.body_html),
            headers=headers,
        )
        if outcome.status == mail.RETRY:
            raise TransientError(outcome.error)
        if outcome.status == mail.REFUSED:
            raise PermanentError(outcome.error, disables=outcome.recipient_refused)


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
            raise TransientError(deadline.message(what))
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
            raise TransientError(deadline.message(what)) from None
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


def webhook_payload(m: Message) -> dict:
    return {
        "version": "1",
        "kind": m.kind,
        "group": m.title,
        "status": "resolved" if m.kind == NotificationKind.RESOLVED else "firing",
        "alerts": [
            {
                "fingerprint": a.fingerprint,
                "status": a.state,
                "labels": a.labels,
                "startsAt": a.starts_at.isoformat(),
                "endsAt": a.ends_at.isoformat() if a.ends_at else None,
                "summary": i["summary"],
                "url": i["url"],
                "diagnosis": i["failure"],
                "evidence": i["evidence"],
            }
            for a, i in zip(m.alerts, m.items, strict=True)
        ],
    }


class WebhookTransport(Transport):
    @classmethod
    def prepare(cls, n: Notification, m: Message) -> None:
        n.to = n.channel.target  # send reads the URL from the channel
        n.subject = m.title
        n.payload = webhook_payload(m)

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


def am_alert(alert: Alert) -> dict:
    """An alert as Alertmanager's API takes it (same labels; resolved by endsAt)."""
    body = {
        "labels": {k: str(v) for k, v in alert.labels.items()},
        "annotations": {"summary": alert.summary, "vigil_fingerprint": alert.fingerprint},
        "startsAt": alert.starts_at.isoformat(),
        "generatorURL": emails.absolute(emails.ALERTS_PATH),
    }
    if alert.state == AlertState.RESOLVED and alert.ends_at:
        body["endsAt"] = alert.ends_at.isoformat()
    return body


class AlertmanagerTransport(Transport):
    @classmethod
    def prepare(cls, n: Notification, m: Message) -> None:
        n.to = n.channel.target
        n.subject = m.title
        n.payload = {"alerts": [am_alert(a) for a in m.alerts]}

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


class UnknownChannelKind(PermanentError):
    """A channel whose kind has no transport (a row written by hand, a kind since removed)."""

    def __init__(self, kind: str) -> None:
        known = ", ".join(TRANSPORTS)
        super().__init__(f"channel kind {kind!r} has no transport (known: {known})")


def transport_class(kind: str) -> type[Transport]:
    try:
        return TRANSPORTS[kind]
    except KeyError:
        raise UnknownChannelKind(kind) from None


def transport_for(notification: Notification) -> Transport:
    return transport_class(notification.channel.kind)(notification)
