"""Every email Vigil sends goes through `send` (healthchecks' hc/lib/emails.py is the model).

An email kind is three templates, `templates/emails/<name>-subject.html`, `-body-text.html`
and `-body-html.html`, rendered by `render`. `send` hands the message to Django's email
backend under a total deadline and sorts what came back into one `SendOutcome`: sent, worth
trying again later (`retry`), or refused (`refused`; `recipient_refused` when the server
refused the address itself, which disables a channel). Callers decide what an outcome means
for their row; none of them builds or sends a message itself.

Unsubscribe links are signed with `django.core.signing`, one salt per purpose
(`vigil.<purpose>.unsubscribe`), the payload the subscription's primary key; the page that
takes them is `webapp.core.views.unsubscribe`.
"""

from __future__ import annotations

import contextlib
import smtplib
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.utils import make_msgid

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.mail.backends.smtp import EmailBackend as SMTPBackend
from django.template.loader import render_to_string
from django.utils.module_loading import import_string

SENT = "sent"
RETRY = "retry"
REFUSED = "refused"

# A header is one line (RFC 5322 2.2), and a subject this long is already unreadable.
SUBJECT_MAX = 512


@dataclass(frozen=True)
class Rendered:
    subject: str
    text: str
    html: str


@dataclass(frozen=True)
class SendOutcome:
    status: str  # SENT, RETRY or REFUSED
    error: str = ""
    # The server refused the recipient's address (an SMTP 5xx to RCPT): writing to it again
    # is pointless, so the channel that names it is disabled.
    recipient_refused: bool = False

    @property
    def sent(self) -> bool:
        return self.status == SENT


@dataclass(frozen=True)
class Attachment:
    filename: str
    content: bytes
    mimetype: str


def render(name: str, ctx: Mapping[str, object]) -> Rendered:
    """The three templates of email kind `name`; `base_url` is in every context."""
    ctx = {**ctx, "base_url": settings.VIGIL_BASE_URL}
    subject = render_to_string(f"emails/{name}-subject.html", ctx)
    return Rendered(
        " ".join(subject.split())[:SUBJECT_MAX],  # templates may wrap
        render_to_string(f"emails/{name}-body-text.html", ctx),
        render_to_string(f"emails/{name}-body-html.html", ctx),
    )


def send(
    name: str,
    to: str,
    ctx: Mapping[str, object],
    *,
    headers: Mapping[str, str] | None = None,
    attachments: Iterable[Attachment] = (),
    deadline_s: float | None = None,
    rendered: Rendered | None = None,
) -> SendOutcome:
    """Render email kind `name` for `to` (or take `rendered`, written earlier from the same
    templates, as alerts store theirs on the notification row) and send it, the whole send
    ended after `deadline_s` (default VIGIL_ALERTS_SEND_TIMEOUT_S). A Message-ID is made
    unless `headers` has one. Never raises for the mail server's answer: see SendOutcome."""
    r = rendered if rendered is not None else render(name, ctx)
    headers = dict(headers or {})
    headers.setdefault("Message-ID", make_msgid(name, domain=settings.VIGIL_EMAIL_DOMAIN))
    message = EmailMultiAlternatives(
        subject=r.subject,
        body=r.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[to],
        headers=headers,
    )
    if r.html:
        message.attach_alternative(r.html, "text/html")
    for a in attachments:
        message.attach(a.filename, a.content, a.mimetype)
    seconds = deadline_s if deadline_s is not None else settings.VIGIL_ALERTS_SEND_TIMEOUT_S
    with Deadline(seconds) as deadline:
        message.connection = email_connection(deadline)
        outcome = _send(message, to)
    if outcome.status == RETRY and deadline.expired:
        return SendOutcome(RETRY, deadline.message("the mail server"))
    return outcome


def _send(message: EmailMultiAlternatives, to: str) -> SendOutcome:
    """The one place the mail server's answers are sorted."""
    try:
        message.send()
    except smtplib.SMTPRecipientsRefused as exc:
        code, text = next(iter(exc.recipients.values()))
        reply = f"{code} {_text(text)}"
        if 500 <= code < 600:
            return SendOutcome(
                REFUSED, f"the mail server refused {to}: {reply}", recipient_refused=True
            )
        return SendOutcome(RETRY, f"the mail server deferred {to}: {reply}")
    except smtplib.SMTPResponseException as exc:
        reply = f"{exc.smtp_code} {_text(exc.smtp_error)}"
        if 500 <= exc.smtp_code < 600:
            # Refused for a reason other than the recipient (the message, the sender): this
            # message fails, the address stays.
            return SendOutcome(REFUSED, f"the mail server refused the message: {reply}")
        return SendOutcome(RETRY, f"the mail server answered {reply}")
    except (smtplib.SMTPException, OSError) as exc:
        return SendOutcome(RETRY, f"could not reach the mail server: {exc}")
    return SendOutcome(SENT)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# --- a total deadline ----------------------------------------------------------------------


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

    def message(self, what: str) -> str:
        return f"{what} took longer than the send's deadline ({self.seconds} s)"


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


# --- unsubscribe links ---------------------------------------------------------------------


class UnsubscribeError(ValueError):
    """An unsubscribe link that names nothing, with the reason."""


def _salt(purpose: str) -> str:
    # The salt of each purpose is the one its links were signed with before this module
    # existed ("vigil.alerts.unsubscribe", "vigil.energy.unsubscribe"): links in emails
    # already sent keep working.
    return f"vigil.{purpose}.unsubscribe"


def unsubscribe_token(purpose: str, pk: int) -> str:
    return signing.dumps({"s": pk}, salt=_salt(purpose), compress=True)


def unsubscribe_pk(purpose: str, token: str) -> int:
    """The primary key a `purpose` link was signed for; UnsubscribeError if it was not."""
    try:
        data = signing.loads(token, salt=_salt(purpose))
    except signing.BadSignature:
        raise UnsubscribeError(
            "this unsubscribe link is not valid (it was changed or cut)"
        ) from None
    pk = data.get("s") if isinstance(data, dict) else None
    if not isinstance(pk, int):
        raise UnsubscribeError("this unsubscribe link is not valid (it names no subscription)")
    return pk


def unsubscribe_url(path: str, purpose: str, pk: int) -> str:
    """The absolute link: `path` has a `{token}` field (the app's unsubscribe path)."""
    return f"{settings.VIGIL_BASE_URL}{path.format(token=unsubscribe_token(purpose, pk))}"
