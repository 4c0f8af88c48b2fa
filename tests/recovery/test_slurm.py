"""Recovery on a real Slurm (two logical nodes, tests/slurm.py), every part real but the GPU:
a line in a node's kernel log or job log -> the node agent -> Redis -> Celery -> diagnosis ->
the recovery worker on the cluster's queue -> scontrol -> the job running again.
"""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone

from tests.helpers import database_url, wait_for
from tests.recovery.rig import CLUSTER, Rig
from tests.slurm import slurm_two_nodes  # noqa: F401 (the session fixture)
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Node
from webapp.jobs.models import JobEvent
from webapp.recovery import services
from webapp.recovery.actions import recovery_queue
from webapp.recovery.execution import action_execute
from webapp.recovery.executors import Target
from webapp.recovery.executors.slurm import SlurmExecutor
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
        final = all(a.status in ("succeeded", "failed", "cancelled", "rejected") for a in actions)
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
    drain, requeue, reboot = _settled(plan)
    info = rig.wait_running(job, restarts=1)
    # The reboot goes to slurmctld, which refuses it here: this test Slurm names no
    # RebootProgram (tests/recovery/test_slurm_reset.py has one). The node stays drained.
    assert (reboot.kind, reboot.status) == ("reboot", "failed")
    assert "RebootProgram isn't defined" in reboot.error

    failure = plan.failure
    assert (failure.cause, failure.action) == ("gpu_off_bus", "reboot")  # RESTART_BM: drained
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


def _python_job(rig: Rig, name: str, body: str, *sbatch: str, on_agent_node: bool = True) -> str:
    """A batch job running a Python file of the user's (its traceback names that file)."""
    script = rig.slurm.workdir / f"{name}.py"
    script.write_text(body)
    # The job lives on a moment after Python exits, so the agent reads the last lines.
    wrap = f"sleep 1; python3 {script}; rc=$?; sleep 2; exit $rc"
    args = [*(sbatch or ["--gres=gpu:1"]), "-J", name, "--wrap", wrap]
    return rig.submit_on_agent_node(*args) if on_agent_node else rig.slurm.sbatch(*args)


def _plan_for_cause(rig: Rig, job: str, cause: str, timeout: float = 60) -> RecoveryPlan:
    """The job's plan once its failure has `cause`; on a timeout, what it was diagnosed as
    instead and what the agent and workers logged (the usual culprit: its log never read)."""
    plans = RecoveryPlan.objects.filter(failure__job__scheduler_id=job)
    try:
        return wait_for(lambda: plans.filter(cause=cause).first(), timeout=timeout)
    except AssertionError as e:
        causes = list(plans.values_list("cause", "rule"))
        raise AssertionError(f"{e}; job {job} plans: {causes}\n{rig.logs()}") from None


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
    plan = _plan_for_cause(rig, job, "user_exception")
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
    drain, requeue, reboot = wait_for(lambda: list(plan.actions.order_by("seq")) or None)
    time.sleep(2)
    assert {drain.status, requeue.status, reboot.status} == {"awaiting_approval"}
    assert rig.slurm.drain_reason(vn1) in ("", "none")
    assert rig.job(job)["Restarts"] == "0"

    services.action_approve(requeue.pk, "olivia")  # waits for the drain before it
    services.action_approve(drain.pk, "olivia")
    services.action_reject(reboot.pk, "olivia", "the test Slurm cannot reboot")
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
    drain, requeue, reboot = wait_for(lambda: list(plan.actions.order_by("seq")) or None)
    time.sleep(2)
    assert (drain.status, requeue.status, reboot.status) == ("dry_run",) * 3
    assert drain.commands[0][:4] == ["scontrol", "update", f"NodeName={vn1}", "State=DRAIN"]
    assert requeue.commands[0] == ["scontrol", "requeue", "--", job]
    assert drain.steps == [] and requeue.steps == []
    assert rig.slurm.drain_reason(vn1) in ("", "none")
    assert (rig.job(job)["JobState"], rig.job(job)["Restarts"]) == ("RUNNING", "0")


CUDA_FAULT = """\
import os, time
print("step 1 loss 2.31", flush=True)
time.sleep(1)
if int(os.environ.get("SLURM_RESTART_COUNT", "0")) < {fail_runs}:
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
time.sleep(300)
"""


def _failing_job(rig: Rig, name: str, fail_runs: int) -> str:
    """A job pinned to the agent's node whose first `fail_runs` runs hit a CUDA fault."""
    pinned = ("--gres=gpu:1", f"--nodelist={rig.agent_node}")
    body = CUDA_FAULT.format(fail_runs=fail_runs)
    return _python_job(rig, name, body, *pinned, on_agent_node=False)


def _plans_of(job: str, n: int, timeout: float = 90) -> list[RecoveryPlan]:
    """The job's first n plans that have settled (every action final), oldest first."""

    def settled():
        plans = list(
            RecoveryPlan.objects.filter(failure__job__scheduler_id=job)
            .exclude(cause="unknown")
            .order_by("failure__occurred_at")
        )
        if len(plans) < n:
            return None
        live = [a for p in plans[:n] for a in p.actions.exclude(status="cancelled")]
        return plans[:n] if all(a.status in ("succeeded", "failed") for a in live) else None

    try:
        return wait_for(settled, timeout=timeout, interval=0.3)
    except AssertionError as e:
        plans = RecoveryPlan.objects.filter(failure__job__scheduler_id=job)
        seen = [(p.cause, p.rule, list(p.actions.values_list("kind", "status"))) for p in plans]
        raise AssertionError(f"{e}; job {job} plans: {seen}") from None


def test_a_cuda_fault_the_job_prints_restarts_it_once_and_never_drains_the_node(rig):
    # The job's own log is text its user's code prints: it never trips the breaker (which
    # would drain the node); the job is restarted once, then its owner decides.
    rig.vigil(mode="auto")
    rig.start()
    vn1 = rig.agent_node
    job = _failing_job(rig, "pretrain-cuda", fail_runs=2)
    first, second = _plans_of(job, 2)
    assert (first.cause, first.action, first.rule) == ("cuda_fault", "restart", "default_restart")
    assert list(first.actions.exclude(status="cancelled").values_list("kind", flat=True)) == [
        "requeue"
    ]
    assert (second.cause, second.action, second.rule) == ("cuda_fault", "notify", "restart_once")
    assert list(second.actions.exclude(status="cancelled").values_list("kind", flat=True)) == [
        "notify"
    ]
    assert "twice within" not in second.failure.breaker  # the breaker did not trip
    assert rig.slurm.drain_reason(vn1) == ""
    assert rig.job(job)["Restarts"] == "1"


def test_the_restart_limit_stops_restarting_and_tells_the_owner(rig):
    rig.vigil(mode="auto", max_auto_restarts=1)
    rig.start()
    job = _failing_job(rig, "pretrain-limit", fail_runs=9)
    first, second = _plans_of(job, 2)
    assert first.rule == "default_restart"
    assert (second.action, second.rule) == ("notify", "restart_limit")
    assert "1 times in a row (limit 1)" in second.reason
    live = second.actions.exclude(status="cancelled")
    # Not restarted; the node is not drained either (the job's own log is the only evidence).
    assert sorted(live.values_list("kind", flat=True)) == ["notify"]
    time.sleep(3)
    info = rig.job(job)
    assert (info["JobState"], info["Restarts"]) == ("FAILED", "1")


NCCL_HANG = """\
import time
print("[rank0]: step 1200 loss 2.31", flush=True)
time.sleep(1)
print("[rank3]:[E1201 09:10:00.000 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught "
      "collective operation timeout: WorkNCCL(SeqNum=4821, OpType=ALLREDUCE, NumelIn=1, "
      "NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.",
      flush=True)
raise SystemExit(1)
"""


