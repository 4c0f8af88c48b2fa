"""Modes, kinds and states of recovery plans and actions."""

from django.db import models


class Mode(models.TextChoices):
    # New clusters start in dry_run: nothing touches a scheduler until an operator says so.
    AUTO = "auto", "Automatic"
    APPROVE = "approve", "Approve each action"
    DRY_RUN = "dry_run", "Dry run (record only)"


class ExecutorKind(models.TextChoices):
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"
    SIMULATED = "simulated", "Simulated (demo)"


class ActionKind(models.TextChoices):
    DRAIN = "drain", "Drain node"
    REQUEUE = "requeue", "Requeue job"
    RESUBMIT = "resubmit", "Resubmit from checkpoint (rollback, skip data)"
    HEALTH_CHECK = "health_check", "Node health check"
    # NVIDIA's Xid catalog resolutions RESET_GPU and RESTART_BM / RESTART_VM.
    RESET_GPU = "reset_gpu", "Reset GPU"
    REBOOT = "reboot", "Reboot node"
    RESUME = "resume", "Return node to service"
    NOTIFY = "notify", "Notify"


class ActionStatus(models.TextChoices):
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    READY = "ready", "Ready"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected"
    DRY_RUN = "dry_run", "Not run (dry run)"
    CANCELLED = "cancelled", "Cancelled"


# States an action no longer leaves.
FINAL_STATES = frozenset(
    {
        ActionStatus.SUCCEEDED,
        ActionStatus.FAILED,
        ActionStatus.REJECTED,
        ActionStatus.DRY_RUN,
        ActionStatus.CANCELLED,
    }
)


class PlanKind(models.TextChoices):
    FAILURE = "failure", "Failure"
    RETURN_TO_SERVICE = "return_to_service", "Return to service"


class Audience(models.TextChoices):
    # Who a notify action is for; the alerts app routes it (no mail is sent here).
    OWNER = "owner", "Job owner"
    OPERATORS = "operators", "Operators"
