"""Recovery pages in a real Chromium: the failure page shows its recovery timeline, the approvals
page's approve button approves, the recovery page draws its figures, at a realistic size too
(200 plans); no console errors, no request leaves the server.

The data comes through the real services (tests/recovery/test_views.py has the same path): an
Xid 79 on a running job's node, or a CUDA fault in a job's log, diagnosed in a cluster whose
policy runs the simulated executor, the actions run in-process, the job started again."""

from __future__ import annotations

import time

import pytest

from tests.browser.figures import drawn_figures
from tests.failures.conftest import make_fleet, xid_event
from tests.recovery.conftest import policy
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.recovery.execution import action_execute
from webapp.recovery.models import RecoveryAction

pytestmark = pytest.mark.browser


def _xid_79_recovered(fleet, job_id: str, at: float) -> FailureEvent:
    fleet.run_job(job_id, at - 3600, None, nodes=("gpu-node-02",))
    node_events_ingest(fleet.node_batch("gpu-node-02", gpu_events=[xid_event(at, 79, index=3)]))
    failure = FailureEvent.objects.filter(kind="gpu_error").order_by("-occurred_at").first()
    failure_diagnose(failure.pk)
    for action in failure.recovery_plan.actions.order_by("seq", "id"):
        action_execute(action.pk, "test")
    return failure


@pytest.fixture
def live_recovered(transactional_db) -> FailureEvent:
    fleet = make_fleet()
    policy("auto")
    failure = _xid_79_recovered(fleet, "300", float(int(time.time())) - 120)
    # The requeued job starts again (a second after the requeue ended).
    fleet.run_job("300", time.time() + 1, None, nodes=("gpu-node-01",))
    return failure


@pytest.fixture
def live_awaiting(transactional_db) -> RecoveryAction:
    fleet = make_fleet()
    policy("approve")
    fleet.run_job("400", time.time() - 3600, None, nodes=("gpu-node-02",))
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(time.time() - 60, 79, index=3)])
    )
    failure = FailureEvent.objects.get(kind="gpu_error")
    failure_diagnose(failure.pk)
    return failure.recovery_plan.actions.order_by("seq").first()