def test_a_hang_health_checks_the_job_nodes_and_drains_exactly_the_bad_one(rig):
    rig.vigil(mode="auto")
    vn1, vn2 = rig.slurm.nodes
    rig.bad_nodes.write_text(f"{vn2}\n")  # the health check fails on vn2 only
    rig.start()
    sbatch = ("--nodes=2", "--gres=gpu:8")
    job = _python_job(rig, "pretrain-hang", NCCL_HANG, *sbatch, on_agent_node=False)
    (plan,) = _plans_of(job, 1, timeout=120)
    assert (plan.cause, plan.action) == ("nccl_timeout", "locate_restart")
    actions = list(plan.actions.exclude(status="cancelled").order_by("seq"))
    assert [(a.kind, a.host, a.status) for a in actions] == [
        ("health_check", "", "succeeded"),
        ("drain", vn2, "succeeded"),
        ("requeue", "", "succeeded"),
    ]
    check = actions[0]
    assert check.params["hosts"] == [vn1, vn2]
    assert check.params["found"]["failed"] == [vn2]
    assert check.result == "2 node(s) checked, 1 failed: " + vn2
    assert rig.slurm.drain_reason(vn2) == f"vigil: nccl_timeout failure {plan.failure_id}"
    assert rig.slurm.drain_reason(vn1) == ""
    assert rig.job(job)["Restarts"] == "1"


SLOW_SCONTROL = """\
#!/bin/sh
# scontrol that logs each call once Slurm has done it (so a test that waits for the line knows
# the drain is made), and answers a drain only seconds after making it
{real} "$@"; rc=$?
echo "$*" >> {log}
case "$*" in *State=DRAIN*) sleep 4;; esac
exit $rc
"""


def test_a_recovery_worker_killed_mid_action_finishes_it_once(rig, tmp_path):
    import shutil

    bindir = tmp_path / "slurm-bin"
    bindir.mkdir()
    calls = tmp_path / "scontrol.calls"
    for tool in ("sinfo", "sbatch", "squeue"):
        (bindir / tool).symlink_to(shutil.which(tool))
    wrapper = bindir / "scontrol"
    wrapper.write_text(SLOW_SCONTROL.format(log=calls, real=shutil.which("scontrol")))
    wrapper.chmod(0o755)
    env = {
        "VIGIL_SLURM_BIN_DIR": str(bindir),
        "VIGIL_SCHEDULER_TIMEOUT_S": "10",
        "VIGIL_RECOVERY_LEASE_GRACE_S": "1",
    }
    rig.vigil(mode="auto")
    rig.start(**env)
    vn1 = rig.agent_node
    job = rig.submit_on_agent_node("--gres=gpu:8", "--wrap", "sleep 300")
    wait_for(lambda: JobEvent.objects.filter(job__scheduler_id=job, kind="started").exists())
    rig.xid(79)
    # The drain has been sent to Slurm, and the worker has not recorded its answer yet.
    wait_for(lambda: calls.exists() and "State=DRAIN" in calls.read_text(), timeout=60)
    rig.recovery_worker.kill()
    rig.start_worker(rig.recovery_worker.queues, **env)

    plan = _plan(failure__kind="gpu_error")
    drain, requeue, _reboot = _settled(plan, timeout=90)
    rig.wait_running(job, restarts=1)
    lines = calls.read_text().splitlines()
    assert sum("State=DRAIN" in line for line in lines) == 1  # drained once
    assert sum(line.startswith("requeue") for line in lines) == 1  # requeued once
    assert (drain.status, drain.attempts) == ("succeeded", 2)
    (step,) = drain.steps
    assert step["verified"] is True and step["exit"] == 0
    assert rig.slurm.drain_reason(vn1) == f"vigil: gpu_off_bus failure {plan.failure_id}"
    assert rig.job(job)["Restarts"] == "1"


