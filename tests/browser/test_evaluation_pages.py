"""The evaluation page in a real Chromium: an operator requests the paper's evaluation (63
datasets on 4 nodes of 8 GPUs) through the form, and the page draws both plans as Gantt
charts side by side, the makespans and GPU time by phase; a bad request shows its reason; no
console errors, no request leaves the server."""

from __future__ import annotations

import pytest

from tests.browser.figures import drawn_figures
from tests.evaluation.conftest import checkpoint, fleet_make  # noqa: F401 (a fixture)
from webapp.evaluation.estimates import DEFAULT_SUITE
from webapp.evaluation.models import EvaluationRun

pytestmark = pytest.mark.browser

CLUSTER = "evb"


def test_request_and_both_gantt_charts(
    page,
    live_server,
    transactional_db,
    broker,
    checkpoint,  # noqa: F811 (the fixture imported above)
    operator_login,
    screenshot_dir,
    page_log,
):
    fleet_make(CLUSTER, {f"gpu-{i:02d}": 8 for i in range(4)})
    operator_login("/evaluation/")
    page.fill("#model-path", str(checkpoint))
    page.fill("#datasets", "\n".join(name for name, _, _ in DEFAULT_SUITE))
    page.fill("input[name=nodes]", "4")
    with page.expect_navigation():
        page.click("#request-submit")
    refused = page.locator("#error")
    assert EvaluationRun.objects.exists(), refused.inner_text() if refused.count() else page.url
    run = EvaluationRun.objects.get()
    assert (len(run.datasets), run.nodes, run.plan) == (63, 4, "decoupled")

    figures = drawn_figures(page)
    for name in ("gantt-baseline", "gantt-decoupled", "makespan", "gpu-time"):
        assert figures[name]["drawn"], name
    # Every planned job is on its chart: 63 coupled jobs; the decoupled plan's GPU jobs.
    assert figures["gantt-baseline"]["traces"] == 3  # loading, inference, metrics
    assert figures["gantt-baseline"]["points"] == 3 * 63
    gpu_jobs = run.prediction["decoupled"]["gpu_jobs"]
    assert figures["gantt-decoupled"]["points"] >= 2 * gpu_jobs  # a read and an inference each
    # Side by side.
    left = page.locator("#gantt-baseline").bounding_box()
    right = page.locator("#gantt-decoupled").bounding_box()
    assert left["x"] + left["width"] <= right["x"] and abs(left["y"] - right["y"]) < 5
    assert page.locator("#speedup").inner_text() == f"{run.prediction['speedup']:.2f}x"
    page.screenshot(path=screenshot_dir / "evaluation-page.png", full_page=True)
    charts = page.locator("#gantts").bounding_box()
    page.screenshot(
        path=screenshot_dir / "evaluation-charts.png",
        full_page=True,
        clip={"x": 0, "y": 0, "width": 1400, "height": charts["y"] + charts["height"] + 420},
    )
    assert page_log.errors == []

    # A dataset twice: refused with its reason, nothing stored.
    page.fill("#model-path", str(checkpoint))
    page.fill("#datasets", "mmlu\ngsm8k\nmmlu")
    with page.expect_navigation():
        page.click("#request-submit")
    assert "datasets: 'mmlu' is listed twice" in page.locator("#error").inner_text()
    assert EvaluationRun.objects.count() == 1
    # The browser logs the refusal's status (400), and nothing else.
    assert [e for e in page_log.errors if "status of 400" not in e] == []
    assert page_log.foreign_requests == []
