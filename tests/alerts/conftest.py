"""Alerts fixtures: a real SMTP server (aiosmtpd) on 127.0.0.1 that keeps what it receives and
refuses one address with 550, Django pointed at it, personas with email addresses, and a
`deliver` helper that runs what the workers run (due group flushes, then the sends) in the
test process, with the clock a test chooses."""

from __future__ import annotations

import email
import email.policy
import importlib
import socket
import threading
from datetime import datetime, timedelta

import pytest
from aiosmtpd.controller import Controller
from django.utils import timezone

from tests.failures.conftest import make_fleet
from webapp.alerts import delivery
from webapp.alerts.choices import NotificationStatus
from webapp.alerts.models import AlertGroup, Notification

REFUSED = "bounce@example.org"


class Inbox:
    """An aiosmtpd handler: messages as parsed email objects, and one address refused."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.lock = threading.Lock()

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address == REFUSED:
            return "550 5.1.1 <bounce@example.org>: Recipient address rejected: User unknown"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.lock:
            self.messages.append(msg)
        return "250 Message accepted for delivery"

    def to(self, address: str) -> list[email.message.EmailMessage]:
        with self.lock:
            return [m for m in self.messages if address in m["To"]]

    def all(self) -> list[email.message.EmailMessage]:
        with self.lock:
            return list(self.messages)


def text_of(msg: email.message.EmailMessage) -> str:
    return msg.get_body(preferencelist=("plain",)).get_content()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp(settings):
    """A running SMTP server; Django's SMTP backend sends to it."""
    inbox = Inbox()
    port = _free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    inbox.port = port
    try:
        yield inbox
    finally:
        controller.stop()


def with_email(user, address: str | None = None):
    user.email = address or f"{user.username}@example.org"
    user.save(update_fields=["email"])
    return user


def default_rules() -> None:
    """The built-in rules of migration 0002 (a transactional test's flush empties the table)."""
    from webapp.alerts.models import AlertRule

    migration = importlib.import_module("webapp.alerts.migrations.0002_default_rules")
    for rule in migration.RULES:
        AlertRule.objects.get_or_create(name=rule["name"], defaults=rule)


@pytest.fixture
def fleet(db):
    default_rules()
    return make_fleet()


@pytest.fixture
def committed_fleet(transactional_db):
    default_rules()
    return make_fleet()


def deliver(now: datetime | None = None) -> list[Notification]:
    """Flush every group due by `now`, then send every notification waiting: what the flush
    and send tasks do, in this process. Returns the notifications written."""
    now = now or timezone.now()
    written: list[Notification] = []
    for pk in AlertGroup.objects.filter(flush_at__lte=now).values_list("pk", flat=True):
        written += delivery.group_flush(pk, now)
    waiting = Notification.objects.filter(status=NotificationStatus.PENDING)
    for pk in waiting.values_list("pk", flat=True):
        delivery.notification_send(pk, "test")
    return written


def later(s: float) -> datetime:
    return timezone.now() + timedelta(seconds=s)
