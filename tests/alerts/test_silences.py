"""Who a silence mutes, through the pages and a real SMTP server, with the personas: a team's
silence mutes only that team's recipients (never the operators' alerts about the hardware or
recovery), an operator's silence naming no team mutes everyone, and only a silence's author
or an operator expires it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tests.alerts.conftest import deliver, later, with_email
from tests.alerts.helpers import failed_job
from tests.conftest import PASSWORD
from webapp.alerts import evaluate, services
from webapp.alerts.models import Silence
from webapp.teams.models import Team

pytestmark = pytest.mark.django_db


def _until(hours: float = 3) -> str:
    return (timezone.now() + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M")


@pytest.fixture
def everyone(fleet, smtp, owner, teammate, operator, outsider):
    """Every persona has an address; Carol and Mallory subscribe to every cluster."""
    for user in (owner, teammate, operator, outsider):
        with_email(user)
    services.subscription_create(teammate)
    services.subscription_create(outsider)
    return smtp


def test_a_teams_silence_mutes_its_members_but_never_the_operators_hardware_alert(
    everyone, fleet, teammate_client
):
    team = Team.objects.get(name="pretraining")
    made = teammate_client.post(
        "/alerts/silences/",
        {"cause": "gpu_off_bus", "team": team.pk, "until": _until(), "why": "reseating"},
    )
    assert made.status_code == 302
    failure = failed_job(fleet, "200")  # gpu_off_bus: a hardware cause, operators are told
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    deliver(later(70))
    assert everyone.to("carol@example.org") == []  # her team's silence
    [operator_email] = everyone.to("operator@example.org")
    assert "Job 200" in operator_email["Subject"]
    # Alice owns the job but is not in the team: a team cannot mute her own job's email.
    assert len(everyone.to("alice@example.org")) == 1
    assert everyone.to("mallory@example.org") == []  # another team's job, as always
    page = teammate_client.get("/alerts/silences/").content.decode()
    assert "team pretraining's recipients only" in page


def test_an_operators_silence_naming_no_team_mutes_everyone(everyone, fleet, operator_client):
    made = operator_client.post(
        "/alerts/silences/", {"cause": "gpu_off_bus", "until": _until(), "why": "rack 4"}
    )
    assert made.status_code == 302
    failure = failed_job(fleet, "200")
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    deliver(later(70))
    assert everyone.all() == []


def test_an_operators_silence_link_mutes_everyone_and_a_members_mutes_their_team(
    everyone, fleet, operator_client, teammate_client
):
    failure = failed_job(fleet, "200")
    evaluate.failure_alerts(failure.pk)
    operator_row = operator_client.get("/alerts/").content.decode()
    member_row = teammate_client.get("/alerts/").content.decode()
    team = Team.objects.get(name="pretraining")
    assert f"team={team.pk}" not in operator_row  # the operator's link names no team
    assert f"team={team.pk}" in member_row


def test_only_a_silences_author_or_an_operator_expires_it(
    everyone, django_user_model, teammate_client, outsider_client, operator_client
):
    team = Team.objects.get(name="pretraining")
    dave = django_user_model.objects.create_user("dave", password=PASSWORD)
    team.users.add(dave)
    made = teammate_client.post(
        "/alerts/silences/",
        {"cause": "gpu_off_bus", "team": team.pk, "until": _until(), "why": "carol's window"},
    )
    assert made.status_code == 302
    carols = Silence.objects.get()
    client = Client()
    client.force_login(dave)
    # Dave is in the same team but did not write it: no button, and the POST is refused.
    page = client.get("/alerts/silences/").content.decode()
    assert "Expire now" not in page
    assert client.post(f"/alerts/silences/{carols.pk}/expire/").status_code == 403
    assert outsider_client.post(f"/alerts/silences/{carols.pk}/expire/").status_code == 403
    carols.refresh_from_db()
    assert carols.ends_at > timezone.now()
    # An operator's silence: not even a team member may expire it.
    assert (
        operator_client.post(
            "/alerts/silences/", {"cause": "ib_link", "until": _until(), "why": "ops"}
        ).status_code
        == 302
    )
    ops = Silence.objects.get(created_by="operator")
    assert teammate_client.post(f"/alerts/silences/{ops.pk}/expire/").status_code == 403
    # The author and an operator may.
    assert "Expire now" in teammate_client.get("/alerts/silences/").content.decode()
    assert teammate_client.post(f"/alerts/silences/{carols.pk}/expire/").status_code == 302
    assert operator_client.post(f"/alerts/silences/{ops.pk}/expire/").status_code == 302
    for s in Silence.objects.all():
        assert s.ends_at <= timezone.now()