def test_a_scheduler_command_that_fails_ends_the_action_with_slurms_reason(rig):
    rig.vigil(mode="auto")
    rig.start()
    # A node Vigil knows but this Slurm does not (renamed, or a typo in a deployment).
    fleet_services.node_token_issue("rcv", "ghost-node")
    ghost = Node.objects.get(hostname="ghost-node")
    plan = services.node_return_to_service(ghost, "olivia", check=False)
    (resume,) = _settled(plan)
    assert (resume.status, resume.attempts) == ("failed", 1)  # permanent: not retried
    assert resume.commands == [["scontrol", "update", "NodeName=ghost-node", "State=RESUME"]]
    assert "Invalid node name specified" in resume.error
    assert resume.result.startswith("failed: ")
    assert resume.steps[0]["exit"] != 0
    assert rig.slurm.node_state(rig.slurm.nodes[0]) in ("idle", "mixed")  # nothing else moved


LOSS_SPIKE = """\
import os, subprocess, time
# The resume contract (README, recovery): a requeued run reads the resume point from its
# own comment.
comment = subprocess.run(["squeue", "-h", "-j", os.environ["SLURM_JOB_ID"], "-o", "%k"],
                         capture_output=True, text=True).stdout.strip()
if comment.startswith("vigil-resume:"):
    print("resumed:", comment, flush=True)
    print("settings:", ",".join(sorted(os.environ)), flush=True)
    time.sleep(300)
for it, loss in ((1198, "2.309113E+00"), (1199, "2.305271E+00"), (1200, "nan")):
    print(f" iteration {it:8d}/    5000 | consumed samples: {it * 1024:12d} | "
          f"lm loss: {loss} | loss scale: 1.0 | grad norm: 0.3 |", flush=True)
    time.sleep(0.5)
raise RuntimeError("loss is nan at iteration 1200")
"""
# Settings only the recovery worker holds: none may reach a job the worker acts on.
WORKER_SECRETS = {"SECRET_KEY": "worker-secret-key", "VIGIL_TEST_SECRET": "worker-secret"}
VIGILS = {*WORKER_SECRETS, "DATABASE_URL", "CELERY_BROKER_URL", "VIGIL_RECOVERY_WORKDIR"}


def test_a_loss_spike_requeues_the_users_job_from_a_checkpoint_once_approved(rig):
    rig.vigil(mode="auto")
    rig.start(**WORKER_SECRETS)
    job = _python_job(rig, "pretrain-spike", LOSS_SPIKE)
    plan = _plan_for_cause(rig, job, "loss_nan")
    assert plan.action == "rollback_skip"
    resubmit = wait_for(lambda: plan.actions.exclude(status="cancelled").first())
    # Rolling back is not automatic by default, even in auto mode: an operator approves it.
    time.sleep(2)
    resubmit.refresh_from_db()
    assert (resubmit.kind, resubmit.status) == ("resubmit", "awaiting_approval")
    assert rig.job(job)["Restarts"] == "0"

    services.action_approve(resubmit.pk, "olivia")
    _settled(plan)
    (resubmit,) = plan.actions.exclude(status="cancelled")
    assert resubmit.status == "succeeded" and resubmit.params["skip_steps"] == "1200-1200"
    assert resubmit.result == f"job {job} requeued from its checkpoint"
    rig.wait_running(job, restarts=1)  # the user's own job, under its own id
    out = rig.slurm.workdir / f"{job}.out"  # overwritten by the new run
    wait_for(lambda: out.exists() and "settings:" in out.read_text(), timeout=60)
    lines = out.read_text().splitlines()
    assert lines[0] == "resumed: vigil-resume:checkpoint=previous,skip=1200-1200"
    settings_seen = set(lines[1].removeprefix("settings: ").split(","))
    assert "SLURM_JOB_ID" in settings_seen and not settings_seen & set(WORKER_SECRETS)
    assert "worker-secret" not in out.read_text()


