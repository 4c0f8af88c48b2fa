"""Alerts pages in a real Chromium: the alert list of a real diagnosed failure, a silence made
from its row through the pre-filled form, and the demo outbox showing the email that failure
produced through the alerts services (its HTML in a sandboxed frame)."""

from __future__ import annotations

import pytest

from tests.alerts.conftest import default_rules, deliver, later, with_email
from tests.alerts.helpers import failed_job
from tests.failures.conftest import make_fleet
from webapp.alerts import evaluate
from webapp.alerts.models import Alert, OutboxMessage, Silence

pytestmark = pytest.mark.browser


@pytest.fixture
def live_alert(transactional_db, settings, operator) -> Alert:
    """Job 200 failed (gpu_off_bus, a hardware cause: operators are told); the email went
    through the demo's outbox backend, as in `make demo`."""
    settings.EMAIL_BACKEND = "webapp.alerts.outbox.OutboxEmailBackend"
    with_email(operator)
    default_rules()
    failure = failed_job(make_fleet(), "200")
    evaluate.failure_alerts(failure.pk)
    deliver(later(2))
    return Alert.objects.get(rule__name="job-failed", job__scheduler_id="200")


def test_the_alert_list_and_a_silence_from_its_row(
    page, live_server, live_alert, operator_login, screenshot_dir, page_log
):
    operator_login("/alerts/")
    assert page.locator("h1").inner_text() == "Alerts"
    row = page.locator(f"#alert-table tr[data-alert='{live_alert.pk}']")
    assert "Job 200" in row.inner_text() and "firing" in row.inner_text().lower()
    page.screenshot(path=screenshot_dir / "alerts-list.png", full_page=True)

    row.locator("a.silence").click()
    page.wait_for_url("**/alerts/silences/?*")
    assert page.locator("#id_cluster").input_value() == "testcluster"
    assert page.locator("#id_cause").input_value() == live_alert.cause
    page.fill("#id_why", "reseating GPU 3 on gpu-node-02")
    page.screenshot(path=screenshot_dir / "alerts-silence-form.png", full_page=True)
    page.click("#new-silence button[type=submit]")
    page.wait_for_load_state("load")
    assert "created" in page.locator("#created").inner_text()
    silence = Silence.objects.get()
    assert silence.created_by == "operator" and silence.cause == live_alert.cause
    row = page.locator(f"#silence-table tr[data-silence='{silence.pk}']")
    assert "reseating GPU 3" in row.inner_text()
    page.screenshot(path=screenshot_dir / "alerts-silences.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_the_outbox_shows_the_email_of_a_diagnosed_failure(
    page, live_server, live_alert, operator_login, screenshot_dir, page_log
):
    kept = OutboxMessage.objects.get(to="operator@example.org")
    operator_login("/alerts/")
    page.click("#outbox-link")
    page.wait_for_url("**/alerts/outbox/")
    assert page.locator("#outbox-table tbody tr").count() == OutboxMessage.objects.count()
    page.screenshot(path=screenshot_dir / "alerts-outbox.png", full_page=True)
    page.click(f"#outbox-table a[href='/alerts/outbox/{kept.pk}/']")
    page.wait_for_url(f"**/alerts/outbox/{kept.pk}/")
    assert page.locator("#subject").inner_text() == kept.subject
    assert "gpu off bus" in kept.subject
    assert "Diagnosis: gpu_off_bus" in page.locator("#text-body").inner_text()
    frame = page.frame_locator("#html-body")
    assert "gpu_off_bus" in frame.locator("body").inner_text()
    assert page.locator("#html-body").get_attribute("sandbox") == ""
    page.screenshot(path=screenshot_dir / "alerts-outbox-message.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []
