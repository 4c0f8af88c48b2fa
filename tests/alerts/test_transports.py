"""Channels other than email, against real servers: Vigil's alert appears in a real
Alertmanager's /api/v2/alerts and then leaves it resolved; a webhook gets a JSON POST signed
with HMAC-SHA256, and a webhook that answers 4xx disables its channel."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ValidationError
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


def test_a_channel_of_an_unknown_kind_is_refused_never_taken_for_alertmanager(
    fleet, operator, webhook, broker
):
    """A kind with no transport (a row written by hand, a kind since removed) fails its
    notification and disables the channel with the reason; nothing is posted anywhere."""
    hook, url = webhook
    channel = Channel.objects.create(kind="pager", config={"url": url})
    services.subscription_create(operator, channel=channel)
    _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    assert hook.received == []
    note = Notification.objects.get(channel=channel)
    assert note.status == NotificationStatus.FAILED
    assert "channel kind 'pager' has no transport" in note.error
    channel.refresh_from_db()
    assert channel.disabled and "'pager' has no transport" in channel.last_error


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


# --- what a channel may point at -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "config", "problem"),
    [
        (ChannelKind.WEBHOOK, {"url": "file:///etc/passwd"}, "https"),
        (ChannelKind.WEBHOOK, {"url": "http://hooks.example.org/x"}, "https"),
        (ChannelKind.ALERTMANAGER, {"url": "gopher://am.example.org"}, "https"),
        (ChannelKind.WEBHOOK, {"url": "https:///no-host"}, "host"),
        (ChannelKind.WEBHOOK, {"url": "https://h.example.org", "secret_env": "SECRET_KEY"}, ""),
    ],
)
def test_a_channel_pointing_anywhere_but_https_or_localhost_is_refused(
    fleet, kind, config, problem
):
    channel = Channel(kind=kind, config=config)
    with pytest.raises(ValidationError) as refused:
        channel.full_clean()
    message = " ".join(refused.value.messages)
    assert "config" in refused.value.message_dict
    if config.get("secret_env"):
        assert "secret_env: 'SECRET_KEY'" in message and "VIGIL_CHANNEL_SECRET_" in message
    else:
        assert problem in message


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.org/services/T0/B0/abc",
        "http://localhost:9093",
        "http://127.0.0.1:8080/hook",
        "http://[::1]:9093/",
    ],
)
def test_https_and_plain_http_to_this_host_are_accepted(fleet, url):
    config = {"url": url, "secret_env": "VIGIL_CHANNEL_SECRET_OPS"}
    Channel(kind=ChannelKind.WEBHOOK, config=config).full_clean()


def test_the_admin_refuses_a_file_url(fleet, admin_client):
    page = admin_client.post(
        "/admin/alerts/channel/add/",
        {"kind": "webhook", "name": "x", "config": '{"url": "file:///etc/shadow"}'},
    )
    assert page.status_code == 200  # the form again, with the problem
    assert "file" in page.content.decode() and not Channel.objects.exists()


def test_a_stored_channel_to_a_file_or_plain_http_is_never_sent_to(fleet, operator, broker):
    """A row written before the check (or by hand) is refused when sent, and disabled."""
    for url in ("file:///etc/passwd", "http://hooks.example.org/x"):
        channel = Channel.objects.create(kind=ChannelKind.WEBHOOK, config={"url": url})
        services.subscription_create(operator, channel=channel)
    _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    for channel in Channel.objects.filter(kind=ChannelKind.WEBHOOK):
        assert channel.disabled and "https" in channel.last_error
        assert Notification.objects.get(channel=channel).status == NotificationStatus.FAILED


class _Redirect(BaseHTTPRequestHandler):
    location = ""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.send_response(307)
        self.send_header("Location", type(self).location)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_webhook_redirect_is_not_followed(fleet, operator, webhook, broker):
    hook, url = webhook
    _Redirect.location = url  # a 307 keeps the POST and its body
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        channel = Channel.objects.create(
            kind=ChannelKind.WEBHOOK,
            config={"url": f"http://127.0.0.1:{server.server_address[1]}/moved"},
        )
        services.subscription_create(operator, channel=channel)
        _node_down(20)
        evaluate.alerts_evaluate(timezone.now())
        deliver(later(2))
    finally:
        server.shutdown()
    assert hook.received == []  # the redirect's target got nothing
    note = Notification.objects.get(channel=channel)
    assert note.status == NotificationStatus.FAILED and "redirect" in note.error


def test_secret_env_names_only_channel_secrets(
    fleet, operator, webhook, settings, broker, monkeypatch
):
    hook, url = webhook
    settings.VIGIL_WEBHOOK_SECRET = ""
    monkeypatch.setenv("VIGIL_CHANNEL_SECRET_OPS", "ops-hook-key")
    leaky = Channel.objects.create(
        kind=ChannelKind.WEBHOOK, config={"url": url + "/a", "secret_env": "SECRET_KEY"}
    )
    good = Channel.objects.create(
        kind=ChannelKind.WEBHOOK,
        config={"url": url + "/b", "secret_env": "VIGIL_CHANNEL_SECRET_OPS"},
    )
    for channel in (leaky, good):
        services.subscription_create(operator, channel=channel)
    _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    deliver(later(2))
    [(headers, body)] = hook.received  # the good one only
    assert headers[SIGNATURE_HEADER] == (
        "sha256=" + hmac.new(b"ops-hook-key", body, hashlib.sha256).hexdigest()
    )
    refused = Notification.objects.get(channel=leaky)
    assert refused.status == NotificationStatus.FAILED
    assert "secret_env: 'SECRET_KEY'" in refused.error and "VIGIL_CHANNEL_SECRET_" in refused.error


def test_a_webhook_url_is_shown_and_logged_without_its_path(
    fleet, operator, operator_client, broker, caplog
):
    with socket.socket() as s:  # a port nothing listens on: the send fails and is logged
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret_path = "/services/T024/B0LD/Xq9secretTOKENz"
    channel = Channel.objects.create(
        kind=ChannelKind.WEBHOOK, config={"url": f"http://127.0.0.1:{port}{secret_path}"}
    )
    services.subscription_create(operator, channel=channel)
    _node_down(20)
    evaluate.alerts_evaluate(timezone.now())
    with caplog.at_level("WARNING"):
        deliver(later(2))
    note = Notification.objects.get(channel=channel)
    assert note.status == NotificationStatus.RETRY and note.error
    shown = [
        operator_client.get("/alerts/channels/").content.decode(),
        operator_client.get("/alerts/deliveries/").content.decode(),
        operator_client.get("/api/v1/alerts/channels.csv").content.decode(),
        operator_client.get("/api/v1/alerts/deliveries.csv").content.decode(),
        caplog.text,
        note.error,
        note.to,
        str(channel),
    ]
    assert f"http://127.0.0.1:{port}/..." in shown[0] and f"http://127.0.0.1:{port}/..." in shown[4]
    for text in shown:
        assert "Xq9secretTOKENz" not in text