def test_a_health_check_job_holds_none_of_vigils_settings(rig, settings):
    rig.settings_apply(settings)
    rig.vigil(mode="auto")
    rig.start(**WORKER_SECRETS)
    vn2 = rig.slurm.nodes[1]
    rig.slurm.run("scontrol", "update", f"NodeName={vn2}", "State=DRAIN", "Reason=bad dimm")
    plan = services.node_return_to_service(Node.objects.get(hostname=vn2), "olivia")
    check, resume = _settled(plan)
    assert (check.status, resume.status) == ("succeeded", "succeeded")
    out = (rig.slurm.workdir / f"healthcheck-{check.pk}.out").read_text()
    seen = {line[4:].partition("=")[0] for line in out.splitlines() if line.startswith("ENV ")}
    assert "SLURM_JOB_ID" in seen  # the check's job did report what it was given
    assert not seen & VIGILS
    assert "worker-secret" not in out


def test_return_to_service_checks_the_node_then_resumes_it(rig, settings):
    rig.settings_apply(settings)  # the plan is made here, in the test (the page's process)
    rig.vigil(mode="auto")
    rig.start()
    vn2 = rig.slurm.nodes[1]
    rig.slurm.run("scontrol", "update", f"NodeName={vn2}", "State=DRAIN", "Reason=bad dimm")
    node = Node.objects.get(hostname=vn2)
    # The watcher reports the hand-made drain with its reason.
    wait_for(lambda: Node.objects.get(pk=node.pk).state == "drained", timeout=30)
    assert Node.objects.get(pk=node.pk).state_reason == "bad dimm"

    rig.bad_nodes.write_text(f"{vn2}\n")  # still bad: it stays drained
    plan = services.node_return_to_service(node, "olivia")
    check, resume, drain = _settled(plan)
    assert (check.status, resume.status, drain.status) == ("succeeded", "cancelled", "succeeded")
    assert resume.result == f"cancelled: health check failed on {vn2}"
    assert check.commands[0][:4] == [
        "scontrol", "create", "reservation", f"ReservationName=vigil-rts-{plan.pk}"
    ]  # fmt: skip
    reason = f"vigil: bad dimm (failed the health check, action {check.pk})"
    assert rig.slurm.drain_reason(vn2) == reason
    assert "vigil-rts" not in rig.slurm.run("scontrol", "show", "reservation")  # released

    rig.bad_nodes.write_text("")  # repaired
    plan = services.node_return_to_service(node, "olivia")
    check, resume = _settled(plan)
    assert (check.status, resume.status) == ("succeeded", "succeeded")
    assert resume.commands == [["scontrol", "delete", f"ReservationName=vigil-rts-{plan.pk}"]]
    assert (resume.approved_by, plan.requested_by) == ("olivia", "olivia")
    assert rig.slurm.node_state(vn2) == "idle"
    wait_for(lambda: Node.objects.get(pk=node.pk).state in ("up", "registered"), timeout=30)


# A job name holding the fields a Key=Value reader of `scontrol show job` would take first.
FORGING_NAME = "t JobState=COMPLETED Restarts=7 WorkDir=/etc Account=root StdOut=/etc/shadow"


def test_a_job_name_cannot_forge_what_recovery_reads_of_the_job(slurm_two_nodes, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SLURM_CONF", str(slurm_two_nodes.conf))
    job = slurm_two_nodes.sbatch("--gres=gpu:1", "-J", FORGING_NAME, "--wrap", "sleep 60")
    try:
        wait_for(lambda: slurm_two_nodes.job_state(job) == "RUNNING", timeout=60)
        executor = SlurmExecutor()
        requeue = Target(action_id=1, kind="requeue", job=job)
        before = executor.before(["scontrol", "requeue", job], requeue)
        assert before == {"restarts": "0", "job_state": "RUNNING", "runs": 0}
        # After a crash, a requeue that did not happen is not taken for done.
        assert not executor.done(["scontrol", "requeue", job], requeue, {"restarts": "0"})
        slurm_two_nodes.run("scontrol", "requeue", job)
        wait_for(lambda: executor.done(["scontrol", "requeue", job], requeue, before), timeout=30)
        # Once squeue has forgotten a job, its runs in accounting tell (a requeue adds one).
        forgotten = {"runs": before["runs"]}
        assert executor.done(["scontrol", "requeue", job], requeue, forgotten)
    finally:
        slurm_two_nodes.cancel_all()


def test_switching_to_dry_run_stops_an_action_waiting_for_its_time(rig):
    rig.vigil(mode="auto")
    # The job failure's actions wait for late log lines, longer than this test lasts: the
    # switch comes meanwhile, whatever the machine's speed.
    rig.start_worker("ingest,default", VIGIL_RECOVERY_SETTLE_S="3600")
    rig.recovery_worker = rig.start_worker(recovery_queue(CLUSTER))
    rig.start_agent()
    rig.wait_agent_ready()
    job = _failing_job(rig, "pretrain-switch", fail_runs=1)
    plan = _plan_for_cause(rig, job, "cuda_fault")
    requeue = wait_for(lambda: plan.actions.filter(kind="requeue", status="ready").first())
    services.recovery_policy_set(rig.cluster_id, mode="dry_run", user="olivia")
    requeue.refresh_from_db()
    assert requeue.status == "cancelled"
    # Its task arriving at the action's earliest start finds it cancelled and runs nothing:
    # the earliest start is moved to now and the task's own code runs it, as the worker would.
    RecoveryAction.objects.filter(pk=requeue.pk).update(not_before=timezone.now())
    action_execute(requeue.pk, worker="late-task")
    requeue.refresh_from_db()
    assert (requeue.status, requeue.steps) == ("cancelled", [])
    assert requeue.result == "cancelled: the cluster was switched to dry_run by olivia"
    info = rig.job(job)
    assert (info["JobState"], info["Restarts"]) == ("FAILED", "0")


def test_a_health_check_that_cannot_start_in_time_is_cancelled_not_submitted_twice(rig, settings):
    rig.settings_apply(settings)
    rig.vigil(mode="auto")
    # Each attempt waits 10 s for its check; two attempts, then the action fails.
    rig.start(VIGIL_HEALTHCHECK_TIMEOUT_S="10", VIGIL_RECOVERY_MAX_ATTEMPTS="2")
    vn2 = rig.slurm.nodes[1]
    # A user's job holds vn2 while it drains: the exclusive check cannot start on it.
    user_job = rig.slurm.sbatch("--gres=gpu:1", f"--nodelist={vn2}", "--wrap", "sleep 300")
    wait_for(lambda: rig.slurm.job_state(user_job) == "RUNNING", timeout=60)
    rig.slurm.run("scontrol", "update", f"NodeName={vn2}", "State=DRAIN", "Reason=bad dimm")
    plan = services.node_return_to_service(Node.objects.get(hostname=vn2), "olivia")
    check, resume = _settled(plan, timeout=120)
    assert (check.status, check.attempts, resume.status) == ("failed", 2, "cancelled")
    assert "still PENDING after 10 s: cancelled" in check.error
    # Each attempt recorded the check's job id, and cancelled it before the next one.
    jobs = [step["stdout"].strip() for step in check.steps if step["argv"][0] == "sbatch"]
    assert len(jobs) == 2 and len(set(jobs)) == 2
    queued = json.loads(rig.slurm.run("squeue", "--json"))["jobs"]
    states = {str(j["job_id"]): j["job_state"] for j in queued}
    assert [states.get(job) for job in jobs] == ["CANCELLED", "CANCELLED"]
    # No other check of this action was left behind (earlier tests' checks may be listed).
    mine = [j for j in queued if j["comment"] == f"vigil-action-{check.pk}"]
    assert sorted(str(j["job_id"]) for j in mine) == sorted(jobs)
    assert rig.slurm.job_state(user_job) == "RUNNING"  # the user's job was never touched
