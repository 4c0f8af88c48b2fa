"""Finished notifications and the demo outbox's emails are deleted after their retention;
one still to be sent stays, and the beat runs the pruning daily."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.alerts.choices import ChannelKind, NotificationKind, NotificationStatus
from webapp.alerts.models import Channel, Notification, OutboxMessage
from webapp.alerts.tasks import prune_notifications
from webapp.celery import app

pytestmark = pytest.mark.django_db


def test_finished_notifications_and_outbox_emails_go_after_their_retention(
    operator_client, settings
):
    settings.VIGIL_ALERTS_NOTIFICATION_RETENTION_DAYS = 30
    channel = Channel.objects.create(kind=ChannelKind.EMAIL, config={"to": "ops@example.org"})
    kind = NotificationKind.values[0]
    old, retrying, recent = (
        Notification.objects.create(channel=channel, kind=kind, status=status, subject=subject)
        for status, subject in (
            (NotificationStatus.SENT, "old"),
            (NotificationStatus.RETRY, "retrying"),
            (NotificationStatus.SENT, "recent"),
        )
    )
    old_mail = OutboxMessage.objects.create(to="a@example.org", from_email="v@x", subject="old")
    OutboxMessage.objects.create(to="a@example.org", from_email="v@x", subject="recent mail")
    month_ago = timezone.now() - timedelta(days=31)
    Notification.objects.filter(pk__in=[old.pk, retrying.pk]).update(created_at=month_ago)
    OutboxMessage.objects.filter(pk=old_mail.pk).update(created_at=month_ago)

    assert prune_notifications() == {"pruned": 2}
    assert set(Notification.objects.values_list("subject", flat=True)) == {"retrying", "recent"}
    page = operator_client.get("/alerts/outbox/").content.decode()
    assert "recent mail" in page and ">old<" not in page
    assert prune_notifications() == {"pruned": 0}
    tasks = {e["task"] for e in app.conf.beat_schedule.values()}
    assert "vigil.alerts.prune_notifications" in tasks
