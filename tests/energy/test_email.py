"""The managers' monthly report email, received by a real SMTP server (aiosmtpd): the PDF
attached, a link to the report, an unsubscribe link that works; sent once per month, on the
configured day."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from tests.alerts.conftest import REFUSED, text_of
from tests.energy.test_views import pdf_pages
from webapp.alerts.models import Channel
from webapp.energy.models import EnergyReportDelivery, EnergyReportSubscription
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
    assert pdf_pages(pdf.get_content(), tmp_path) == 4
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
    assert energy_reports_send("2001-01") == {
        "month": "2001-01",
        "sent": 0,
        "failed": 0,
        "no_data": 1,
        "already": 0,
    }


@pytest.mark.parametrize(
    ("now", "due"),
    [
        (datetime(2026, 12, 1, 5, 59, tzinfo=UTC), False),
        (datetime(2026, 12, 1, 6, 20, tzinfo=UTC), True),
        (datetime(2026, 12, 3, 1, 20, tzinfo=UTC), True),  # the beat was down: catch up
    ],
)
def test_report_is_due_from_the_configured_day_and_hour(db, now, due, settings):
    settings.VIGIL_ENERGY_REPORT_DAY, settings.VIGIL_ENERGY_REPORT_HOUR = 1, 6
    result = energy_reports_due(now)
    assert (result is not None) == due
    if due:
        assert result["month"] == "2026-11"
