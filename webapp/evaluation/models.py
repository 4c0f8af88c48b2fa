"""Evaluation requests (runs), their jobs as planned and as run, and learned estimates.

A run evaluates one checkpoint on a list of datasets with one plan (the decoupled one, or the
coupled baseline to compare); both plans' predictions are kept on it. Each planned job is a
row: what it runs, where and when the planner put it, the Slurm job it became (the jobs app
tracks that job like any other), and what it measured.
"""

from django.contrib.postgres.fields import ArrayField
from django.db import models

from webapp.evaluation.choices import JobKind, JobStatus, PlanKind, RunStatus
from webapp.fleet.models import Cluster


class EvaluationRun(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    model_path = models.CharField(max_length=1024)
    model_size_gb = models.FloatField()
    datasets = ArrayField(models.CharField(max_length=128))
    nodes = models.PositiveSmallIntegerField()
    gpus_per_node = models.PositiveSmallIntegerField()
    plan = models.CharField(max_length=16, choices=PlanKind.choices, default=PlanKind.DECOUPLED)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.PLANNED)
    requested_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # planner.plans_compare(): both plans, their predictions, the speedup.
    prediction = models.JSONField(default=dict)
    predicted_makespan_s = models.FloatField()
    # Slurm node names the plan's node indexes became.
    node_names = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    actual_makespan_s = models.FloatField(null=True, blank=True)
    actual_gpu_time_s = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    # The worker submitting it, until when (core/workrows.py): one that died mid-submit is
    # replaced then. Cleared once submitted: a running run without a lease is being tracked.
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.pk}: {self.model_path} on {len(self.datasets)} datasets"


class EvaluationJob(models.Model):
    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="jobs")
    key = models.CharField(max_length=64)
    order = models.PositiveIntegerField()  # submission order: the planner's
    kind = models.CharField(max_length=16, choices=JobKind.choices)
    node_index = models.PositiveSmallIntegerField()
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    datasets = models.JSONField(default=list)  # [[dataset, shard, shards], ...]
    depends_on = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    planned_start_s = models.FloatField()
    planned_end_s = models.FloatField()
    planned_phases = models.JSONField(default=dict)
    scheduler_id = models.CharField(max_length=128, blank=True, default="")
    attempts = models.PositiveSmallIntegerField(default=0)
    submitted_at = models.DateTimeField(null=True, blank=True)  # of the current attempt
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PLANNED)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    # Phase -> [start, end] (epoch seconds) from the program's report.
    measured = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["run_id", "order"]
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="evaljob_unique_key"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.key}"


class RuntimeEstimate(models.Model):
    """Learned seconds per phase of one dataset's whole trial (on one GPU, coupled load)."""

    dataset = models.CharField(max_length=128, unique=True)
    load_s = models.FloatField()
    infer_s = models.FloatField()
    metrics_s = models.FloatField()
    runs = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["dataset"]

    def __str__(self) -> str:
        return f"{self.dataset}: {self.load_s:.0f}/{self.infer_s:.0f}/{self.metrics_s:.0f} s"


class SchedulerLatency(models.Model):
    """How long the cluster's scheduler takes to start a job that may start, learned from
    past runs: after it was submitted or its GPU freed (the planner's `dispatch_s`), after
    the job it waits for ended (`dependency_s`)."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="+")
    dispatch_s = models.FloatField()
    dependency_s = models.FloatField()
    runs = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "scheduler latencies"

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.dispatch_s:.2f} s"
