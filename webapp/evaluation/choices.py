from django.db import models


class PlanKind(models.TextChoices):
    BASELINE = "baseline", "Baseline (coupled)"
    DECOUPLED = "decoupled", "Decoupled"


class RunStatus(models.TextChoices):
    PLANNED = "planned", "Planned"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    # Finished, but some trials failed twice (the others completed).
    PARTIAL = "partial", "Done with failed trials"
    FAILED = "failed", "Failed"


class JobKind(models.TextChoices):
    COUPLED = "coupled", "Coupled trial (load, infer, metrics)"
    LOAD = "load", "Model load into shared memory"
    INFER = "infer", "Inference"
    METRICS = "metrics", "Metrics (CPU)"


class JobStatus(models.TextChoices):
    PLANNED = "planned", "Planned"
    SUBMITTED = "submitted", "Submitted"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    # Never ran: what it waited for failed twice.
    CANCELLED = "cancelled", "Cancelled"


FINAL_JOB_STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)
