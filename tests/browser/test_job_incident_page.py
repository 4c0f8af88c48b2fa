"""The job page of a failed and requeued job, in a real Chromium: its verdict first, then one
timeline with the failure, its diagnosis, the recovery actions and the run after the requeue,
each step a link a person can follow."""

from __future__ import annotations

import pytest

from tests.jobs.incident import incident_job

pytestmark = pytest.mark.browser


def test_failed_and_requeued_job_page_shows_diagnosis_actions_and_the_run_after_requeue(
    page, live_server, transactional_db, operator_login, screenshot_dir, page_log
):
    incident = incident_job()
    page.set_viewport_size({"width": 1440, "height": 900})
    operator_login(f"/jobs/{incident.job.id}/")
    assert page.locator("#verdict-headline").is_visible()
    rows = page.locator("#timeline-table tbody tr")
    texts = [" | ".join(r.split("\t")) for r in rows.all_inner_texts()]
    kinds = [r.get_attribute("data-kind") for r in rows.element_handles()]
    assert "diagnosis" in kinds and kinds.count("action") == 2
    assert any("Diagnosed: gpu_off_bus on gpu-i-01 GPU 2 (0000:1A:00.0)" in t for t in texts)
    assert any("Drain node gpu-i-01" in t for t in texts)
    assert any("Requeue job 4242" in t for t in texts)
    assert "Running again (run 2)" in texts[-1]
    # The timeline fits its card at 1440 px: no column pushed into a horizontal scroll.
    table = page.locator("#timeline-table")
    card = page.locator("#timeline")
    assert table.bounding_box()["width"] <= card.bounding_box()["width"]
    page.screenshot(path=screenshot_dir / "job-incident.png", full_page=True)
    # The requeue's own page links back to the job.
    page.locator("#timeline-table a", has_text="Requeue job 4242").click()
    page.wait_for_load_state()
    assert page.locator(f'a[href="/jobs/{incident.job.id}/"]').count() >= 1
    assert page_log.errors == []
