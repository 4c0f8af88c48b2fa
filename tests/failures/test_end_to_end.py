"""Issue 4's acceptance, end to end: a job on the REAL Slurm writes an NCCL timeout to its log
on a node whose kernel log gets an Xid 79 line; the collector's watchers (Slurm, kernel log
file, job logs) publish through the real transport to a REAL worker; the FailureEvent is
diagnosed gpu_off_bus with that node blamed and shows on the timeline in a real Chromium."""

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
from tests.browser.conftest import (  # noqa: F401 (fixtures)
    browser,
    operator_login,
    page,
    page_log,
    screenshot_dir,
)
from tests.helpers import wait_for
from tests.slurm import slurm_cluster  # noqa: F401 (the session fixture)
from webapp.failures.models import FailureEvent
from webapp.fleet import services as fleet_services

pytestmark = [pytest.mark.integration, pytest.mark.browser]

NCCL_SCRIPT = """#!/bin/bash
echo "[rank0]: step 1200 loss 2.31"
echo "[rank0]:[E1129 09:10:00.000 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught \
collective operation timeout: WorkNCCL(SeqNum=4821, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, \
Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
echo "[rank0]: Some NCCL operations have failed or timed out."
sleep 6
exit 1
"""


def test_nccl_timeout_on_a_node_with_xid_79_is_gpu_off_bus_on_the_timeline(
    slurm_cluster,  # noqa: F811
    worker_factory,
    committed_node_token,
    monkeypatch,
    tmp_path,
    live_server,
    page,  # noqa: F811
    operator_login,  # noqa: F811
    screenshot_dir,  # noqa: F811
    page_log,  # noqa: F811
):
    cluster, sender, token = committed_node_token
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
                cluster, node, [glob_paths([str(slurm_cluster.workdir / "*.out")])], state
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

    failure = wait_for(diagnosed, timeout=90, interval=0.2)
    for batch_id, text in events.finish():
        transport.send(text, batch_id, task=NODE_EVENTS_TASK)
    transport.close()
    events.close()
    assert failure.blamed_node.hostname == node
    assert failure.action == "cordon_restart"
    assert any("Watchdog caught collective" in e["text"] for e in failure.evidence)

    operator_login("/failures/")
    page.wait_for_function(
        "document.querySelector('[data-figure=timeline] .main-svg .trace') !== null"
    )
    row = page.locator("#failure-table tbody tr", has_text=f"{job_id} pretrain-7b")
    assert "gpu_off_bus" in row.inner_text() and node in row.inner_text()
    page.screenshot(path=screenshot_dir / "failures-end-to-end.png", full_page=True)
    assert page_log.errors == []
