"""The managers' monthly report email, received by a real SMTP server (aiosmtpd): the PDF
attached, a link to the report, an unsubscribe link that works; sent once per month, on the
configured day in each recipient's timezone."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from tests.alerts.conftest import REFUSED, text_of
from tests.energy.helpers import pdf_pages
from webapp.alerts.models import Channel
from webapp.energy.models import EnergyReportDelivery, EnergyReportSubscription
from webapp.energy.report_mail import report_month_due
from webapp.energy.selectors import month_report
from webapp.energy.services import energy_reports_due, energy_reports_send


def subscribe(address: str, clusters=()) -> EnergyReportSubscription:
    channel = Channel.objects.create(kind="email", name=address, config={"address": address})
    sub = EnergyReportSubscription.objects.create(channel=channel)
    sub.clusters.set(clusters)
    return sub


def test_report_email_arrives_with_its_pdf_and_links(built, smtp, client, tmp_path, settings):
    settings.VIGIL_BASE_URL = "http://vigil.example.org"
    subscribe("manager@example.org", [built["cluster"]])
    counts = energy_reports_send(built["month"])
    assert counts["sent"] == 1 and counts["failed"] == 0
    [msg] = smtp.to("manager@example.org")
    r, _ = month_report(built["cluster"], built["month"])
    assert f"Energy report watt {built['month']}" in msg["Subject"]
    assert f"{r.facility_kwh:.0f} kWh" in msg["Subject"]
    [pdf] = [p for p in msg.iter_attachments() if p.get_content_type() == "application/pdf"]
    assert pdf_pages(pdf.get_content(), tmp_path) == 5
    text = text_of(msg)
    assert f"http://vigil.example.org/energy/report/?cluster=watt&month={built['month']}" in text
    assert "Data completeness" in text
    unsubscribe = re.search(r"http://vigil.example.org(/energy/unsubscribe/\S+/)", text).group(1)
    assert msg["List-Unsubscribe"].strip() == f"<http://vigil.example.org{unsubscribe}>"
    # Sent once: the next run finds the delivery and sends nothing.
    assert energy_reports_send(built["month"])["already"] == 1
    assert len(smtp.to("manager@example.org")) == 1
    # The link, without a login: GET asks, POST turns the subscription off.
    page = client.get(unsubscribe)
    assert page.status_code == 200 and b"manager@example.org" in page.content
    assert EnergyReportSubscription.objects.get().active
    client.post(unsubscribe)
    assert not EnergyReportSubscription.objects.get().active
    EnergyReportDelivery.objects.all().delete()
    assert energy_reports_send(built["month"])["sent"] == 0
    assert client.get("/energy/unsubscribe/forged/").status_code == 400


def test_refused_address_is_recorded_and_empty_months_are_skipped(built, smtp):
    subscribe(REFUSED)
    counts = energy_reports_send(built["month"])
    assert counts["failed"] == 1
    delivery = EnergyReportDelivery.objects.get()
    assert delivery.status == "failed" and "550" in delivery.error
    # A refused recipient disables the channel, as alerts do: not refused again every hour.
    channel = delivery.subscription.channel
    channel.refresh_from_db()
    assert channel.disabled and "User unknown" in channel.last_error
    assert energy_reports_send(built["month"])["failed"] == 0
    subscribe("manager@example.org")
    assert energy_reports_send("2001-01") == {
        "month": "2001-01",
        "sent": 0,
        "failed": 0,
        "no_data": 1,
        "already": 0,
    }


@pytest.mark.parametrize(
    ("zone", "now", "due"),
    [
        ("UTC", datetime(2026, 12, 1, 5, 59, tzinfo=UTC), None),
        ("UTC", datetime(2026, 12, 1, 6, 20, tzinfo=UTC), "2026-11"),
        ("UTC", datetime(2026, 12, 3, 1, 20, tzinfo=UTC), "2026-11"),  # the beat was down
        # Tokyo's 1st, 06:20, is still November in UTC: wait until the month has settled.
        ("Asia/Tokyo", datetime(2026, 11, 30, 21, 20, tzinfo=UTC), None),
        ("Asia/Tokyo", datetime(2026, 12, 1, 1, 20, tzinfo=UTC), "2026-11"),
        ("Asia/Kolkata", datetime(2026, 12, 1, 0, 50, tzinfo=UTC), None),  # 06:20 IST
        ("America/Los_Angeles", datetime(2026, 12, 1, 13, 20, tzinfo=UTC), None),  # 05:20 PST
        ("America/Los_Angeles", datetime(2026, 12, 1, 14, 20, tzinfo=UTC), "2026-11"),
        # New Year's Eve in Los Angeles is 1 January in UTC: still December there.
        ("America/Los_Angeles", datetime(2027, 1, 1, 7, 20, tzinfo=UTC), "2026-11"),
    ],
)
def test_report_is_due_on_the_day_and_hour_in_the_recipients_timezone(zone, now, due, settings):
    settings.VIGIL_ENERGY_REPORT_DAY, settings.VIGIL_ENERGY_REPORT_HOUR = 1, 6
    assert report_month_due(EnergyReportSubscription(timezone=zone), now) == due


def test_a_recipient_without_a_timezone_gets_the_sites(db, settings):
    settings.TIME_ZONE = "Europe/Paris"
    sub = subscribe("someone@example.org")
    assert sub.timezone == "Europe/Paris"
    sub.timezone = "Mars/Olympus"
    with pytest.raises(ValidationError, match="not an IANA timezone"):
        sub.full_clean()


def test_each_recipient_gets_the_report_once_on_the_1st_in_their_timezone(built, smtp, settings):
    settings.VIGIL_ENERGY_REPORT_DAY, settings.VIGIL_ENERGY_REPORT_HOUR = 1, 6
    tokyo = subscribe("tokyo@example.org", [built["cluster"]])
    tokyo.timezone = "Asia/Tokyo"
    tokyo.save()
    la = subscribe("la@example.org", [built["cluster"]])
    la.timezone = "America/Los_Angeles"
    la.save()
    end = built["hi"]  # the rig's month ends (UTC)
    # 06:20 of the 1st in Tokyo, the UTC month not over yet: nobody gets it (the month
    # before, still due in both zones by the catch-up rule, has no data).
    assert built["month"] not in energy_reports_due(end - timedelta(hours=2, minutes=40))
    assert smtp.to("tokyo@example.org") == []
    # 10:20 in Tokyo, still the last day in Los Angeles: only Tokyo.
    at = end + timedelta(hours=1, minutes=20)
    assert energy_reports_due(at)[built["month"]]["sent"] == 1
    assert len(smtp.to("tokyo@example.org")) == 1 and smtp.to("la@example.org") == []
    # The next hourly run, and a run at the same time again, send Tokyo nothing more.
    assert energy_reports_due(at)[built["month"]] == {
        "month": built["month"],
        "sent": 0,
        "failed": 0,
        "no_data": 0,
        "already": 1,
    }
    # 06:20 (or 07:20 in summer time) of the 1st in Los Angeles: Los Angeles gets it.
    result = energy_reports_due(end + timedelta(hours=14, minutes=20))
    assert result[built["month"]]["sent"] == 1 and result[built["month"]]["already"] == 1
    [msg] = smtp.to("la@example.org")
    assert built["month"] in msg["Subject"]
    assert len(smtp.to("tokyo@example.org")) == 1
    rows = EnergyReportDelivery.objects.filter(month=built["month"], status="sent")
    assert sorted(rows.values_list("to", flat=True)) == ["la@example.org", "tokyo@example.org"]
