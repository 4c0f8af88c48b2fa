"""Jobs submitted to a real Slurm appear, start and end in Vigil with their GPUs.

The cluster is tests/slurm.py's (slurmctld + slurmd on this host, eight fake GPUs); the watcher
is collectors/watchers/slurm.py publishing through the real transport to a real worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from django.conf import settings

from collectors.schema import JOB_EVENTS_TASK, JobEventBatch
from collectors.transport import Transport
from collectors.watchers.slurm import SlurmWatcher
from tests.helpers import ROOT, wait_for
from tests.slurm import slurm_cluster  # noqa: F401 (the session fixture)
from webapp.fleet import services as fleet_services
from webapp.jobs.models import Job, JobAllocation

pytestmark = pytest.mark.integration


def _poll_until(watcher, transport, events, predicate, timeout=60.0):
    """Poll the watcher (as the agent loop would) until predicate(events) holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for batch_id, text in watcher.poll():
            events.extend(JobEventBatch.model_validate_json(text).events)
            assert transport.send(text, batch_id, task=JOB_EVENTS_TASK)
        watcher.commit()
        if predicate(events):
            return
        time.sleep(0.3)
    raise AssertionError(f"watcher events so far: {[(e.job_id, e.kind) for e in events]}")


def _has(events, job_id, kind):
    return any(e.job_id == job_id and e.kind == kind for e in events)


def test_slurm_jobs_appear_start_and_end_in_vigil(
    slurm_cluster,  # noqa: F811
    worker_factory,
    committed_node_token,
    monkeypatch,
    tmp_path,
):
    cluster, sender, token = committed_node_token
    fleet_services.node_scheduler_grant(cluster, sender)  # the host of the Slurm watcher
    # The Slurm node runs the jobs: Vigil refuses allocations on nodes it does not know.
    fleet_services.node_token_issue(cluster, slurm_cluster.node)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    worker_factory()
    transport = Transport(settings.CELERY_BROKER_URL, tmp_path / "spool")
    watcher = SlurmWatcher(cluster, sender, token, state_path=tmp_path / "watcher.json")
    events: list = []
    _poll_until(watcher, transport, events, lambda ev: True)  # learn the jobcomp position

    ok = slurm_cluster.sbatch(
        "--gres=gpu:2", "-J", "eval-humaneval", "-A", "llm-7b", "--wrap", "sleep 3"
    )
    bad = slurm_cluster.sbatch("--gres=gpu:1", "-J", "sft-broken", "--wrap", "exit 1")
    long = slurm_cluster.sbatch("--gres=gpu:1", "-J", "pretrain-7b", "--wrap", "sleep 300")
    _poll_until(watcher, transport, events, lambda ev: _has(ev, long, "started"))
    slurm_cluster.run("scancel", long)
    _poll_until(
        watcher, transport, events, lambda ev: all(_has(ev, j, "ended") for j in (ok, bad, long))
    )
    transport.close()

    # Every event once: a watcher that keeps polling does not repeat itself.
    keys = [(e.job_id, e.kind, e.ts) for e in events]
    assert len(keys) == len(set(keys))
    started = {e.job_id: e for e in events if e.kind == "started"}
    ok_gpus = started[ok].allocation[0].gpu_indices
    assert started[ok].allocation[0].node == slurm_cluster.node
    assert len(ok_gpus) == 2 and set(ok_gpus) <= set(range(8))

    def jobs_final():
        jobs = {j.scheduler_id: j for j in Job.objects.filter(scheduler_id__in=[ok, bad, long])}
        if len(jobs) == 3 and all(j.end_at is not None for j in jobs.values()):
            return jobs
        return None

    jobs = wait_for(jobs_final, timeout=30)
    assert (jobs[ok].state, jobs[ok].exit_code) == ("completed", 0)
    assert (jobs[bad].state, jobs[bad].exit_code) == ("failed", 1)
    assert jobs[long].state == "cancelled"
    assert jobs[ok].name == "eval-humaneval" and jobs[ok].gpus_requested == 2
    assert jobs[ok].user == "root" and jobs[ok].partition == "gpu"
    assert jobs[ok].project == "llm-7b" and jobs[bad].project == ""  # the account, -A
    assert 2.0 <= jobs[ok].duration_s <= 10.0
    assert jobs[ok].submit_at <= jobs[ok].start_at < jobs[ok].end_at

    allocations = JobAllocation.objects.filter(job=jobs[ok]).select_related("node")
    assert sorted(a.gpu_index for a in allocations) == sorted(ok_gpus)
    assert {a.node.hostname for a in allocations} == {slurm_cluster.node}
    assert all(a.start == jobs[ok].start_at and a.end == jobs[ok].end_at for a in allocations)
    (long_alloc,) = JobAllocation.objects.filter(job=jobs[long])
    assert long_alloc.end == jobs[long].end_at  # closed when it was cancelled
    assert long_alloc.gpu_index == started[long].allocation[0].gpu_indices[0]


def test_collector_cli_watches_slurm_on_a_host_without_gpus(slurm_cluster, tmp_path):  # noqa: F811
    """`vigil-collector --source none --jobs slurm`: job batches only, valid on the wire."""
    job = slurm_cluster.sbatch("--gres=gpu:1", "-J", "debug-cli", "--wrap", "sleep 1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "collectors",
            "--source",
            "none",
            "--jobs",
            "slurm",
            "--cluster",
            "testcluster",
            "--token",
            "t" * 20,
            "--stdout",
            "--count",
            "2",
            "--interval",
            "0.5",
            "--state-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=slurm_cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    batches = [JobEventBatch.model_validate_json(line) for line in proc.stdout.splitlines()]
    assert batches and {b.source for b in batches} == {"slurm"}
    assert any(e.job_id == job and e.kind == "submitted" for b in batches for e in b.events)
    state = json.loads((tmp_path / "slurm-testcluster.json").read_text())
    assert job in state["jobs"]