def test_failure_page_shows_the_recovery_timeline(
    page, live_server, live_recovered, operator_login, screenshot_dir, page_log
):
    operator_login(f"/failures/{live_recovered.pk}/")
    rows = page.locator("#recovery-timeline tbody tr")
    phases = [rows.nth(i).get_attribute("data-phase") for i in range(rows.count())]
    # Drain, requeue, and the reboot Xid 79 asks for (RESTART_BM).
    assert phases == ["occurred", "detected", "diagnosed", *["action"] * 3, "running_again"]
    assert "Drain node gpu-node-02 (simulated)" in rows.nth(3).inner_text()
    assert "Succeeded" in rows.nth(4).inner_text()
    assert page.locator("#recovery-total").inner_text().endswith(("s", "min"))
    page.screenshot(path=screenshot_dir / "recovery-failure-timeline.png", full_page=True)
    # An action links to its audit: the command and its output.
    rows.nth(3).locator("a").click()
    page.wait_for_load_state("load")
    assert (
        "scontrol update NodeName=gpu-node-02 State=DRAIN" in page.locator("#commands").inner_text()
    )
    assert page.locator("#simulated").is_visible()
    page.screenshot(path=screenshot_dir / "recovery-action.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_approve_button_approves_the_action(
    page, live_server, live_awaiting, operator_login, screenshot_dir, page_log
):
    operator_login("/recovery/approvals/")
    card = page.locator(f"#approval-{live_awaiting.pk}")
    assert "scontrol update NodeName=gpu-node-02 State=DRAIN" in card.inner_text()
    assert "gpu_off_bus" in card.inner_text()
    page.screenshot(path=screenshot_dir / "recovery-approvals.png", full_page=True)
    card.locator("button.approve").click()
    page.wait_for_load_state("load")
    assert f"Action {live_awaiting.pk} (drain node) approved" in page.locator("main").inner_text()
    assert page.locator(f"#approval-{live_awaiting.pk}").count() == 0
    live_awaiting.refresh_from_db()
    assert (live_awaiting.status, live_awaiting.approved_by) == ("ready", "operator")
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def test_recovery_page_draws_its_figures(
    page, live_server, live_recovered, operator_login, screenshot_dir, page_log
):
    operator_login("/recovery/?cluster=testcluster&days=1")
    figures = drawn_figures(page)
    assert figures["actions"]["drawn"] and figures["phases"]["drawn"]
    assert page.locator("#success-rate").inner_text() == "100%"
    assert page.locator("#avoided").inner_text() == "1"
    assert "simulated" in page.locator("#executor").inner_text().lower()
    assert page.locator("#plan-table tbody tr").count() == 1
    page.screenshot(path=screenshot_dir / "recovery-cluster.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []


def _cuda_fault(fleet, job_id: str, node: str, end: float) -> FailureEvent:
    fleet.run_job(job_id, end - 1800, None, nodes=(node,))
    node_events_ingest(
        fleet.node_batch(
            node,
            log_windows=[
                {
                    "job_id": job_id,
                    "ts": end - 5,
                    "path": f"/logs/{job_id}.err",
                    "first_line_no": 10,
                    "lines": [
                        f"{node}: RuntimeError: CUDA error: an illegal memory access was "
                        "encountered"
                    ],
                }
            ],
        )
    )
    fleet.run_job(job_id, end - 1800, end, nodes=(node,))
    failure = FailureEvent.objects.get(job__scheduler_id=job_id)
    failure_diagnose(failure.pk)
    return failure


@pytest.fixture
def live_busy(transactional_db) -> int:
    """200 plans, most automatic and run, some awaiting approval, some dry runs; restarts,
    cordons (the breaker: the same cause twice on a node) and notifications. The failures
    happen over the last ten minutes, so the phases' durations are those of a live system."""
    fleet = make_fleet()
    now = float(int(time.time()))
    modes = {
        i: "approve" if i % 10 == 7 else "dry_run" if i % 10 == 9 else "auto" for i in range(200)
    }
    # The approve-mode failures come last: switching a cluster to dry_run cancels what awaits
    # approval (the kill switch), so they would otherwise never reach the approvals page.
    for i in sorted(modes, key=lambda i: (modes[i] == "approve", i)):
        mode = modes[i]
        policy(mode)
        node = ("gpu-node-01", "gpu-node-02")[i % 2]
        failure = _cuda_fault(fleet, str(1000 + i), node, now - (200 - i) * 3)
        if mode == "auto":
            for action in failure.recovery_plan.actions.order_by("seq", "id"):
                action_execute(action.pk, "test")
            if i % 3:
                fleet.run_job(str(1000 + i), time.time() + 1, None, nodes=(node,))
    policy("auto")
    return 200


def test_recovery_pages_at_a_realistic_size(
    page, live_server, live_busy, operator_login, screenshot_dir, page_log
):
    operator_login("/recovery/")
    figures = drawn_figures(page)
    assert figures["actions"]["drawn"] and figures["phases"]["drawn"]
    assert page.locator("#plan-table tbody tr").count() == 50  # one page of 200
    assert "page 1 of 4" in page.locator("#plans").inner_text()
    page.screenshot(path=screenshot_dir / "recovery-cluster-200.png", full_page=True)
    page.goto(f"{live_server.url}/recovery/approvals/")
    assert page.locator("section.approval").count() > 0
    page.screenshot(path=screenshot_dir / "recovery-approvals-200.png", full_page=True)
    page.goto(f"{live_server.url}/recovery/nodes/")
    page.screenshot(path=screenshot_dir / "recovery-nodes-200.png", full_page=True)
    page.goto(f"{live_server.url}/failures/reliability/")
    assert page.locator("#time-to-recover tbody tr").count() >= 1
    page.screenshot(path=screenshot_dir / "reliability-200.png", full_page=True)
    assert page_log.errors == []
    assert page_log.foreign_requests == []
