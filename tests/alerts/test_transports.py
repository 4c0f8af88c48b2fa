"""Channels other than email, against real servers: Vigil's alert appears in a real
Alertmanager's /api/v2/alerts and then leaves it resolved; a webhook gets a JSON POST signed
with HMAC-SHA256, and a webhook that answers 4xx disables its channel."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from tests.alertmanager import alertmanager  # noqa: F401 (fixture)
from tests.alerts.conftest import deliver, later, with_email
from tests.helpers import wait_for
from webapp.alerts import evaluate, services
from webapp.alerts.choices import ChannelKind, NotificationStatus
from webapp.alerts.models import Channel, Notification
from webapp.alerts.transports import SIGNATURE_HEADER
from webapp.fleet.models import Cluster, Node

pytestmark = pytest.mark.django_db


def _node_down(minutes: float) -> Node:
    node = Node.objects.get(hostname="gpu-node-02")
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now() - timedelta(minutes=minutes))
    return node


def test_vigils_alert_appears_in_a_real_alertmanager_then_resolves(
    fleet,
    operator,
    alertmanager,  # noqa: F811
    broker,
):
    channel = Channel.objects.create(
        kind=ChannelKind.ALERTMANAGER, config={"url": alertmanager.url}
    )
    services.subscription_create(operator, channel=channel)
    node = _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    [found] = wait_for(lambda: alertmanager.alerts(alertname="node-down"), timeout=30)
    assert found["labels"]["node"] == "gpu-node-02"
    assert found["labels"]["cluster"] == "testcluster"
    assert found["labels"]["severity"] == "warning"
    assert found["status"]["state"] == "active"
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now())
    evaluate.alerts_evaluate(later(5))
    deliver(later(70))
    wait_for(lambda: alertmanager.alerts(alertname="node-down") == [], timeout=30)
    assert Notification.objects.filter(channel=channel, status=NotificationStatus.SENT).count() == 2


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[dict, bytes]] = []
    answer = 200

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((dict(self.headers), body))
        self.send_response(type(self).answer)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    _Hook.received = []
    _Hook.answer = 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield _Hook, f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_a_webhook_gets_a_signed_json_post(fleet, operator, webhook, settings, broker):
    hook, url = webhook
    settings.VIGIL_WEBHOOK_SECRET = "s3cret-for-tests"
    channel = Channel.objects.create(kind=ChannelKind.WEBHOOK, config={"url": url})
    services.subscription_create(operator, channel=channel)
    _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    [(headers, body)] = hook.received
    expected = "sha256=" + hmac.new(b"s3cret-for-tests", body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == expected
    payload = json.loads(body)
    assert payload["status"] == "firing"
    assert payload["alerts"][0]["labels"]["node"] == "gpu-node-02"
    assert "s3cret" not in Notification.objects.get(channel=channel).error


def test_a_webhook_that_answers_4xx_disables_its_channel(fleet, operator, webhook, broker):
    hook, url = webhook
    hook.answer = 410
    channel = Channel.objects.create(kind=ChannelKind.WEBHOOK, config={"url": url})
    services.subscription_create(operator, channel=channel)
    _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    channel.refresh_from_db()
    assert channel.disabled
    assert "HTTP 410" in channel.last_error


def test_the_alertmanager_refresh_posts_only_what_routing_lets_through(
    fleet, smtp, operator, webhook, broker
):
    """The refresh re-posts firing alerts so that Alertmanager keeps them: only those the
    channel's subscription asks for, not silenced, and not for a deactivated subscriber."""
    hook, url = webhook
    with_email(operator)
    channel = Channel.objects.create(
        kind=ChannelKind.ALERTMANAGER, config={"url": url.removesuffix("/hook")}
    )
    sub = services.subscription_create(operator, channel=channel, severities=["critical"])
    _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    assert len(smtp.to("operator@example.org")) == 1  # node-down (warning) was told by email
    evaluate.alertmanager_refresh(later(120))
    deliver(later(121))
    assert hook.received == []  # the channel asked for critical alerts only
    sub.severities = []
    sub.save()
    silence = services.silence_create(
        user="operator",
        comment="rack 4",
        ends_at=later(3600),
        cluster=Cluster.objects.get(name="testcluster"),
    )
    evaluate.alertmanager_refresh(later(240))
    deliver(later(241))
    assert hook.received == []  # silenced
    services.silence_expire(silence.pk, "operator")
    evaluate.alertmanager_refresh(later(360))
    deliver(later(361))
    [(_, body)] = hook.received
    assert [a["labels"]["alertname"] for a in json.loads(body)] == ["node-down"]
    operator.is_active = False
    operator.save(update_fields=["is_active"])
    evaluate.alertmanager_refresh(later(480))
    deliver(later(481))
    assert len(hook.received) == 1  # nothing more for a deactivated subscriber
