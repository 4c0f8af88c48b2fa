"""The failure page in a real Chromium, logged in through the login form as the job's teammate
and as an outsider: both read the diagnosis; only the teammate reads the log lines."""

from __future__ import annotations

import time

import pytest

from tests.browser.conftest import PASSWORD
from tests.failures.conftest import make_fleet, nccl_window, xid_event
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose

pytestmark = pytest.mark.browser


@pytest.fixture
def alices_failure(transactional_db) -> FailureEvent:
    """Alice's pretraining job died of NCCL timeouts after an Xid 79 on gpu-node-02."""
    fleet = make_fleet()
    end = float(int(time.time())) - 300  # detected as it happens: recovery acts on it
    fleet.run_job("200", end - 6 * 3600, None)
    node_events_ingest(fleet.node_batch("gpu-node-02", gpu_events=[xid_event(end - 700, 79)]))
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=[nccl_window("200", end - 60)]))
    fleet.run_job("200", end - 6 * 3600, end)
    failure = FailureEvent.objects.get(job__scheduler_id="200")
    failure_diagnose(failure.pk)
    return failure


def _login(page, base_url: str, username: str, next_path: str) -> None:
    page.context.clear_cookies()
    page.goto(f"{base_url}/login/?next={next_path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("load")


def test_teammate_reads_the_log_lines_and_the_outsider_reads_the_diagnosis(
    page, live_server, alices_failure, teammate, outsider, screenshot_dir, page_log
):
    url = f"/failures/{alices_failure.pk}/"

    _login(page, live_server.url, teammate.username, url)
    assert page.url.endswith(url)
    assert page.locator("#cause").inner_text() == "gpu_off_bus"
    assert page.locator("#evidence pre.log span.hit").count() >= 2
    assert "Watchdog caught collective" in page.locator("#evidence").inner_text()
    assert page.locator("#logs-hidden").count() == 0
    page.screenshot(path=screenshot_dir / "failures-detail-teammate.png", full_page=True)

    _login(page, live_server.url, outsider.username, url)
    assert page.url.endswith(url)
    assert page.locator("#cause").inner_text() == "gpu_off_bus"
    assert page.locator("#blamed").inner_text().startswith("gpu-node-02")
    assert page.locator("#action").inner_text().startswith("reboot")
    evidence = page.locator("#evidence").inner_text()
    assert "Log lines are visible to the job's team and operators." in evidence
    assert "Watchdog" not in evidence and "loss" not in evidence
    assert page.locator("#evidence pre.log").count() == 0
    assert page.locator("#evidence a.csv").count() == 0
    assert page.locator("#xid-table tbody tr").count() == 1  # the fleet's errors stay
    page.screenshot(path=screenshot_dir / "failures-detail-outsider.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []

    refused = page.goto(f"{live_server.url}/api/v1{url}evidence.csv")
    assert refused.status == 403
    assert "team and operators" in page.locator("body").inner_text()
