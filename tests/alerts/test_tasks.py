"""The alerts tasks in real Celery workers: a failure's email goes from the diagnosis to the
inbox on events alone, and a worker SIGKILLed after a Notification is on record but before it
is sent neither loses nor doubles the email."""

from __future__ import annotations

import time

import pytest

from tests.alerts.conftest import text_of, with_email
from tests.helpers import wait_for
from webapp.alerts.choices import NotificationStatus
from webapp.alerts.models import Notification

pytestmark = pytest.mark.timeout(180)


def _fail_a_job(fleet, job_id: str) -> None:
    end = float(int(time.time())) - 5
    fleet.run_job(job_id, end - 3600, end, nodes=("gpu-node-01",))


def _worker_env(smtp, **extra: str) -> dict[str, str]:
    # A send's deadline is at most half the 5 s leases below (settings refuses more).
    return {
        "EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}",
        "VIGIL_ALERTS_SEND_TIMEOUT_S": "2",
        **extra,
    }


def test_a_failure_reaches_the_inbox_on_events_alone(committed_fleet, smtp, owner, worker_factory):
    with_email(owner)
    worker_factory(env=_worker_env(smtp))
    _fail_a_job(committed_fleet, "800")  # job end -> diagnosis -> alert -> flush -> send
    [msg] = wait_for(lambda: smtp.to("alice@example.org"), timeout=60)
    assert "Job 800" in msg["Subject"]
    assert "Diagnosis:" in text_of(msg)


def test_a_worker_killed_between_the_notification_row_and_the_send_sends_it_once(
    committed_fleet, smtp, owner, worker_factory
):
    with_email(owner)
    # The first worker stops for 60 s after claiming a notification, before sending it.
    first = worker_factory(
        env=_worker_env(smtp, VIGIL_ALERTS_TEST_PAUSE_BEFORE_SEND_S="60", VIGIL_ALERTS_LEASE_S="5")
    )
    _fail_a_job(committed_fleet, "801")
    note = wait_for(
        lambda: Notification.objects.filter(status=NotificationStatus.SENDING).first(), timeout=60
    )
    first.kill()
    assert smtp.all() == []
    # The broker hands the unacknowledged send to the next worker; it claims the row once the
    # dead worker's lease is over.
    worker_factory(env=_worker_env(smtp, VIGIL_ALERTS_LEASE_S="5"))
    [msg] = wait_for(lambda: smtp.to("alice@example.org"), timeout=90)
    note.refresh_from_db()
    wait_for(lambda: Notification.objects.get(pk=note.pk).status == NotificationStatus.SENT)
    time.sleep(8)  # a second redelivery, if there were one, would have sent by now
    assert len(smtp.to("alice@example.org")) == 1
    assert msg["Message-ID"] == note.message_id
    assert Notification.objects.get(pk=note.pk).attempts == 2
