"""The demo's email backend: messages are kept in a table (OutboxMessage) that the outbox page
lists, instead of being sent. Chosen when VIGIL_DEBUG is on and EMAIL_URL is unset
(settings.py)."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend


class OutboxEmailBackend(BaseEmailBackend):
    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        from webapp.alerts.models import OutboxMessage

        for message in email_messages:
            html = ""
            for content, mimetype in getattr(message, "alternatives", []):
                if mimetype == "text/html":
                    html = content
            OutboxMessage.objects.create(
                to=", ".join(message.recipients())[:1024],
                from_email=message.from_email[:256],
                subject=message.subject[:998],
                body_text=message.body,
                body_html=html,
                message_id=str(message.extra_headers.get("Message-ID", ""))[:256],
            )
        return len(email_messages)
