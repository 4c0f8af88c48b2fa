"""Recovery on a real Slurm (two logical nodes, tests/slurm.py), every part real but the GPU:
a line in a node's kernel log or job log -> the node agent -> Redis -> Celery -> diagnosis ->
the recovery worker on the cluster's queue -> scontrol -> the job running again.
"""

from __future__ import annotations

import time

import pytest

from tests.helpers import database_url, wait_for
from tests.recovery.rig import Rig
from tests.slurm import slurm_two_nodes  # noqa: F401 (the session fixture)
from webapp.jobs.models import JobEvent
from webapp.recovery import services
from webapp.recovery.models import RecoveryAction, RecoveryPlan

pytestmark = pytest.mark.integration


@pytest.fixture
def rig(slurm_two_nodes, transactional_db, broker, tmp_path):  # noqa: F811
    rig = Rig(slurm_two_nodes, tmp_path, database_url())
    yield rig
    rig.stop()


def _plan(**filters) -> RecoveryPlan:
    return wait_for(
        lambda: RecoveryPlan.objects.filter(**filters).select_related("failure").first(),
        timeout=60,
    )


def _settled(plan: RecoveryPlan, timeout: float = 60) -> list[RecoveryAction]:
    def done():
        actions = list(plan.actions.order_by("seq", "id"))
        final = all(a.status in ("succeeded", "failed", "cancelled") for a in actions)
        return actions if actions and final else None

    return wait_for(done, timeout=timeout, interval=0.2)


def test_an_xid_79_drains_the_node_and_the_job_runs_again_elsewhere(rig):
    rig.vigil(mode="auto")
    rig.start()
    vn1, vn2 = rig.slurm.nodes
    job = rig.submit_on_agent_node("--gres=gpu:8", "-J", "pretrain-70b", "--wrap", "sleep 300")
    # Vigil knows the job runs on vn1 before the GPU fails.
    wait_for(lambda: JobEvent.objects.filter(job__scheduler_id=job, kind="started").exists())

    rig.xid(79)
    plan = _plan(failure__kind="gpu_error")
    drain, requeue = _settled(plan)
    info = rig.wait_running(job, restarts=1)

    failure = plan.failure
    assert (failure.cause, failure.action) == ("gpu_off_bus", "cordon_restart")
    assert (drain.kind, drain.host, drain.status) == ("drain", vn1, "succeeded")
    reason = f"vigil: gpu_off_bus failure {failure.pk}"
    assert drain.commands == [
        ["scontrol", "update", f"NodeName={vn1}", "State=DRAIN", f"Reason={reason}"]
    ]
    assert reason in rig.slurm.run("sinfo", "-R", "-h", "-o", "%E|%N")
    assert rig.slurm.drain_reason(vn1) == reason
    assert (requeue.kind, requeue.job_scheduler_id, requeue.status) == ("requeue", job, "succeeded")
    assert [s["exit"] for s in requeue.steps] == [0, 0]
    assert info["NodeList"] == vn2
    # Vigil sees the job running again, and the drained node as drained.
    wait_for(
        lambda: JobEvent.objects.filter(
            job__scheduler_id=job, kind="started", ts__gt=failure.occurred_at
        ).exists(),
        timeout=30,
    )
    wait_for(lambda: failure.node.__class__.objects.get(pk=failure.node_id).state == "drained")


def _python_job(rig: Rig, name: str, body: str) -> str:
    """A batch job running a Python file of the user's (its traceback names that file)."""
    script = rig.slurm.workdir / f"{name}.py"
    script.write_text(body)
    # The job lives on a moment after Python exits, so the agent reads the last lines.
    return rig.submit_on_agent_node(
        "--gres=gpu:1", "-J", name, "--wrap", f"sleep 1; python3 {script}; rc=$?; sleep 2; exit $rc"
    )


TYPE_ERROR = """\
import time
def step(batch):
    return batch + "tokens"
print("step 1 loss 2.31", flush=True)
time.sleep(1)
step(1)
"""


def test_a_type_error_in_the_users_code_is_never_requeued(rig):
    rig.vigil(mode="auto")
    rig.start()
    job = _python_job(rig, "sft-typo", TYPE_ERROR)
    plan = wait_for(
        lambda: RecoveryPlan.objects.filter(
            failure__job__scheduler_id=job, cause="user_exception"
        ).first(),
        timeout=60,
    )
    time.sleep(2)  # anything that would act has had time to
    assert plan.action == "notify" and plan.rule == "script_error"
    live = plan.actions.exclude(status="cancelled")  # a first guess may have been superseded
    assert list(live.values_list("kind", "audience")) == [("notify", "owner")]
    assert not RecoveryAction.objects.filter(kind="requeue").exists()
    info = rig.job(job)
    assert (info["JobState"], info["Restarts"]) == ("FAILED", "0")


def test_approve_mode_runs_nothing_until_approved_then_runs_once(rig):
    rig.vigil(mode="approve")
    rig.start()
    vn1 = rig.slurm.nodes[0]
    job = rig.submit_on_agent_node("--gres=gpu:8", "--wrap", "sleep 300")
    wait_for(lambda: JobEvent.objects.filter(job__scheduler_id=job, kind="started").exists())
    rig.xid(79)
    plan = _plan(failure__kind="gpu_error")
    drain, requeue = wait_for(lambda: list(plan.actions.order_by("seq")) or None)
    time.sleep(2)
    assert {drain.status, requeue.status} == {"awaiting_approval"}
    assert rig.slurm.drain_reason(vn1) in ("", "none")
    assert rig.job(job)["Restarts"] == "0"

    services.action_approve(requeue.pk, "olivia")  # waits for the drain before it
    services.action_approve(drain.pk, "olivia")
    _settled(plan)
    rig.wait_running(job, restarts=1)
    assert rig.slurm.drain_reason(vn1) == f"vigil: gpu_off_bus failure {plan.failure_id}"
    with pytest.raises(services.RecoveryError, match="succeeded: only an action awaiting"):
        services.action_approve(drain.pk, "olivia")
    time.sleep(1)
    assert rig.job(job)["Restarts"] == "1"  # approved once, run once


def test_dry_run_runs_nothing_and_says_what_it_would_have_run(rig):
    rig.vigil(mode="dry_run")
    rig.start()
    vn1 = rig.slurm.nodes[0]
    job = rig.submit_on_agent_node("--gres=gpu:8", "--wrap", "sleep 300")
    wait_for(lambda: JobEvent.objects.filter(job__scheduler_id=job, kind="started").exists())
    rig.xid(79)
    plan = _plan(failure__kind="gpu_error")
    drain, requeue = wait_for(lambda: list(plan.actions.order_by("seq")) or None)
    time.sleep(2)
    assert (drain.status, requeue.status) == ("dry_run", "dry_run")
    assert drain.commands[0][:4] == ["scontrol", "update", f"NodeName={vn1}", "State=DRAIN"]
    assert requeue.commands[0] == ["scontrol", "requeue", job]
    assert drain.steps == [] and requeue.steps == []
    assert rig.slurm.drain_reason(vn1) in ("", "none")
    assert (rig.job(job)["JobState"], rig.job(job)["Restarts"]) == ("RUNNING", "0")
