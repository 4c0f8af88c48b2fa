"""The alerts pages with the personas: alerts and silences from a row, who may silence what,
one's own subscriptions, channels, the delivery log, the unsubscribe link without a login and
the outbox; every table's CSV; a bounded number of queries on the alert list."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tests.alerts.conftest import REFUSED, deliver, later, with_email
from tests.alerts.helpers import failed_job
from webapp.alerts import evaluate, services
from webapp.alerts.choices import AlertState, ChannelKind, NotificationStatus
from webapp.alerts.models import Alert, Channel, Notification, OutboxMessage, Silence, Subscription
from webapp.fleet.models import Cluster
from webapp.teams.models import Team

pytestmark = pytest.mark.django_db


def _csv(response) -> list[dict]:
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.fixture
def job_alert(fleet, smtp, owner, teammate) -> Alert:
    """Alice's job 200 failed (gpu_off_bus, evidence lines); her email was sent. Carol's team
    owns the job (tests/conftest.py's rule)."""
    with_email(owner)
    failure = failed_job(fleet, "200")
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    return Alert.objects.get(rule__name="job-failed", job__scheduler_id="200")


PAGES = (
    "/alerts/",
    "/alerts/silences/",
    "/alerts/channels/",
    "/alerts/deliveries/",
    "/alerts/outbox/",
    "/api/v1/alerts.csv",
    "/api/v1/alerts/deliveries.csv",
)


def test_anonymous_visitors_are_sent_to_the_login_page(client):
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/login/"), path


def test_the_alert_list_shows_the_failure_and_filters_it(job_alert, outsider_client):
    page = outsider_client.get("/alerts/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-alert="{job_alert.pk}"' in html
    assert f"/failures/{job_alert.failure_id}/" in html
    assert "pretraining" in html  # the team column
    # Metadata is public inside Vigil; the evidence lines are not on this page.
    assert "Watchdog caught" not in html
    assert (
        f'data-alert="{job_alert.pk}"'
        in outsider_client.get("/alerts/?rule=job-failed").content.decode()
    )
    resolved = outsider_client.get("/alerts/?state=resolved").content.decode()
    assert f'data-alert="{job_alert.pk}"' not in resolved and 'id="no-alerts"' in resolved
    assert "No alert matches" in outsider_client.get("/alerts/?node=nope").content.decode()
    bad = outsider_client.get("/alerts/?severity=loud").content.decode()
    assert "severity: unknown value" in bad  # a bad filter is named, the page still draws


def test_the_silence_link_is_offered_to_the_team_and_operators_only(
    job_alert, teammate_client, outsider_client, owner_client, operator_client
):
    node = f"&amp;node={job_alert.node.hostname}" if job_alert.node else ""
    link = (
        f"/alerts/silences/?cluster=testcluster{node}"
        f"&amp;cause={job_alert.cause}&amp;team={job_alert.team_id}"
    )
    assert link in teammate_client.get("/alerts/").content.decode()
    assert 'class="silence"' in operator_client.get("/alerts/").content.decode()
    assert 'class="silence"' not in outsider_client.get("/alerts/").content.decode()
    # Alice owns the job but is not in the team the rule gives it (she gets its emails).
    assert 'class="silence"' not in owner_client.get("/alerts/").content.decode()


def test_a_teammate_silences_their_teams_alert_from_the_prefilled_form(job_alert, teammate_client):
    team = Team.objects.get(name="pretraining")
    form = teammate_client.get(f"/alerts/silences/?cause={job_alert.cause}&team={team.pk}")
    html = form.content.decode()
    assert f'<option value="{job_alert.cause}" selected>' in html
    assert f'<option value="{team.pk}" selected>pretraining</option>' in html
    until = (timezone.now() + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M")
    post = {"cluster": "testcluster", "cause": job_alert.cause, "until": until, "why": "reseat"}
    refused = teammate_client.post("/alerts/silences/", post)
    assert refused.status_code == 400
    assert "team: choose your team" in refused.content.decode()
    assert not Silence.objects.exists()
    done = teammate_client.post("/alerts/silences/", {**post, "team": team.pk})
    assert done.status_code == 302
    silence = Silence.objects.get()
    assert (silence.team, silence.cause, silence.created_by) == (team, job_alert.cause, "carol")
    assert silence.cluster.name == "testcluster"
    listed = teammate_client.get(done["Location"]).content.decode()
    assert "reseat" in listed and "Expire now" in listed


def test_who_may_create_and_expire_silences(
    job_alert, teammate_client, outsider_client, operator_client
):
    until = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    other = Team.objects.create(name="inference")
    post = {"cluster": "testcluster", "until": until, "why": "rack 4"}
    # An outsider (in no team) may not silence at all.
    assert outsider_client.post("/alerts/silences/", post).status_code == 403
    # A member may not name another team.
    wrong = teammate_client.post("/alerts/silences/", {**post, "team": other.pk})
    assert (
        wrong.status_code == 400
        and "not a team whose alerts you may silence" in wrong.content.decode()
    )
    # An operator silences a whole cluster; the teammate may not expire it, the operator may.
    assert operator_client.post("/alerts/silences/", post).status_code == 302
    silence = Silence.objects.get()
    assert silence.created_by == "operator"
    assert teammate_client.post(f"/alerts/silences/{silence.pk}/expire/").status_code == 403
    assert operator_client.post(f"/alerts/silences/{silence.pk}/expire/").status_code == 302
    silence.refresh_from_db()
    assert silence.ends_at <= timezone.now() and "expired by operator" in silence.comment
    # A past "until" and a silence naming nothing are refused with the field named.
    past = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    r = operator_client.post("/alerts/silences/", {**post, "until": past})
    assert r.status_code == 400 and "until: must be in the future" in r.content.decode()
    r = operator_client.post("/alerts/silences/", {"until": until, "why": "x"})
    assert "names at least one of cluster, node, cause or team" in r.content.decode()
    r = operator_client.post("/alerts/silences/", {**post, "node": "gpu-node-99"})
    assert "node: no node &#x27;gpu-node-99&#x27; on cluster testcluster" in r.content.decode()
    rows = _csv(operator_client.get("/api/v1/alerts/silences.csv"))
    assert [r["why"] for r in rows] == ["rack 4 (expired by operator)"]


def test_subscriptions_are_each_users_own(fleet, owner, outsider, owner_client, outsider_client):
    with_email(owner)
    with_email(outsider)
    r = owner_client.post(
        "/alerts/subscriptions/", {"clusters": ["testcluster"], "severities": ["critical"]}
    )
    assert r.status_code == 302
    sub = Subscription.objects.get(user=owner, scope="clusters")
    assert [c.name for c in sub.clusters.all()] == ["testcluster"] and sub.severities == [
        "critical"
    ]
    page = owner_client.get("/alerts/channels/").content.decode()
    assert f'data-subscription="{sub.pk}"' in page and "alice@example.org" in page
    # Mallory sees neither Alice's subscription nor her channel, and cannot touch them.
    other = outsider_client.get("/alerts/channels/").content.decode()
    assert f'data-subscription="{sub.pk}"' not in other and "alice@example.org" not in other
    assert outsider_client.get(f"/alerts/subscriptions/{sub.pk}/").status_code == 404
    assert outsider_client.post(f"/alerts/subscriptions/{sub.pk}/delete/").status_code == 404
    assert _csv(outsider_client.get("/api/v1/alerts/subscriptions.csv")) == []
    assert (
        "alice@example.org"
        not in outsider_client.get("/api/v1/alerts/channels.csv").content.decode()
    )
    # Alice edits it (all severities, turned off), then deletes it.
    r = owner_client.post(f"/alerts/subscriptions/{sub.pk}/", {"clusters": ["testcluster"]})
    assert r.status_code == 302
    sub.refresh_from_db()
    assert sub.severities == [] and sub.active is False
    bad = owner_client.post("/alerts/subscriptions/", {"severities": ["loud"]})
    assert bad.status_code == 400 and "severities: Select a valid choice" in bad.content.decode()
    assert owner_client.post(f"/alerts/subscriptions/{sub.pk}/delete/").status_code == 302
    assert not Subscription.objects.filter(pk=sub.pk).exists()


def test_a_refused_address_shows_as_a_disabled_channel_that_an_operator_enables(
    fleet, smtp, owner, owner_client, operator_client
):
    with_email(owner, REFUSED)
    failure = failed_job(fleet, "210", with_logs=False, nodes=("gpu-node-01",))
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    channel = Channel.objects.get(config__address=REFUSED)
    assert channel.disabled
    page = owner_client.get("/alerts/channels/").content.decode()
    assert "disabled" in page and "User unknown" in page  # the server's words
    log = owner_client.get("/alerts/deliveries/").content.decode()
    assert (
        REFUSED in log and '<span class="badge bad">failed</span>' in log and "User unknown" in log
    )
    assert owner_client.post(f"/alerts/channels/{channel.pk}/enable/").status_code == 403
    assert operator_client.post(f"/alerts/channels/{channel.pk}/enable/").status_code == 302
    channel.refresh_from_db()
    assert not channel.disabled
    rows = _csv(operator_client.get("/api/v1/alerts/channels.csv"))
    assert [r["disabled"] for r in rows if r["target"] == REFUSED] == ["False"]


def test_the_delivery_log_shows_only_ones_own_deliveries(
    job_alert, owner_client, outsider_client, operator_client
):
    note = Notification.objects.get(to="alice@example.org")
    assert note.status == NotificationStatus.SENT
    assert "alice@example.org" in owner_client.get("/alerts/deliveries/").content.decode()
    mine = _csv(owner_client.get("/api/v1/alerts/deliveries.csv"))
    assert [(r["recipient"], r["status"]) for r in mine] == [("alice@example.org", "sent")]
    outsider = outsider_client.get("/alerts/deliveries/").content.decode()
    assert "alice@example.org" not in outsider and 'id="no-deliveries"' in outsider
    assert _csv(outsider_client.get("/api/v1/alerts/deliveries.csv")) == []
    assert (
        _csv(outsider_client.get(f"/api/v1/alerts/deliveries.csv?channel={note.channel_id}")) == []
    )
    everyone = _csv(operator_client.get("/api/v1/alerts/deliveries.csv"))
    assert "alice@example.org" in {r["recipient"] for r in everyone}


def test_the_unsubscribe_link_works_without_login_get_shows_post_does(job_alert):
    sub = Subscription.objects.get(user__username="alice", scope="own_jobs")
    token = services.unsubscribe_token(sub)
    anonymous = Client(enforce_csrf_checks=True)
    shown = anonymous.get(f"/alerts/unsubscribe/{token}/")
    assert shown.status_code == 200
    assert "My jobs&#x27; failures" in shown.content.decode()
    assert "alice@example.org" in shown.content.decode()
    sub.refresh_from_db()
    assert sub.active  # a GET (a mail scanner following the link) changes nothing
    # The POST needs the page's CSRF token.
    assert anonymous.post(f"/alerts/unsubscribe/{token}/").status_code == 403
    csrf = anonymous.cookies["csrftoken"].value
    done = anonymous.post(f"/alerts/unsubscribe/{token}/", {"csrfmiddlewaretoken": csrf})
    assert done.status_code == 200 and 'id="done"' in done.content.decode()
    sub.refresh_from_db()
    assert not sub.active
    for bad in (token[:-3] + "xyz", "nonsense"):
        r = anonymous.get(f"/alerts/unsubscribe/{bad}/")
        assert r.status_code == 400
        assert "This unsubscribe link is not valid" in r.content.decode()
    gone = services.unsubscribe_token(sub)
    sub.delete()
    r = anonymous.get(f"/alerts/unsubscribe/{gone}/")
    assert r.status_code == 400 and "no longer exists" in r.content.decode()


def test_the_outbox_is_for_operators_and_never_runs_the_emails_html(
    operator_client, outsider_client, owner_client, db
):
    m = OutboxMessage.objects.create(
        to="alice@example.org",
        from_email="vigil@localhost",
        subject="[Vigil critical] Job 200 failed",
        body_text="Diagnosis: gpu_off_bus",
        body_html='<p>Diagnosis</p><script>alert("x")</script>',
    )
    listing = operator_client.get("/alerts/outbox/").content.decode()
    assert "[Vigil critical] Job 200 failed" in listing
    page = operator_client.get(f"/alerts/outbox/{m.pk}/").content.decode()
    assert 'sandbox=""' in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert '<script>alert("x")' not in page
    assert "Diagnosis: gpu_off_bus" in page
    assert [r["subject"] for r in _csv(operator_client.get("/api/v1/alerts/outbox.csv"))] == [
        m.subject
    ]
    for c in (outsider_client, owner_client):
        assert c.get("/alerts/outbox/").status_code == 403
        assert c.get(f"/alerts/outbox/{m.pk}/").status_code == 403
        assert c.get("/api/v1/alerts/outbox.csv").status_code == 403


def test_the_alert_list_and_its_csv(job_alert, operator_client):
    rows = _csv(operator_client.get("/api/v1/alerts.csv?rule=job-failed"))
    assert [(r["job"], r["state"], r["team"], r["cause"]) for r in rows] == [
        ("200", AlertState.FIRING, "pretraining", job_alert.cause)
    ]
    assert _csv(operator_client.get("/api/v1/alerts.csv?state=resolved")) == []


def test_the_alert_list_runs_a_bounded_number_of_queries(
    job_alert, teammate_client, django_assert_max_num_queries
):
    cluster = Cluster.objects.get(name="testcluster")
    now = timezone.now()
    for i in range(120):
        Alert.objects.create(
            rule=job_alert.rule,
            group=job_alert.group,
            fingerprint=f"fp{i}",
            labels={},
            summary=f"alert {i}",
            severity="warning",
            state=AlertState.RESOLVED,
            cluster=cluster,
            node=job_alert.node,
            job=job_alert.job,
            team=job_alert.team,
            starts_at=now - timedelta(minutes=i),
            last_seen_at=now,
            ends_at=now,
        )
    with django_assert_max_num_queries(10):
        page = teammate_client.get("/alerts/")
    assert page.content.decode().count("data-alert=") == 50
    assert "page 1 of 3" in page.content.decode()
    with django_assert_max_num_queries(10):
        assert teammate_client.get("/alerts/deliveries/").status_code == 200


def test_channels_of_a_team_show_to_its_members(fleet, teammate, teammate_client, outsider_client):
    team = Team.objects.get(name="pretraining")
    Channel.objects.create(
        kind=ChannelKind.WEBHOOK, name="pretraining-hook", team=team, config={"url": "http://h"}
    )
    assert "pretraining-hook" in teammate_client.get("/alerts/channels/").content.decode()
    assert "pretraining-hook" not in outsider_client.get("/alerts/channels/").content.decode()
