"""Failure records: GPU error events and job log windows from the nodes, the failure events
diagnosed from them, and the rules the optional LLM hook proposes for a human to accept.

Causes, categories and actions are choices built from `taxonomy.py` (the one home of labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import models

from webapp.failures import taxonomy
from webapp.failures.choices import DiagnosisSource, FailureKind, GpuErrorKind
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.models import Job

CAUSE_CHOICES = taxonomy.cause_choices()
CATEGORY_CHOICES = [(c.value, c.value) for c in taxonomy.Category]
ACTION_CHOICES = [(a.value, a.value.replace("_", " ")) for a in taxonomy.Action]
# A GPU's Xids form one burst until 3 min of silence (docs/telemetry.md section 5, NVIDIA Fleet
# Intelligence).
BURST_SILENCE = timedelta(minutes=3)


@dataclass(frozen=True)
class Burst:
    """A GPU's burst of errors as the failure page shows it."""

    rows: list[GpuErrorEvent]
    lines: int
    first: datetime
    last: datetime
    xids: list[int]


class GpuErrorEvent(models.Model):
    """One Xid (or counter kind) of one GPU over one burst: `ts` the first line, `last_ts` the
    last, `count` how many lines. A burst ends after BURST_SILENCE without that Xid on that GPU
    (NVIDIA's fleet tooling groups Xids so; evidence.py): a flood of lines stays one row."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_errors")
    gpu = models.ForeignKey(
        Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="errors"
    )
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True, default="")
    ts = models.DateTimeField()
    last_ts = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=GpuErrorKind.choices)
    # 0 for the counter kinds: a real value keeps the natural key below unique-able.
    xid = models.PositiveIntegerField(default=0)
    count = models.PositiveIntegerField(default=1)
    source = models.CharField(max_length=16, blank=True, default="")
    message = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-ts", "id"]
        constraints = [
            # Natural key: a redelivered batch adds nothing. -1 stands for "no GPU index".
            models.UniqueConstraint(
                "node",
                "ts",
                "kind",
                "xid",
                models.functions.Coalesce("gpu_index", -1),
                name="gpuerror_unique",
            )
        ]
        indexes = [models.Index(fields=["node", "ts"], name="gpuerror_node_ts")]

    def __str__(self) -> str:
        what = f"Xid {self.xid}" if self.kind == GpuErrorKind.XID else self.kind
        return f"{self.node.hostname} GPU {self.gpu_index} {what} at {self.ts:%Y-%m-%d %H:%M:%S}"

    def save(self, *args, **kwargs) -> None:
        if self.last_ts is None:  # one line so far: its last line is its first
            self.last_ts = self.ts
        super().save(*args, **kwargs)

    def burst(self) -> Burst:
        """The burst this error opened: its GPU's error rows from it on, while each starts
        less than BURST_SILENCE after the last line before it (NVIDIA's grouping)."""
        rows = GpuErrorEvent.objects.filter(
            node_id=self.node_id, gpu_index=self.gpu_index, ts__gte=self.ts
        ).order_by("ts", "id")
        burst: list[GpuErrorEvent] = []
        last = self.last_ts
        for row in rows.iterator():
            if row.ts > last + BURST_SILENCE:
                break
            burst.append(row)
            last = max(last, row.last_ts)
        xids = sorted({r.xid for r in burst if r.xid})
        return Burst(burst, sum(r.count for r in burst), self.ts, last, xids)


class GpuErrorBatch(models.Model):
    """A node-event batch whose GPU errors were counted: counts add up, so a redelivered batch
    (the broker's at-least-once delivery) must be recognised to add nothing."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    batch_id = models.UUIDField()
    received_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "batch_id"], name="gpuerrorbatch_unique")
        ]

    def __str__(self) -> str:
        return f"batch {self.batch_id} of node {self.node_id}"


class JobLogWindow(models.Model):
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, null=True, blank=True, related_name="log_windows"
    )
    # The scheduler id as the node sent it: kept when the job is not known (yet).
    job_scheduler_id = models.CharField(max_length=128)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="log_windows")
    ts = models.DateTimeField()
    path = models.CharField(max_length=1024)
    first_line_no = models.PositiveIntegerField()
    lines = models.JSONField(default=list)
    trigger = models.CharField(max_length=256, blank=True, default="")

    class Meta:
        ordering = ["ts", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "job_scheduler_id", "path", "first_line_no"],
                name="logwindow_unique",
            )
        ]
        indexes = [models.Index(fields=["job", "ts"], name="logwindow_job_ts")]

    def __str__(self) -> str:
        return f"{self.path}:{self.first_line_no} ({len(self.lines)} lines)"


class FailureEvent(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="failures")
    kind = models.CharField(max_length=16, choices=FailureKind.choices)
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, null=True, blank=True, related_name="failures"
    )
    node = models.ForeignKey(
        Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="failures"
    )
    gpu = models.ForeignKey(
        Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="failures"
    )
    # The GPU error a gpu_error event stands for (the first of its burst).
    gpu_error = models.OneToOneField(
        GpuErrorEvent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="failure",
    )
    occurred_at = models.DateTimeField()
    detected_at = models.DateTimeField()
    diagnosed_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(
        max_length=16, choices=DiagnosisSource.choices, default=DiagnosisSource.PENDING
    )
    cause = models.CharField(max_length=32, choices=CAUSE_CHOICES, blank=True, default="")
    category = models.CharField(max_length=16, choices=CATEGORY_CHOICES, blank=True, default="")
    action = models.CharField(max_length=16, choices=ACTION_CHOICES, blank=True, default="")
    # The engine's default action before the circuit breaker changed it (if it did).
    default_action = models.CharField(max_length=16, choices=ACTION_CHOICES, blank=True, default="")
    breaker = models.CharField(max_length=256, blank=True, default="")
    alias = models.CharField(max_length=64, blank=True, default="")
    detail = models.CharField(max_length=512, blank=True, default="")
    confidence = models.FloatField(null=True, blank=True)
    rule_id = models.CharField(max_length=64, blank=True, default="")
    evidence = models.JSONField(default=list, blank=True)
    blamed_node = models.ForeignKey(
        Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="blamed_failures"
    )
    blamed_gpu = models.ForeignKey(
        Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="blamed_failures"
    )
    blamed_host = models.CharField(max_length=128, blank=True, default="")
    blamed_gpu_label = models.CharField(max_length=64, blank=True, default="")
    gpu_hours_lost = models.FloatField(null=True, blank=True)
    # Suggestion of the LLM hook, shown beside the rules' answer; never acted upon.
    llm = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-occurred_at", "-id"]
        constraints = [
            # One job_failure per run of a job (occurred_at = its end).
            models.UniqueConstraint(
                fields=["job", "occurred_at"],
                condition=models.Q(kind="job_failure"),
                name="failure_unique_job_run",
            ),
        ]
        indexes = [
            models.Index(fields=["cluster", "occurred_at"], name="failure_cluster_at"),
            models.Index(fields=["blamed_node", "cause", "occurred_at"], name="failure_blamed"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.cause or 'pending'} at {self.occurred_at:%Y-%m-%d %H:%M:%S}"


class FailureInputs(models.Model):
    """What the engine read for one failure: its streams of lines, the job's nodes, the
    engine's notes and symptoms (for the failure page's "in context" view).

    A table of its own, not a column of FailureEvent: a crafted job's windows come to tens of
    MB, and every list of failures (the timeline, its CSV, alerts, recovery) reads FailureEvent
    rows, so no list query can load them by accident. Pruned after
    VIGIL_FAILURE_INPUTS_RETENTION_DAYS (the failure and its evidence lines stay)."""

    failure = models.OneToOneField(
        FailureEvent, on_delete=models.CASCADE, primary_key=True, related_name="stored_inputs"
    )
    data = models.JSONField(default=dict, blank=True)
    stored_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"inputs of failure {self.failure_id} ({self.stored_at:%Y-%m-%d %H:%M:%S})"


class ProposedRule(models.Model):
    """A rule the LLM hook suggested; a human accepts it into rules.yaml (never automatic)."""

    class Status(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        ACCEPTED = "accepted", "Accepted"
        REJECTED = "rejected", "Rejected"

    failure = models.ForeignKey(
        FailureEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="proposals"
    )
    cause = models.CharField(max_length=32, choices=CAUSE_CHOICES)
    pattern = models.CharField(max_length=512)
    example = models.TextField(blank=True, default="")
    model = models.CharField(max_length=128, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED)
    created_at = models.DateTimeField(auto_now_add=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.cause}: /{self.pattern}/ ({self.status})"


class CheckpointSeen(models.Model):
    """A value Job.last_checkpoint_at took (recorded for pretraining jobs when it changes):
    the reliability page derives the checkpoint interval a job uses from successive values."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints_seen")
    at = models.DateTimeField()

    class Meta:
        ordering = ["job_id", "at"]
        constraints = [models.UniqueConstraint(fields=["job", "at"], name="checkpointseen_unique")]

    def __str__(self) -> str:
        return f"job {self.job_id} checkpoint at {self.at:%Y-%m-%d %H:%M:%S}"
