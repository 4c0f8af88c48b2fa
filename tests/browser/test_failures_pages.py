"""Failure pages in a real Chromium: the timeline draws, a click on a marker opens the failure
page with its evidence and Xid history; the reliability page draws; no console errors, no CDN.

Also the end-to-end path of a failure (here, because it ends in the browser and Playwright's
session browser lives in tests/browser/conftest.py): a job on the REAL Slurm writes an NCCL
timeout to its log on a node whose kernel log gets an Xid 79 line; the collector's watchers
(Slurm, kernel log file, job logs) publish through the real transport to a REAL worker; the
FailureEvent is diagnosed gpu_off_bus with that node blamed and shows on the timeline."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.conf import settings

from collectors.schema import JOB_EVENTS_TASK, NODE_EVENTS_TASK
from collectors.transport import Transport
from collectors.watchers.joblogs import JobLogSource, glob_paths
from collectors.watchers.kernel import KernelLogSource
from collectors.watchers.nodeevents import NodeEventWatcher
from collectors.watchers.slurm import SlurmWatcher
from tests.browser.figures import drawn_figures as _figures
from tests.failures.conftest import make_fleet, nccl_window, xid_event
from tests.helpers import wait_for
from tests.slurm import slurm_cluster  # noqa: F401 (the session fixture)
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet import services as fleet_services

pytestmark = pytest.mark.browser


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


NCCL_SCRIPT = """#!/bin/bash
echo "[rank0]: step 1200 loss 2.31"
echo "[rank0]:[E1129 09:10:00.000 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught \
collective operation timeout: WorkNCCL(SeqNum=4821, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, \
Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
echo "[rank0]: Some NCCL operations have failed or timed out."
sleep 6
exit 1
"""


@pytest.mark.integration
def test_end_to_end_real_slurm_nccl_timeout_and_xid_79_is_gpu_off_bus_on_the_timeline(
    slurm_cluster,  # noqa: F811
    worker_factory,
    committed_node_token,
    monkeypatch,
    tmp_path,
    live_server,
    page,
    operator_login,
    screenshot_dir,
    page_log,
):
    cluster, sender, token = committed_node_token
    fleet_services.node_scheduler_grant(cluster, sender)  # the host of the Slurm watcher
    node = slurm_cluster.node
    node_token = fleet_services.node_token_issue(cluster, node)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    worker_factory()
    transport = Transport(settings.CELERY_BROKER_URL, tmp_path / "spool")
    jobs = SlurmWatcher(cluster, sender, token, state_path=tmp_path / "watcher.json")
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    state = tmp_path / "state"
    state.mkdir()
    events = NodeEventWatcher(
        [
            KernelLogSource(cluster, node, [], str(kernel_log), state),
            JobLogSource(
                cluster,
                node,
                [glob_paths([str(slurm_cluster.workdir / "*.out")])],
                state,
                min_uid=0,  # the test cluster's jobs run as root
            ),
        ],
        lambda c, n: node_token,
    )

    def poll() -> None:
        for batch_id, text in jobs.poll():
            assert transport.send(text, batch_id, task=JOB_EVENTS_TASK)
        jobs.commit()
        for batch_id, text in events.poll(time.time()):
            assert transport.send(text, batch_id, task=NODE_EVENTS_TASK)
        events.commit()

    poll()  # learn the jobcomp and kernel log positions
    script = tmp_path / "train.sh"
    script.write_text(NCCL_SCRIPT)
    job_id = slurm_cluster.sbatch("--gres=gpu:8", "-J", "pretrain-7b", str(script))
    wait_for(lambda: slurm_cluster.job_state(job_id) == "RUNNING", timeout=30)
    # The GPU falls off the bus while the job runs.
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    with kernel_log.open("a") as f:
        f.write(
            f"{stamp} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, "
            "name=python, GPU has fallen off the bus.\n"
        )

    def diagnosed():
        poll()
        failure = FailureEvent.objects.filter(
            job__scheduler_id=job_id, kind="job_failure", cause="gpu_off_bus"
        ).first()
        if failure is None:
            time.sleep(0.5)
        return failure

    try:
        failure = wait_for(diagnosed, timeout=90, interval=0.2)
    except AssertionError:
        from webapp.failures.models import GpuErrorEvent, JobLogWindow
        from webapp.jobs.models import Job

        raise AssertionError(
            f"slurm job {job_id}: {slurm_cluster.job_state(job_id)!r}; jobs "
            f"{list(Job.objects.values_list('scheduler_id', 'state'))}; failures "
            f"{list(FailureEvent.objects.values_list('kind', 'cause', 'job_id'))}; windows "
            f"{list(JobLogWindow.objects.values_list('job_scheduler_id', 'path'))}; xids "
            f"{list(GpuErrorEvent.objects.values_list('xid', 'ts'))}"
        ) from None
    for batch_id, text in events.finish():
        transport.send(text, batch_id, task=NODE_EVENTS_TASK)
    transport.close()
    events.close()
    assert failure.blamed_node.hostname == node
    assert failure.action == "reboot"  # Xid 79: RESTART_BM in NVIDIA's Xid catalog
    assert any("Watchdog caught collective" in e["text"] for e in failure.evidence)

    operator_login("/failures/")
    page.wait_for_function(
        "document.querySelector('[data-figure=timeline] .main-svg .trace') !== null"
    )
    row = page.locator("#failure-table tbody tr", has_text=f"{job_id} pretrain-7b")
    assert "gpu_off_bus" in row.inner_text() and node in row.inner_text()
    page.screenshot(path=screenshot_dir / "failures-end-to-end.png", full_page=True)
    assert page_log.errors == []
