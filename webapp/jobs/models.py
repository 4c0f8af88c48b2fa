"""Jobs, which GPUs they held when (an interval table), and their events.

Samples carry no job id (DESIGN.md): per-job views join samples to JobAllocation intervals at
query time. Durations and GPU time are generated columns, so the characterization queries over
a million jobs aggregate stored numbers instead of computing them per row.
"""

from django.db import models
from django.db.models import F, Func

from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.choices import JobEventKind, JobSource, JobState, JobType


class EpochSeconds(Func):
    """Seconds of an interval as float8: date_part('epoch', ...). EXTRACT returns numeric since
    PostgreSQL 14, and numeric arithmetic in the three generated columns was a large share of
    the million-row trace import; both are immutable, as a generated column needs."""

    template = "date_part('epoch', %(expressions)s)"
    output_field = models.FloatField()


class Job(models.Model):
    # No separate index on cluster: the unique (cluster, scheduler_id) and the indexes below
    # all lead with it. No database-level FK either (like the telemetry samples): its per-row
    # check was a fifth of the million-row trace import; PROTECT still refuses, in Django,
    # to delete a cluster that has jobs.
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, related_name="jobs", db_index=False, db_constraint=False
    )
    scheduler_id = models.CharField(max_length=128)
    name = models.CharField(max_length=256, blank=True, default="")
    user = models.CharField(max_length=128, blank=True, default="")
    team = models.CharField(max_length=128, blank=True, default="")
    partition = models.CharField(max_length=128, blank=True, default="")
    qos = models.CharField(max_length=128, blank=True, default="")
    comment = models.CharField(max_length=1024, blank=True, default="")
    job_type = models.CharField(max_length=16, choices=JobType.choices, default=JobType.OTHER)
    # True when the scheduler named the type (an event's job_type, the trace's `type`): the
    # site's type rules then leave it alone.
    job_type_explicit = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    # Time of the event that set `state`. Events arrive out of order (a late watcher); an
    # event older than this one no longer changes the state.
    state_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=JobSource.choices, default=JobSource.SLURM)
    submit_at = models.DateTimeField(null=True, blank=True)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    gpus_requested = models.PositiveIntegerField(default=0)
    nodes_requested = models.PositiveIntegerField(default=0)
    cpus_requested = models.PositiveIntegerField(default=0)
    exit_code = models.SmallIntegerField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    duration_s = models.GeneratedField(
        expression=EpochSeconds(F("end_at") - F("start_at")),
        output_field=models.FloatField(null=True),
        db_persist=True,
    )
    queue_s = models.GeneratedField(
        expression=EpochSeconds(F("start_at") - F("submit_at")),
        output_field=models.FloatField(null=True),
        db_persist=True,
    )
    gpu_time_s = models.GeneratedField(
        expression=EpochSeconds(F("end_at") - F("start_at")) * F("gpus_requested"),
        output_field=models.FloatField(null=True),
        db_persist=True,
    )

    class Meta:
        ordering = ["-submit_at"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "scheduler_id"], name="job_unique_id"),
        ]
        # Every index is paid for by each imported row (a trace has a million): none on
        # (cluster, state), since the list filters by state while walking (cluster, submit_at)
        # newest first and no other read filters on it.
        indexes = [
            models.Index(fields=["cluster", "submit_at"], name="job_cluster_submit"),
            # A plain index (db_index=True would add a second, LIKE-pattern one that no query
            # uses and that slows the trace import).
            models.Index(fields=["user"], name="job_user"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.scheduler_id} {self.name}"


class JobAllocation(models.Model):
    """Job held GPU from `start` until `end` (open while running)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    gpu = models.ForeignKey(
        Gpu, on_delete=models.PROTECT, related_name="allocations", null=True, blank=True
    )
    gpu_index = models.PositiveSmallIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "node_id", "gpu_index"]
        indexes = [
            models.Index(fields=["gpu", "start"], name="alloc_gpu_start"),
            models.Index(fields=["node", "start"], name="alloc_node_start"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} node {self.node_id} gpu {self.gpu_index}"


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=JobEventKind.choices)
    ts = models.DateTimeField()
    state = models.CharField(max_length=16, choices=JobState.choices, blank=True, default="")
    exit_code = models.SmallIntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["ts", "id"]
        constraints = [
            # A watcher that re-sends an event (spool replay, redelivery) adds nothing.
            models.UniqueConstraint(fields=["job", "kind", "ts"], name="jobevent_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.ts:%Y-%m-%d %H:%M:%S}"


class JobTypeRule(models.Model):
    """Ordered rules that give a job its type from its name, partition, QOS or comment.

    The first enabled rule whose regular expression matches wins; no match means `other`.
    Sites edit them in the admin; a default set comes with the migration.
    """

    class Field(models.TextChoices):
        NAME = "name", "Job name"
        PARTITION = "partition", "Partition"
        QOS = "qos", "QOS"
        COMMENT = "comment", "Comment"

    order = models.PositiveIntegerField(default=100)
    field = models.CharField(max_length=16, choices=Field.choices, default=Field.NAME)
    pattern = models.CharField(
        max_length=256, help_text="Python regular expression, case-insensitive"
    )
    job_type = models.CharField(max_length=16, choices=JobType.choices)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["order", "id"]

    def __str__(self) -> str:
        return f"{self.order}: {self.field} ~ /{self.pattern}/ -> {self.job_type}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from webapp.jobs.typing_rules import pattern_compile

        try:
            pattern_compile(self.pattern)
        except ValueError as exc:
            raise ValidationError({"pattern": str(exc)}) from None
