"""Jobs, which GPUs they held when (an interval table), their events, and their tallies.

Samples carry no job id, so that a requeue or a late allocation never rewrites them: per-job views
join samples to JobAllocation intervals at query time. The characterization reads JobTally
(webapp/jobs/tallies.py), kept up to date by triggers on the jobs table, instead of aggregating a
million jobs."""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.choices import JobEventKind, JobSource, JobState, JobType
from webapp.jobs.tallies import epoch_s


def _seconds_between(start, end) -> float | None:
    """date_part('epoch', end - start), as PostgreSQL computes it (tallies.epoch_s)."""
    if start is None or end is None:
        return None
    delta = end - start
    return epoch_s((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)


class Job(models.Model):
    # No separate index on cluster: the unique (cluster, scheduler_id) and the indexes below
    # all lead with it. No database-level FK either (like the telemetry samples): its per-row
    # check was a fifth of the million-row trace import; PROTECT still refuses, in Django,
    # to delete a cluster that has jobs.
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, related_name="jobs", db_index=False, db_constraint=False
    )
    scheduler_id = models.CharField(max_length=128)
    # Database defaults as well (db_default) where the trace import leaves a column out of its
    # COPY: each column COPY fills costs PostgreSQL a receive-function call per row.
    name = models.CharField(max_length=256, blank=True, default="", db_default="")
    user = models.CharField(max_length=128, blank=True, default="")
    team = models.CharField(max_length=128, blank=True, default="", db_default="")
    # What its energy and GPU-hours are charged to (Slurm: the account).
    project = models.CharField(max_length=128, blank=True, default="", db_default="")
    partition = models.CharField(max_length=128, blank=True, default="", db_default="")
    qos = models.CharField(max_length=128, blank=True, default="", db_default="")
    comment = models.CharField(max_length=1024, blank=True, default="", db_default="")
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
    # GPU time of the job's runs before its current one (their closed allocations), set by the
    # job-event ingest as it applies a requeue or a start: the tally counts the current run
    # only (a requeue clears start_at), and the characterization adds this column instead of
    # joining allocations.
    earlier_runs_gpu_time_s = models.FloatField(default=0.0, db_default=0.0)
    updated_at = models.DateTimeField(auto_now=True, db_default=Now())

    class Meta:
        ordering = ["-submit_at"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "scheduler_id"], name="job_unique_id"),
        ]
        # Every index is paid for by each imported row (a trace has a million; each index
        # costs the import a good part of what the heap row does): none on (cluster, state)
        # or user, since the list walks (cluster, submit_at) newest first filtering by them
        # and counts the matches (a scan of the cluster's jobs either way); nothing else reads
        # jobs by state or user.
        indexes = [
            models.Index(fields=["cluster", "submit_at"], name="job_cluster_submit"),
            # Only requeued jobs have entries (an imported row is never one): the
            # characterization reads their earlier runs without a pass over the cluster.
            models.Index(
                fields=["cluster", "submit_at"],
                name="job_requeued_submit",
                condition=models.Q(earlier_runs_gpu_time_s__gt=0),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.scheduler_id} {self.name}"

    # Derived, not stored (stored generated columns cost the trace import about a quarter of its
    # time; the characterization reads tallies). In SQL: date_part('epoch', end_at - start_at).
    @property
    def duration_s(self) -> float | None:
        return _seconds_between(self.start_at, self.end_at)

    @property
    def queue_s(self) -> float | None:
        return _seconds_between(self.submit_at, self.start_at)

    @property
    def gpu_time_s(self) -> float | None:
        duration = self.duration_s
        return None if duration is None else duration * self.gpus_requested


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


class JobTally(models.Model):
    """A tally (a signed delta) of some of a cluster's jobs of one type, GPU or CPU jobs: jobs
    and GPU time per state; jobs per duration, queueing delay and GPU count (arrays of distinct
    values and their counts). The cluster's tally is the sum of its rows. Written by triggers
    on the jobs table and by the trace import; merged by job_tallies_compact
    (webapp/jobs/tallies.py has the arithmetic)."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    job_type = models.CharField(max_length=16, choices=JobType.choices)
    gpu = models.BooleanField()  # gpus_requested > 0
    states = ArrayField(models.CharField(max_length=16))
    state_jobs = ArrayField(models.BigIntegerField())
    state_gpu_time_s = ArrayField(models.FloatField())
    duration_s = ArrayField(models.FloatField())
    duration_jobs = ArrayField(models.BigIntegerField())
    queue_s = ArrayField(models.FloatField())
    queue_jobs = ArrayField(models.BigIntegerField())
    gpus = ArrayField(models.BigIntegerField())
    gpus_jobs = ArrayField(models.BigIntegerField())
    # A merged row (one per type and GPU / CPU after a compaction), not a delta.
    compacted = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["cluster", "id"], name="jobtally_cluster_id")]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.job_type}{'' if self.gpu else ' (CPU)'}"


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
