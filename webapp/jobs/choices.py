from django.db import models


class JobType(models.TextChoices):
    # The paper's workload types (AcmeTrace `type`: Pretrain, SFT, MLLM, Eval, Debug, Other).
    PRETRAIN = "pretrain", "Pretraining"
    SFT = "sft", "Supervised fine-tuning"
    MLLM = "mllm", "Multimodal LLM"
    EVAL = "eval", "Evaluation"
    DEBUG = "debug", "Debug"
    OTHER = "other", "Other"


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMEOUT = "timeout", "Timed out"
    NODE_FAIL = "node_fail", "Node failure"
    PREEMPTED = "preempted", "Preempted"
    OUT_OF_MEMORY = "out_of_memory", "Out of memory"

    @classmethod
    def final_group(cls, state: str) -> str:
        """completed / cancelled / failed, as the paper counts them (timeouts, node failures
        and out-of-memory count as failed; preempted as cancelled)."""
        if state == cls.COMPLETED:
            return "completed"
        if state in (cls.CANCELLED, cls.PREEMPTED):
            return "cancelled"
        return "failed"


class JobEventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    STARTED = "started", "Started"
    REQUEUED = "requeued", "Requeued"
    ENDED = "ended", "Ended"


class JobSource(models.TextChoices):
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"
    HTTP = "http", "HTTP API"
    SIMULATED = "simulated", "Simulated"
    ACMETRACE = "acmetrace", "AcmeTrace import"


# Final states as schedulers (Slurm, and AcmeTrace after it) name them -> JobState.
SCHEDULER_STATES: dict[str, str] = {
    "PENDING": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL,
    "PREEMPTED": JobState.PREEMPTED,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
}
