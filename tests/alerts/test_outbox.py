"""The demo's outbox backend keeps each email in a table the outbox page lists."""

from __future__ import annotations

import pytest
from django.core.mail import EmailMultiAlternatives

from webapp.alerts.models import OutboxMessage

pytestmark = pytest.mark.django_db


def test_an_email_sent_through_the_outbox_backend_is_kept_with_its_html(settings):
    settings.EMAIL_BACKEND = "webapp.alerts.outbox.OutboxEmailBackend"
    msg = EmailMultiAlternatives(
        "[Vigil critical] gpu-node-02 GPU 3: Xid 79",
        "text body",
        "vigil@localhost",
        ["alice@example.org"],
        headers={"Message-ID": "<vigil-notification-1@localhost>"},
    )
    msg.attach_alternative("<p>html body</p>", "text/html")
    assert msg.send() == 1
    [kept] = OutboxMessage.objects.all()
    assert kept.to == "alice@example.org"
    assert kept.subject.startswith("[Vigil critical]")
    assert kept.body_html == "<p>html body</p>"
    assert kept.message_id == "<vigil-notification-1@localhost>"
