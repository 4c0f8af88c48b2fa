"""A send has a total deadline shorter than its claim's lease: a mail or webhook server that
answers each step just inside the per-step timeout, but takes far longer in all, is cut off
at the deadline and retried later, instead of still sending when another worker may claim the
row again (and send it a second time)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from django.utils import timezone

from tests.alerts.conftest import Inbox, _free_port, deliver, later, with_email
from webapp.alerts import evaluate, services
from webapp.alerts.choices import ChannelKind, NotificationStatus
from webapp.alerts.models import Channel, Notification
from webapp.fleet.models import Node

pytestmark = pytest.mark.django_db

# Each step of the slow servers takes STEP_S, inside the per-step timeout (DEADLINE_S), and
# there are many steps: far more than DEADLINE_S in all.
DEADLINE_S = 2
STEP_S = 1.2


class SlowInbox(Inbox):
    """Answers EHLO, MAIL and RCPT slowly (DATA never comes if the client gives up)."""

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        await asyncio.sleep(STEP_S)
        session.host_name = hostname
        return responses

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        await asyncio.sleep(STEP_S)
        envelope.mail_from = address
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        await asyncio.sleep(STEP_S)
        return await super().handle_RCPT(server, session, envelope, address, rcpt_options)


@pytest.fixture
def slow_smtp(settings):
    inbox = SlowInbox()
    port = _free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.VIGIL_ALERTS_SEND_TIMEOUT_S = DEADLINE_S
    try:
        yield inbox
    finally:
        controller.stop()


def _node_down() -> None:
    Node.objects.filter(hostname="gpu-node-02").update(
        last_seen=timezone.now() - timedelta(minutes=20)
    )
    evaluate.alerts_evaluate(timezone.now())


def test_a_slow_mail_server_is_cut_off_at_the_deadline_and_retried(fleet, slow_smtp, operator):
    with_email(operator)
    _node_down()
    deliver(later(2))
    note = Notification.objects.get(to="operator@example.org")
    assert note.status == NotificationStatus.RETRY
    assert "deadline" in note.error
    assert slow_smtp.all() == []  # it never got as far as the message


class _Trickle(BaseHTTPRequestHandler):
    """Reads the POST, then answers one header line every STEP_S / 2 for about 10 s."""

    received = 0

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received += 1
        self.send_response(200)
        self.flush_headers()
        try:
            for i in range(int(10 / (STEP_S / 2))):
                time.sleep(STEP_S / 2)
                self.wfile.write(f"X-Slow-{i}: y\r\n".encode())
                self.wfile.flush()
            self.wfile.write(b"Content-Length: 0\r\n\r\n")
        except OSError:
            pass  # the client gave up

    def log_message(self, *args):
        pass


def test_a_slow_webhook_is_cut_off_at_the_deadline(fleet, operator, settings, broker):
    settings.VIGIL_ALERTS_SEND_TIMEOUT_S = DEADLINE_S
    _Trickle.received = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        channel = Channel.objects.create(
            kind=ChannelKind.WEBHOOK,
            config={"url": f"http://127.0.0.1:{server.server_address[1]}/hook"},
        )
        services.subscription_create(operator, channel=channel)
        _node_down()
        deliver(later(2))
    finally:
        server.shutdown()
    assert _Trickle.received == 1
    note = Notification.objects.get(channel=channel)
    assert note.status == NotificationStatus.RETRY
    assert "deadline" in note.error
