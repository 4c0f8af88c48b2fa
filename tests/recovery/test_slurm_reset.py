"""NVIDIA's RESET_GPU and RESTART_BM Xids on a real Slurm (tests/gpunode.py: the GPU node's
`nvidia-smi` and RebootProgram are the stand-ins, everything else real): the agent reads the
Xid, Vigil drains the node, waits for its job to leave, resets the GPU through a job of its
own pinned to the node, health-checks it and returns it to service, each step audited; a
reboot goes through `scontrol reboot`; a node a person drained is never resumed."""

from __future__ import annotations

import pytest

from tests.helpers import database_url, wait_for
from tests.recovery.gpunode import slurm_gpu_nodes  # noqa: F401 (the module fixture)
from tests.recovery.rig import GPU1, Rig
from webapp.fleet.models import Node
from webapp.jobs.models import JobEvent
from webapp.recovery.models import RecoveryAction, RecoveryPlan

pytestmark = pytest.mark.integration

BUS = "00000000:18:00.0"  # GPU 0 of the rig's fixture, the one its Xid line names


@pytest.fixture
def rig(slurm_gpu_nodes, transactional_db, broker, tmp_path):  # noqa: F811
    slurm_gpu_nodes.gpu_log.write_text("")  # what this test's GPU was asked, only
    rig = Rig(slurm_gpu_nodes, tmp_path, database_url())
    yield rig
    rig.stop()


def _gpu_plan(rig: Rig, timeout: float = 90, xid: int | None = None) -> list[RecoveryAction]:
    """The GPU error's plan (of that Xid's) once every action of it is final."""
    plans = RecoveryPlan.objects.filter(failure__kind="gpu_error")
    if xid is not None:
        plans = plans.filter(failure__gpu_error__xid=xid)
    plan = wait_for(lambda: plans.first(), 60)

    def done():
        actions = list(plan.actions.order_by("seq", "id"))
        final = all(a.status in ("succeeded", "failed", "cancelled") for a in actions)
        return actions if actions and final else None

    try:
        return wait_for(done, timeout=timeout, interval=0.2)
    except AssertionError:
        now = list(plan.actions.values_list("kind", "status", "result"))
        raise AssertionError(f"plan not settled: {now}\n{rig.logs()}") from None


def _job_on_first_node(rig: Rig) -> str:
    job = rig.submit_on_agent_node("--gres=gpu:8", "-J", "pretrain-70b", "--wrap", "sleep 300")
    wait_for(lambda: JobEvent.objects.filter(job__scheduler_id=job, kind="started").exists())
    return job


def test_a_reset_gpu_xid_drains_waits_resets_checks_and_resumes_the_node(rig):
    rig.vigil(mode="auto")
    rig.start()
    gn1, gn2 = rig.slurm.nodes
    job = _job_on_first_node(rig)

    rig.xid(109)  # context-switch timeout: NVIDIA's catalog says RESET_GPU
    actions = _gpu_plan(rig)
    assert [(a.kind, a.status) for a in actions] == [
        ("drain", "succeeded"), ("requeue", "succeeded"), ("reset_gpu", "succeeded"),
        ("health_check", "succeeded"), ("resume", "succeeded"),
    ]  # fmt: skip
    drain, requeue, reset, check, resume = actions
    info = rig.wait_running(job, restarts=1)
    assert info["NodeList"] == gn2  # the job runs again elsewhere

    # The reset: the stand-in GPU was reset by bus id, with no job of the user's on the node.
    calls = rig.slurm.gpu_log.read_text().splitlines()
    assert [c for c in calls if c.startswith("ARGV")] == [f"ARGV -r -i {BUS}"]
    held = [c.split(" ", 2)[2] for c in calls if c.startswith("JOB")]
    assert held == [f"vigil-gpu-reset-{reset.pk}"]
    # Audited step by step: wait until no job holds the node, reserve it for Vigil, resume
    # it into the reservation, run the reset there.
    reservation = f"vigil-reset-{reset.plan_id}-{gn1}"
    assert [s["argv"][:3] for s in reset.steps] == [
        ["squeue", "-h", f"--nodelist={gn1}"],
        ["scontrol", "create", "reservation"],
        ["scontrol", "update", f"NodeName={gn1}"],
        ["sbatch", "--parsable", "--export=NONE"],
    ]
    assert [s["exit"] for s in reset.steps] == [0, 0, 0, 0]
    assert f"ReservationName={reservation}" in reset.commands[1]
    assert reset.commands[3][-1] == f"--wrap=nvidia-smi -r -i {BUS}"
    assert requeue.ended_at <= reset.started_at
    # The health check ran in the reservation, passed, and the resume ended the reservation.
    assert check.params["found"]["failed"] == []
    assert f"--reservation={reservation}" in check.commands[0]
    assert resume.commands == [["scontrol", "delete", f"ReservationName={reservation}"]]
    assert rig.slurm.node_state(gn1) == "idle"
    assert reservation not in rig.slurm.run("scontrol", "show", "reservation", check=False)
    wait_for(lambda: Node.objects.get(hostname=gn1).state == "up", timeout=30)


def test_a_persons_drain_is_left_alone_and_a_restart_bm_xid_reboots_through_slurm(rig):
    # One rig for both: a node a person drained is neither reset nor resumed; once the person
    # has returned it, a RESTART_BM Xid on another GPU of it goes through `scontrol reboot`.
    rig.vigil(mode="auto")
    rig.start()
    gn1 = rig.slurm.nodes[0]
    job = _job_on_first_node(rig)
    why = "ops: fan replacement, ticket 881"
    rig.slurm.run("scontrol", "update", f"NodeName={gn1}", "State=DRAIN", f"Reason={why}")
    wait_for(lambda: Node.objects.get(hostname=gn1).state_reason == why, timeout=30)

    rig.xid(109)
    actions = _gpu_plan(rig, xid=109)
    assert [(a.kind, a.audience) for a in actions] == [("requeue", ""), ("notify", "operators")]
    assert "a person drained" in actions[1].reason
    rig.wait_running(job, restarts=1)
    assert rig.slurm.drain_reason(gn1) == why
    assert "drain" in rig.slurm.node_state(gn1)

    # The person returns the node; a new job on it, and one without GPUs, which Vigil does
    # not requeue: slurmctld holds the reboot until it ends, so its view of the request is
    # what is read.
    rig.slurm.run("scontrol", "update", f"NodeName={gn1}", "State=RESUME")
    wait_for(lambda: Node.objects.get(hostname=gn1).state == "up", timeout=30)
    rig.slurm.run("scancel", job)
    job = _job_on_first_node(rig)
    cpu_job = rig.slurm.sbatch(f"--nodelist={gn1}", "-J", "etl", "--wrap", "sleep 300")
    rig.wait_running(cpu_job)
    rig.xid(79, pci=GPU1)  # GPU off the bus: RESTART_BM
    try:
        drain, requeue, reboot = _gpu_plan(rig, xid=79)
        rig.wait_running(job, restarts=1)
        failure_id = drain.plan.failure_id
        assert (reboot.kind, reboot.status) == ("reboot", "succeeded")
        reason = f"vigil: gpu_off_bus failure {failure_id}"
        assert reboot.commands == [
            ["scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", gn1]
        ]
        node = rig.slurm.run("scontrol", "show", "node", gn1)
        assert "REBOOT_REQUESTED" in node and "DRAIN" in node
        assert f"Reason={reason}" in node
    finally:
        rig.slurm.run("scontrol", "reboot", "cancel", gn1, check=False)
    # Nothing of Vigil's reset the GPU or resumed the node the person had drained.
    assert not RecoveryAction.objects.filter(kind__in=["reset_gpu", "resume"]).exists()
    assert not rig.slurm.gpu_log.read_text()
