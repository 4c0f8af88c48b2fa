"""/healthz: open to load balancers by key only; 200 when PostgreSQL and the broker answer."""

from __future__ import annotations

import pytest
from django.urls import reverse

URL = "/healthz"

pytestmark = pytest.mark.django_db


def test_url_name():
    assert reverse("healthz") == URL


def test_with_the_key_in_the_header_reports_both_checks(client, settings):
    settings.VIGIL_HEALTH_KEY = "s3cret-health-key"
    response = client.get(URL, headers={"Authorization": "Bearer s3cret-health-key"})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] and body["checks"]["broker"]["ok"]
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


def test_the_key_in_the_query_string_is_refused(client, settings):
    """Query strings end up in access logs: a key there is never read, even the right one."""
    settings.VIGIL_HEALTH_KEY = "s3cret-health-key"
    response = client.get(URL + "?key=s3cret-health-key")
    assert response.status_code == 401
    assert "Authorization: Bearer" in response.json()["error"]


def test_without_or_with_a_wrong_key_is_refused(client, settings):
    settings.VIGIL_HEALTH_KEY = "s3cret-health-key"
    assert client.get(URL).status_code == 401
    assert client.get(URL + "?key=s3cret").status_code == 401
    response = client.get(URL, headers={"Authorization": "Bearer wrong"})
    assert response.status_code == 401
    assert "checks" not in response.json()


def test_no_key_is_open_in_debug_and_closed_otherwise(client, settings):
    settings.VIGIL_HEALTH_KEY = ""
    settings.DEBUG = True
    assert client.get(URL).status_code == 200
    settings.DEBUG = False
    response = client.get(URL)
    assert response.status_code == 403
    assert "VIGIL_HEALTH_KEY" in response.json()["error"]


def test_needs_no_login_session(client, settings):
    settings.VIGIL_HEALTH_KEY = "k" * 20
    response = client.get(URL, headers={"Authorization": "Bearer " + "k" * 20})
    assert response.status_code == 200 and "Location" not in response


def test_broker_down_answers_503_naming_it(client, settings, tmp_path):
    settings.VIGIL_HEALTH_KEY = "s3cret-health-key"
    settings.CELERY_BROKER_URL = f"redis+socket://{tmp_path / 'nothing-listens-here.sock'}"
    response = client.get(URL, headers={"Authorization": "Bearer s3cret-health-key"})
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "fail"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is False and body["checks"]["broker"]["error"]


def test_post_is_not_allowed(client, settings):
    settings.VIGIL_HEALTH_KEY = ""
    settings.DEBUG = True
    assert client.post(URL).status_code == 405
