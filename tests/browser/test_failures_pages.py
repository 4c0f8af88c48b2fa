"""Failure pages in a real Chromium: the timeline draws, a click on a marker opens the failure
page with its evidence and Xid history; the reliability page draws; no console errors, no CDN."""

from __future__ import annotations

import time

import pytest

from tests.failures.conftest import make_fleet, nccl_window, xid_event
from webapp.failures.models import FailureEvent
from webapp.failures.services import failure_diagnose, node_events_ingest

pytestmark = pytest.mark.browser

_FIGURES = """
() => Array.from(document.querySelectorAll('[data-figure]')).map(gd => ({
  name: gd.dataset.figure,
  traces: (gd.data || []).length,
  points: (gd.data || []).reduce((n, t) => n + ((t.x || t.y || []).length), 0),
  drawn: gd.querySelectorAll('.main-svg').length > 0 && gd.querySelectorAll('.trace').length > 0,
}))
"""


def _figures(page) -> dict[str, dict]:
    page.wait_for_function(
        "Array.from(document.querySelectorAll('[data-figure]'))"
        ".every(gd => gd.querySelector('.main-svg'))"
    )
    return {f["name"]: f for f in page.evaluate(_FIGURES)}


@pytest.fixture
def live_failure(transactional_db) -> FailureEvent:
    fleet = make_fleet()
    end = float(int(time.time())) - 600
    fleet.run_job("200", end - 6 * 3600, None, last_checkpoint_ts=end - 1800)
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-02",
            gpu_events=[xid_event(end - 700, 79, index=3, message="GPU has fallen off the bus.")],
        )
    )
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=[nccl_window("200", end - 60)]))
    fleet.run_job("200", end - 6 * 3600, end)
    fleet.run_job("201", end - 3600, end - 1800, state="NODE_FAIL", nodes=("gpu-node-01",))
    for f in FailureEvent.objects.all():
        failure_diagnose(f.pk)
    return FailureEvent.objects.get(job__scheduler_id="200")


def test_timeline_click_through_to_the_failure_page(
    page, live_server, live_failure, operator_login, screenshot_dir, page_log
):
    operator_login("/failures/")
    assert page.locator("h1").inner_text() == "Failures"
    figures = _figures(page)
    assert figures["timeline"]["drawn"] and figures["timeline"]["points"] == 3
    assert page.locator("#failure-table tbody tr").count() == 3
    page.screenshot(path=screenshot_dir / "failures-timeline.png", full_page=True)

    page.click("#lane-job")
    page.wait_for_load_state("load")
    assert _figures(page)["timeline"]["drawn"]
    page.screenshot(path=screenshot_dir / "failures-timeline-jobs.png", full_page=True)

    # Click the marker of job 200's failure: the plot navigates to its page.
    page.evaluate(
        """(url) => {
          const gd = document.querySelector('[data-figure=timeline]');
          gd.data.forEach((t, ci) => t.customdata.forEach((c, pi) => {
            if (c[0] === url) { gd.emit('plotly_click', {points: [{customdata: c}]}); }
          }));
        }""",
        f"/failures/{live_failure.pk}/",
    )
    page.wait_for_url(f"**/failures/{live_failure.pk}/")
    assert page.locator("#cause").inner_text() == "gpu_off_bus"
    assert page.locator("#blamed").inner_text().startswith("gpu-node-02")
    assert page.locator("pre.log span.hit").count() >= 2
    assert page.locator("#xid-table tbody tr").count() == 1
    assert page.locator("#job-link").get_attribute("href") == f"/jobs/{live_failure.job_id}/"
    assert _figures(page)["xids"]["drawn"]
    page.screenshot(path=screenshot_dir / "failures-detail.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_reliability_page_draws(
    page, live_server, live_failure, operator_login, screenshot_dir, page_log
):
    operator_login("/failures/reliability/")
    assert page.locator("h1").inner_text() == "Reliability: testcluster"
    assert _figures(page)["lost"]["drawn"]
    assert page.locator("#failure-count").inner_text() == "2"
    page.screenshot(path=screenshot_dir / "failures-reliability.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []
