"""Executors as data: the command lines each builds, how a result is read (transient or
permanent), and the health check's verdict lines. No scheduler runs here (the real Slurm runs
in test_slurm.py); Kubernetes is tested only through its command lines, as no cluster runs."""

from __future__ import annotations

import json
import re

import pytest

from webapp.recovery.executors import CommandResult, Target, executor_for
from webapp.recovery.executors.base import UnsupportedAction, command_run
from webapp.recovery.executors.slurm import healthcheck_verdicts, squeue_job


def target(kind: str, **kw) -> Target:
    return Target(action_id=7, kind=kind, cause="gpu_off_bus", failure_id=123, **kw)


def test_slurm_drains_with_a_reason_naming_the_cause_and_the_failure():
    (argv,) = executor_for("slurm").commands(target("drain", host="n1"))
    assert argv == [
        "scontrol", "update", "NodeName=n1", "State=DRAIN",
        "Reason=vigil: gpu_off_bus failure 123",
    ]  # fmt: skip


def test_slurm_requeues_then_makes_the_job_eligible_at_once():
    assert executor_for("slurm").commands(target("requeue", job="4242")) == [
        ["scontrol", "requeue", "--", "4242"],
        ["scontrol", "update", "JobId=4242", "StartTime=now"],
    ]


def test_rollback_skip_requeues_the_users_own_job_with_the_resume_point_in_its_comment():
    params = {"resume_checkpoint": "1000", "skip_steps": "1001-1200"}
    commands = executor_for("slurm").commands(target("resubmit", job="77", params=params))
    # The user's job runs again as the user, with the environment it was submitted with;
    # nothing of Vigil's is written, submitted or exported.
    assert commands == [
        ["scontrol", "requeue", "--", "77"],
        [
            "scontrol", "update", "JobId=77",
            "Comment=vigil-resume:checkpoint=1000,skip=1001-1200", "StartTime=now",
        ],
    ]  # fmt: skip


def test_scheduler_commands_run_with_none_of_vigils_settings(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "do-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://vigil:pw@db/vigil")
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://:pw@broker:6379/0")
    monkeypatch.setenv("VIGIL_SMTP_PASSWORD", "do-not-leak")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/cluster-a.conf")
    result = command_run(["env"])
    names = {line.partition("=")[0] for line in result.stdout.splitlines()}
    assert result.ok and {"PATH", "SLURM_CONF"} <= names
    assert not names & {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "VIGIL_SMTP_PASSWORD"}
    assert "do-not-leak" not in result.stdout


def test_the_health_check_is_one_batch_job_over_the_nodes(settings, tmp_path):
    settings.VIGIL_RECOVERY_WORKDIR = str(tmp_path)
    settings.VIGIL_HEALTHCHECK_SCRIPT = "/opt/vigil/deploy/healthcheck/nccl_pairwise.py"
    settings.VIGIL_HEALTHCHECK_ARGS = "--size-mb 256 --gpus-per-node 8"
    settings.VIGIL_HEALTHCHECK_TIMEOUT_S = 300
    (argv,) = executor_for("slurm").commands(target("health_check", params={"hosts": ["a", "b"]}))
    assert argv == [
        "sbatch", "--parsable", "--export=NONE", "--comment=vigil-action-7", "--nodes=2", "--nodelist=a,b", "--exclusive",
        "--time=5", "--job-name=vigil-healthcheck-7", f"--output={tmp_path}/healthcheck-7.out",
        "/opt/vigil/deploy/healthcheck/nccl_pairwise.py", "--size-mb", "256",
        "--gpus-per-node", "8",
    ]  # fmt: skip


def test_the_recovery_work_folder_is_private(settings, tmp_path):
    # Health check outputs (and what a check prints of the nodes) lie there, on shared storage.
    settings.VIGIL_RECOVERY_WORKDIR = str(tmp_path / "recovery")
    settings.VIGIL_SLURM_BIN_DIR = str(tmp_path / "no-slurm-here")
    slurm = executor_for("slurm")
    check = target("health_check", params={"hosts": ["a"]})
    (argv,) = slurm.commands(check)
    assert slurm.run(argv, check).returncode == 127  # no sbatch: the folder is made first
    assert (tmp_path / "recovery").stat().st_mode & 0o777 == 0o700
    (tmp_path / "recovery").chmod(0o755)  # made by hand, or by an older Vigil
    slurm.run(argv, check)
    assert (tmp_path / "recovery").stat().st_mode & 0o777 == 0o700


def test_verdict_lines_a_node_without_one_failed():
    text = "\n".join(
        [
            "round 1: (a, b) (c, d)",
            "VIGIL-HEALTH a PASS 182.4 GB/s",
            "VIGIL-HEALTH b FAIL all_gather timed out after 180 s",
            "VIGIL-HEALTH c PASS",
            "VIGIL-HEALTH z FAIL not a node of this check",
        ]
    )
    verdicts = healthcheck_verdicts(text, ["a", "b", "c", "d"])
    assert verdicts == {
        "a": (True, "182.4 GB/s"),
        "b": (False, "all_gather timed out after 180 s"),
        "c": (True, ""),
        "d": (False, "no verdict"),
    }


def test_slurm_tells_an_unreachable_controller_from_a_wrong_request():
    slurm = executor_for("slurm")
    down = CommandResult(("scontrol",), 1, "", "slurm_update error: Unable to contact slurm "
                         "controller (connect failure)")  # fmt: skip
    wrong = CommandResult(("scontrol",), 1, "", "slurm_update error: Invalid node name specified")
    assert slurm.transient(down) and not slurm.transient(wrong)
    assert slurm.transient(CommandResult(("scontrol",), 124, "", "timed out after 60 s"))


def test_squeue_json_reads_as_the_jobs_state_and_restarts():
    jobs = [
        {"job_id": 4241, "job_state": "RUNNING", "restart_cnt": 0, "name": "other"},
        {"job_id": 4242, "job_state": "PENDING", "restart_cnt": 1,
         "name": "t JobState=COMPLETED Restarts=9"},
        {"job_id": 4250, "array_job_id": 4249, "array_task_id": 3, "job_state": ["FAILED"],
         "restart_cnt": {"set": True, "number": 2}},
    ]  # fmt: skip
    text = json.dumps({"jobs": jobs})
    assert squeue_job(text, "4242") == {"JobState": "PENDING", "Restarts": "1"}
    assert squeue_job(text, "4249_3") == {"JobState": "FAILED", "Restarts": "2"}
    assert squeue_job(text, "4243") == {} and squeue_job("not json", "4242") == {}


def test_kubernetes_cordons_annotates_and_deletes_the_pod(settings):
    settings.VIGIL_KUBECTL = "kubectl"
    k8s = executor_for("kubernetes")
    assert k8s.commands(target("drain", host="gpu-node-07")) == [
        ["kubectl", "cordon", "--", "gpu-node-07"],
        [
            "kubectl", "annotate", "--overwrite", "--", "node", "gpu-node-07", "vigil.io/action=7",
            "vigil.io/failure=123", "vigil.io/cause=gpu_off_bus",
        ],
    ]  # fmt: skip
    assert k8s.commands(target("requeue", job="llm/pretrain-70b-worker-3")) == [
        [
            "kubectl",
            "delete",
            "pod",
            "--namespace",
            "llm",
            "--wait=false",
            "--",
            "pretrain-70b-worker-3",
        ]
    ]
    assert k8s.commands(target("requeue", job="eval-pod"))[0][4:] == [
        "default", "--wait=false", "--", "eval-pod"
    ]  # fmt: skip
    assert k8s.commands(target("resume", host="gpu-node-07"))[0] == [
        "kubectl", "uncordon", "--", "gpu-node-07"
    ]  # fmt: skip
    refused = CommandResult(("kubectl",), 1, "", "Unable to connect to the server: i/o timeout")
    assert k8s.transient(refused)


def test_an_action_an_executor_cannot_do_is_refused_with_the_reason():
    with pytest.raises(UnsupportedAction, match="kubernetes cannot run a health_check action"):
        executor_for("kubernetes").commands(target("health_check", params={"hosts": ["a"]}))
    with pytest.raises(UnsupportedAction, match="unknown executor 'pbs'"):
        executor_for("pbs")


@pytest.mark.parametrize(
    ("executor", "kind", "field", "value", "message"),
    [
        ("slurm", "requeue", "job", "4242 --nodes=1", "is not a Slurm job id"),
        ("slurm", "requeue", "job", "-1", "is not a Slurm job id"),
        ("slurm", "resubmit", "job", "12_x", "is not a Slurm job id"),
        ("slurm", "drain", "host", "gpu-[001-128]", "is not one Slurm node name"),
        ("slurm", "resume", "host", "n1 State=DOWN", "is not one Slurm node name"),
        ("kubernetes", "requeue", "job", "llm/--all", "pod '--all' is not a Kubernetes name"),
        ("kubernetes", "requeue", "job", "Kube-System/p", "namespace 'Kube-System' is not"),
        ("kubernetes", "drain", "host", "--selector=x", "node '--selector=x' is not"),
    ],
)
def test_an_id_that_is_not_the_schedulers_is_refused_before_any_command(
    settings, executor, kind, field, value, message
):
    settings.VIGIL_KUBECTL = "kubectl"
    with pytest.raises(UnsupportedAction, match=re.escape(message)):
        executor_for(executor).commands(target(kind, **{field: value}))


def test_slurm_accepts_array_tasks_and_het_components():
    slurm = executor_for("slurm")
    assert slurm.commands(target("requeue", job="4242_7"))[0] == [
        "scontrol",
        "requeue",
        "--",
        "4242_7",
    ]
    assert slurm.commands(target("requeue", job="4242+1"))[0][-1] == "4242+1"
