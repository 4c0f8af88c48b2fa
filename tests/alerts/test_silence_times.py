"""A silence starts when the operator says (a maintenance window tonight), and its times are
picked on a 24-hour clock, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from webapp.alerts.models import Silence
from webapp.fleet.models import Cluster


def test_the_form_picks_times_on_a_24_hour_clock(operator_client, db):
    page = operator_client.get("/alerts/silences/").content.decode()
    assert 'type="datetime-local"' not in page  # en-US browsers draw it with AM/PM
    assert '<option value="23:30">23:30</option>' in page
    assert 'name="start_date"' in page and 'name="until_date"' in page


def test_a_silence_starts_when_asked(operator_client, db):
    Cluster.objects.create(name="kestrel")
    day = (timezone.now() + timedelta(days=1)).date()
    post = {
        "cluster": "kestrel",
        "start_date": day.isoformat(),
        "start_time": "22:00",
        "until_date": day.isoformat(),
        "until_time": "23:30",
        "why": "rack 4 firmware",
    }
    response = operator_client.post("/alerts/silences/", post)
    assert response.status_code == 302, response.content.decode()[:500]
    silence = Silence.objects.get()
    at = datetime(day.year, day.month, day.day, tzinfo=UTC)
    assert (silence.starts_at, silence.ends_at) == (
        at + timedelta(hours=22),
        at + timedelta(hours=23, minutes=30),
    )
    wrong = operator_client.post("/alerts/silences/", {**post, "until_time": "21:00"})
    assert wrong.status_code == 400 and "until: must be after the start" in wrong.content.decode()
    half = operator_client.post("/alerts/silences/", {**post, "start_time": ""})
    assert half.status_code == 400
    assert "start_date: give both the start date and time" in half.content.decode()
