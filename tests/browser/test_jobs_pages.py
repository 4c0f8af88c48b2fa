"""Jobs pages in a real Chromium: every Plotly figure drawn, no console errors, no CDN."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache

from tests.browser.figures import drawn_figures as _figures
from tests.jobs.helpers import SLOW_GPU, SLOW_NODE, allocate, big_job, ingest, make_jobs
from webapp.jobs.models import Job

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The characterization is cached per process; one test's result must not serve another."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def live_jobs(transactional_db) -> Job:
    """Jobs of cluster acme (for the characterization) and one job with telemetry."""
    t0 = float(int(time.time()) - 30 * 60)
    base = datetime.fromtimestamp(t0, UTC)
    node = ingest(
        "acme",
        "gpu-b-01",
        t0=t0,
        intervals=31,
        step_s=60,
        gpus=4,
        util=lambda i, k: 0.0 if i == 3 else (k * 7 + i * 20) % 101,  # GPU 3 idle
        energy_mj=lambda i, k: 10**9 + k * 20_000_000,
    )
    make_jobs(node.cluster, 300, start=base - timedelta(days=60))
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id="777",
        name="eval-humaneval",
        user="erin",
        team="eval",
        job_type="eval",
        state="running",
        submit_at=base - timedelta(seconds=40),
        start_at=base,
        gpus_requested=4,
        nodes_requested=1,
    )
    allocate(job, node, [0, 1, 2, 3], base, None)
    return job


def test_characterization_page_draws_every_figure(
    page, live_server, live_jobs, operator_login, screenshot_dir, page_log
):
    operator_login("/jobs/characterization/?cluster=acme")
    assert page.locator("h1").inner_text() == "Workload characterization · acme"
    figures = _figures(page)
    assert set(figures) == {"types", "states", "duration", "queue", "gpus", "telemetry"}
    for name, fig in figures.items():
        assert fig["traces"] > 0 and fig["points"] > 0 and fig["drawn"], name
    # The site curve and Seren/Kalos/Philly/PAI on the telemetry panels.
    assert figures["telemetry"]["traces"] == 4 + 2 + 2 + 2 + 4
    assert page.locator("#summary-table th").nth(1).text_content() == "acme"
    page.screenshot(path=screenshot_dir / "jobs-characterization.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_job_page_draws_allocations_and_series(
    page, live_server, live_jobs, operator_login, screenshot_dir, page_log
):
    operator_login(f"/jobs/{live_jobs.id}/")
    assert page.locator("h1").inner_text().startswith("Job 777 · eval-humaneval")
    figures = _figures(page)
    assert figures["allocations"]["points"] == 4
    assert figures["series"]["traces"] == 4 * 5 and figures["series"]["drawn"]
    assert page.locator("#allocation-table tbody tr").count() == 4
    # 30 minutes x 20e6 mJ on 4 GPUs = 2.4e9 mJ = 0.667 kWh.
    assert page.locator("#energy-total").inner_text() == "0.667 kWh"
    page.screenshot(path=screenshot_dir / "jobs-detail.png", full_page=True)

    page.click("text=Jobs")
    page.wait_for_load_state("load")
    assert page.locator("#job-table tbody tr").count() == 50
    page.screenshot(path=screenshot_dir / "jobs-list.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_wasted_page(page, live_server, live_jobs, operator_login, screenshot_dir, page_log):
    operator_login("/jobs/wasted/?minutes=5")
    assert page.locator("h1").inner_text() == "Wasted GPUs"
    row = page.locator("#wasted-table tbody tr")
    assert row.count() == 1 and row.get_attribute("data-job") == "777"
    assert "1 (3)" in row.inner_text()  # GPU 3 only
    assert page.locator("#user-table tbody tr").first.inner_text().startswith("erin")
    page.screenshot(path=screenshot_dir / "jobs-wasted.png", full_page=True)
    assert page_log.errors == []


def test_a_2048_gpu_job_page_fits_in_three_screens(
    page, live_server, transactional_db, operator_login, screenshot_dir, page_log
):
    job = big_job()
    operator_login(f"/jobs/{job.id}/")
    figures = _figures(page)
    assert {"allocations", "series", "energy"} <= set(figures)
    assert figures["series"]["drawn"] and figures["energy"]["drawn"]
    assert page.locator("#fig-allocations g.hm image").count() == 1  # the node x time heatmap
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height <= 3 * 900, height  # the viewport is 900 px tall
    outliers = page.locator("#outlier-table tbody tr")
    assert outliers.count() == 1 and f"{SLOW_NODE} GPU {SLOW_GPU}" in outliers.inner_text()
    assert not page.locator("#node-energy-table").is_visible()  # per-GPU detail on demand
    page.click("#energy-detail summary")
    assert page.locator("#node-energy-table tbody tr").count() == 256
    page.screenshot(path=screenshot_dir / "job-2048.png", full_page=False)
    page.locator("#energy-detail").evaluate("d => d.open = false")
    page.screenshot(path=screenshot_dir / "job-2048-full.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_the_job_search_finds_a_job_by_its_slurm_id(
    page, live_server, live_jobs, operator_login, screenshot_dir, page_log
):
    operator_login("/jobs/")
    page.fill("#job-id-search", live_jobs.scheduler_id)
    page.press("#job-id-search", "Enter")
    page.wait_for_url(f"**/jobs/{live_jobs.id}/")
    assert "eval-humaneval" in page.content()
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/jobs/?cluster=acme&sort=gpus")
    page.screenshot(path=screenshot_dir / "jobs-list.png", full_page=False)
    assert page.locator("#job-table tbody tr").count() > 0
    assert page_log.errors == []
