"""The alerts engine against real PostgreSQL and a real SMTP server (aiosmtpd): what reaches
whose inbox, once, for diagnosed failures, groups, resolutions, silences, refusals and the
three personas. The flush and send tasks' services run in the test process (conftest
`deliver`) with a clock the test moves; tests/alerts/test_tasks.py runs them in real workers.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.alerts.conftest import REFUSED, deliver, later, text_of, with_email
from tests.alerts.helpers import _now, failed_job
from tests.failures.conftest import xid_event
from webapp.alerts import evaluate, services
from webapp.alerts.choices import AlertState, NotificationStatus
from webapp.alerts.models import Alert, Channel, Notification
from webapp.alerts.selectors import alerts_firing_counts
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet.models import Cluster, Node

pytestmark = pytest.mark.django_db


def test_a_diagnosed_failure_sends_one_email_with_the_diagnosis_and_evidence(fleet, smtp, owner):
    with_email(owner)
    failure = failed_job(fleet, "200")
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    deliver(later(3))  # nothing new: nothing more
    [msg] = smtp.to("alice@example.org")
    body = text_of(msg)
    assert "Job 200" in msg["Subject"] and "gpu off bus" in msg["Subject"]
    assert "Diagnosis: gpu_off_bus (infrastructure" in body
    assert "Blamed: node gpu-node-02, GPU" in body
    assert "GPU-hours lost: 8.0" in body
    assert "Watchdog caught collective operation timeout" in body  # the evidence lines
    assert f"/failures/{failure.pk}/" in body
    note = Notification.objects.get(to="alice@example.org")
    assert msg["Message-ID"] == note.message_id
    assert note.status == NotificationStatus.SENT and note.sent_at is not None
    assert "/alerts/unsubscribe/" in body


def test_ten_failures_of_one_cause_within_a_minute_are_one_grouped_email(fleet, smtp, owner):
    with_email(owner)
    for i in range(10):
        failure = failed_job(fleet, f"30{i}", with_logs=False, nodes=("gpu-node-01",))
        evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    deliver(later(70))
    [msg] = smtp.to("alice@example.org")
    assert "10 alerts firing" in msg["Subject"]
    body = text_of(msg)
    for i in range(10):
        assert f"Job 30{i} " in body


def _node_down(fleet, minutes: float) -> Node:
    node = Node.objects.get(hostname="gpu-node-02")
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now() - timedelta(minutes=minutes))
    return node


def test_a_resolved_alert_sends_one_resolved_email(fleet, smtp, operator, broker):
    with_email(operator)
    node = _node_down(fleet, 20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    [firing] = smtp.to("operator@example.org")
    assert "gpu-node-02 has not reported" in firing["Subject"]
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now())
    evaluate.alerts_evaluate(later(5))
    assert Alert.objects.get(rule__name="node-down").state == AlertState.RESOLVED
    deliver(later(70))  # group_interval after the first email
    deliver(later(80))
    first, resolved = smtp.to("operator@example.org")
    assert resolved["Subject"].startswith("[Vigil resolved]")
    assert "gpu-node-02" in text_of(resolved)


def test_a_node_replaying_old_samples_is_not_down(fleet, smtp, operator, broker):
    # History or a spool replayed now: the newest sample is 20 minutes old, but the node is
    # talking to Vigil. Only silence is "not reporting" (make demo paged every node for this).
    import json

    from tests.helpers import make_batch
    from webapp.telemetry.services import samples_ingest

    with_email(operator)
    old = time.time() - 20 * 60
    batch = make_batch(
        "testcluster", "gpu-node-02", fleet.tokens["gpu-node-02"], t0=old,
        uuid_prefix="GPU-gpu-node-02-",
    )  # fmt: skip
    samples_ingest(json.dumps(batch))
    node = Node.objects.get(hostname="gpu-node-02")
    assert node.last_seen < timezone.now() - timedelta(minutes=19)
    evaluate.alerts_evaluate(timezone.now())
    assert not Alert.objects.filter(rule__name="node-down").exists()
    # Nothing for a while: now it is down.
    evaluate.alerts_evaluate(later(20 * 60))
    assert Alert.objects.filter(rule__name="node-down", node=node).exists()


def test_a_silence_suppresses_until_it_is_expired(fleet, smtp, operator, broker):
    with_email(operator)
    _node_down(fleet, 20)
    silence = services.silence_create(
        user="operator",
        comment="rack 4 maintenance",
        ends_at=later(3600),
        cluster=Cluster.objects.get(name="testcluster"),
    )
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    evaluate.alerts_evaluate(later(3))
    deliver(later(5))
    assert smtp.all() == []
    assert Alert.objects.get(rule__name="node-down").state == AlertState.FIRING
    assert alerts_firing_counts() == []  # silenced alerts are not counted as firing
    services.silence_expire(silence.pk, "operator")
    evaluate.alerts_evaluate(later(6))
    deliver(later(8))
    [msg] = smtp.to("operator@example.org")
    assert "gpu-node-02" in msg["Subject"]


def test_a_node_down_alert_inhibits_that_nodes_gpu_alert(fleet, smtp, operator, broker):
    with_email(operator)
    _node_down(fleet, 20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    end = _now()
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(end - 5, 79, index=3)])
    )
    gpu_failure = FailureEvent.objects.get(kind="gpu_error")
    failure_diagnose(gpu_failure.pk)
    [alert] = evaluate.failure_alerts(gpu_failure.pk)
    assert alert.node.hostname == "gpu-node-02"
    deliver(later(5))
    deliver(later(120))
    [msg] = smtp.to("operator@example.org")  # the node-down email only
    assert "has not reported" in msg["Subject"]


def test_a_recipient_the_server_refuses_disables_the_channel_with_the_error(fleet, smtp, owner):
    with_email(owner, REFUSED)
    failure = failed_job(fleet, "400", with_logs=False, nodes=("gpu-node-01",))
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    assert smtp.all() == []
    channel = Channel.objects.get(config__address=REFUSED)
    assert channel.disabled
    assert "550" in channel.last_error and "User unknown" in channel.last_error
    note = Notification.objects.get(channel=channel)
    assert note.status == NotificationStatus.FAILED


def test_an_outsiders_subscription_never_receives_another_teams_job_failure(
    fleet, smtp, owner, teammate, outsider, broker
):
    for user in (owner, teammate, outsider):
        with_email(user)
        if user != owner:
            services.subscription_create(user)  # every cluster, every severity
    failure = failed_job(fleet, "500", with_logs=False, nodes=("gpu-node-01",))
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    assert len(smtp.to("alice@example.org")) == 1  # the owner
    assert len(smtp.to("carol@example.org")) == 1  # the owner's team
    assert smtp.to("mallory@example.org") == []
    # Mallory's subscription works: an alert about no job reaches her, naming no job.
    _node_down(fleet, 20)
    evaluate.alerts_evaluate(later(3))
    deliver(later(5))
    [msg] = smtp.to("mallory@example.org")
    assert "500" not in text_of(msg) and "train-500" not in text_of(msg)


def test_the_unsubscribe_link_turns_off_that_subscription_without_login(fleet, smtp, owner):
    with_email(owner)
    failure = failed_job(fleet, "600", with_logs=False, nodes=("gpu-node-01",))
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    [msg] = smtp.to("alice@example.org")
    token = re.search(r"/alerts/unsubscribe/([^/\s]+)/", text_of(msg)).group(1)
    sub = services.subscription_unsubscribe(token)
    assert not sub.active
    with pytest.raises(services.AlertsError, match="not valid"):
        services.subscription_unsubscribe(token[:-2] + "xx")
    again = failed_job(fleet, "601", with_logs=False, nodes=("gpu-node-01",))
    evaluate.failure_alerts(again.pk)
    deliver(later(70))
    assert len(smtp.to("alice@example.org")) == 1


def test_a_failed_debug_job_does_not_page_and_big_pretraining_does(fleet, smtp, owner):
    with_email(owner)
    debug = failed_job(fleet, "700", with_logs=False, nodes=("gpu-node-01",), job_type="debug")
    [alert] = evaluate.failure_alerts(debug.pk)
    assert alert.severity == "info"
    big = failed_job(fleet, "701", with_logs=False, gpus=8, job_type="pretrain")
    [alert] = evaluate.failure_alerts(big.pk)
    assert alert.severity == "warning"  # 16 GPUs: below the 64 that page
    fleet_job = big.job
    fleet_job.gpus_requested = 64
    fleet_job.save(update_fields=["gpus_requested"])
    [alert] = evaluate.failure_alerts(big.pk)
    assert alert.severity == "critical"


def test_a_recipient_over_its_hourly_limit_gets_no_more_and_the_log_says_why(
    fleet, smtp, owner, settings
):
    settings.VIGIL_ALERTS_RATE_LIMIT_PER_HOUR = 1
    with_email(owner)
    first = failed_job(fleet, "900", with_logs=False, nodes=("gpu-node-01",))
    evaluate.failure_alerts(first.pk)
    deliver(later(2))
    second = failed_job(fleet, "901", with_logs=False, nodes=("gpu-node-01",))
    evaluate.failure_alerts(second.pk)
    deliver(later(70))
    assert len(smtp.to("alice@example.org")) == 1
    skipped = Notification.objects.get(status=NotificationStatus.SKIPPED)
    assert "rate limit" in skipped.error


def test_a_deactivated_user_receives_no_alert(fleet, smtp, owner, operator, outsider, broker):
    for user in (owner, operator, outsider):
        with_email(user)
        services.subscription_create(user)  # every cluster, every severity
    for user in (operator, outsider):
        user.is_active = False  # left the company: the account stays, the emails stop
        user.save(update_fields=["is_active"])
    _node_down(fleet, 20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    [msg] = smtp.all()
    assert msg["To"] == "alice@example.org"


def test_a_late_failure_email_says_since_when_it_happened_and_how_late(fleet, smtp, owner):
    """A job failure that reached Vigil 53 min after it happened (a watcher's spool replayed):
    the email's "since" is the failure's time, not the alert's, and says it came late."""
    with_email(owner)
    end = _now() - 53 * 60
    fleet.run_job("500", end - 3600, None, nodes=("gpu-node-01",))
    fleet.run_job("500", end - 3600, end, nodes=("gpu-node-01",))
    failure = failure_diagnose(FailureEvent.objects.get(job__scheduler_id="500").pk)
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    [msg] = smtp.to("alice@example.org")
    late_min = round((failure.detected_at - failure.occurred_at).total_seconds() / 60)
    assert late_min >= 53
    since = failure.occurred_at.strftime("%Y-%m-%d %H:%M:%S")
    assert f"Since: {since} UTC (reported {late_min} min later)" in text_of(msg)
    html = msg.get_body(("html",)).get_content()
    assert f"since {since} UTC (reported {late_min} min later)" in html
