"""How a Notification reaches its channel: one transport class per channel kind (healthchecks'
registry), each sending the message already rendered on the row.

A transport raises `TransientError` (try again later: the server is away, an SMTP 4xx, an
HTTP 5xx) or `PermanentError` (this destination refuses: an SMTP 5xx for the recipient, an
HTTP 4xx). A permanent error that names the destination (`disables=True`) disables the
channel, with the error kept on it for its page.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import smtplib
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection

from webapp.alerts.choices import ChannelKind
from webapp.alerts.destinations import (
    DestinationError,
    secret_env_check,
    url_check,
    url_redacted,
)
from webapp.alerts.models import Notification

SIGNATURE_HEADER = "X-Vigil-Signature"


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
            connection=get_connection(timeout=settings.VIGIL_ALERTS_SEND_TIMEOUT_S),
        )
        if self.n.body_html:
            message.attach_alternative(self.n.body_html, "text/html")
        email_send(message, self.n.to)


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


def _opener() -> urllib.request.OpenerDirector:
    """http(s) only, and no redirect handler: a 3xx is answered as an error, never followed
    (the channel names its server; a redirect could send the signed body anywhere), and no
    file://, ftp:// or data: handler whatever a URL says."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


_OPENER = _opener()


def _post_json(url: str, body: bytes, headers: dict[str, str], what: str) -> None:
    try:
        url_check(url)
    except DestinationError as exc:
        raise PermanentError(f"{what}: {exc}") from None
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", **headers}, method="POST"
    )
    try:
        with _OPENER.open(request, timeout=settings.VIGIL_ALERTS_SEND_TIMEOUT_S):
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
    except (urllib.error.URLError, OSError) as exc:
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
