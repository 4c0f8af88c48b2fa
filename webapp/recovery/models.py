"""Recovery records: each cluster's policy, one plan per failure (or return to service), and
the actions of a plan, each claimed, run and audited on its own row.

An action's `commands` are built as data when it is planned (the exact argv lists), so a dry
run, an approval and the audit all show what will run or ran. `steps` records each command as
it is run: written *before* the command starts and again when it ends, so a worker killed in
between leaves a started-but-unfinished step that the next worker verifies against the
scheduler instead of running it a second time.
"""

from __future__ import annotations

from django.db import models

from webapp.failures.models import FailureEvent
from webapp.fleet.models import Cluster, Node
from webapp.jobs.models import Job
from webapp.recovery.choices import (
    ActionKind,
    ActionStatus,
    Audience,
    ExecutorKind,
    Mode,
    PlanKind,
)


class RecoveryPolicy(models.Model):
    """How one cluster recovers. A cluster without a row runs in dry_run (fail closed)."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="recovery")
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.DRY_RUN)
    executor = models.CharField(
        max_length=16, choices=ExecutorKind.choices, default=ExecutorKind.SLURM
    )
    # Automatic restarts of one job in a row before Vigil only notifies (docs/failure-taxonomy.md:
    # 3, configurable); None takes settings.VIGIL_MAX_AUTO_RESTARTS.
    max_auto_restarts = models.PositiveSmallIntegerField(null=True, blank=True)
    # A rollback (rollback_skip: requeue from an earlier checkpoint, skipping data) changes
    # what a job trains on: it waits for an operator's approval unless this is set.
    rollback_auto = models.BooleanField(default=False)
    # Guard rails: past either, a drain waits for an operator's approval and operators are
    # told. At most this many drains by Vigil an hour (Meta's gcm-sentinel caps its agent at
    # 3), and at most this share of the cluster's nodes out of service at once (at least one
    # node): a fault on more nodes at once points to a shared cause (a software rollout, the
    # fabric, power) that draining cannot fix.
    max_drains_per_hour = models.PositiveSmallIntegerField(default=3)
    max_out_percent = models.PositiveSmallIntegerField(default=10)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        verbose_name_plural = "recovery policies"

    def __str__(self) -> str:
        return f"{self.cluster.name}: {self.mode} via {self.executor}"


class RecoveryPlan(models.Model):
    """What was decided for one failure (or one return to service), and why."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="recovery_plans")
    kind = models.CharField(max_length=20, choices=PlanKind.choices, default=PlanKind.FAILURE)
    failure = models.OneToOneField(
        FailureEvent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="recovery_plan",
    )
    node = models.ForeignKey(
        Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="recovery_plans"
    )
    job = models.ForeignKey(
        Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="recovery_plans"
    )
    mode = models.CharField(max_length=16, choices=Mode.choices)
    executor = models.CharField(max_length=16, choices=ExecutorKind.choices)
    cause = models.CharField(max_length=32, blank=True, default="")
    # The diagnosis's default action, and the one the policy chose (breaker applied).
    proposed_action = models.CharField(max_length=16, blank=True, default="")
    action = models.CharField(max_length=16, blank=True, default="")
    rule = models.CharField(max_length=64, blank=True, default="")
    reason = models.CharField(max_length=512, blank=True, default="")
    requested_by = models.CharField(max_length=150, blank=True, default="vigil")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["cluster", "created_at"], name="recoveryplan_cluster_at")]

    def __str__(self) -> str:
        what = f"failure {self.failure_id}" if self.failure_id else self.kind
        return f"plan {self.pk} for {what}: {self.action or 'nothing'} ({self.mode})"


class RecoveryAction(models.Model):
    plan = models.ForeignKey(RecoveryPlan, on_delete=models.CASCADE, related_name="actions")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="recovery_actions")
    # Order within the plan: an action runs once every earlier one has succeeded.
    seq = models.PositiveSmallIntegerField(default=1)
    kind = models.CharField(max_length=16, choices=ActionKind.choices)
    status = models.CharField(max_length=20, choices=ActionStatus.choices)
    mode = models.CharField(max_length=16, choices=Mode.choices)
    executor = models.CharField(max_length=16, choices=ExecutorKind.choices)
    rule = models.CharField(max_length=64, blank=True, default="")
    reason = models.CharField(max_length=512, blank=True, default="")
    node = models.ForeignKey(
        Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="recovery_actions"
    )
    host = models.CharField(max_length=128, blank=True, default="")
    job = models.ForeignKey(
        Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="recovery_actions"
    )
    job_scheduler_id = models.CharField(max_length=128, blank=True, default="")
    audience = models.CharField(max_length=16, choices=Audience.choices, blank=True, default="")
    # Kind-specific inputs (the health check's nodes, the rollback's checkpoint and steps).
    params = models.JSONField(default=dict, blank=True)
    commands = models.JSONField(default=list, blank=True)
    steps = models.JSONField(default=list, blank=True)
    result = models.CharField(max_length=512, blank=True, default="")
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveSmallIntegerField(default=0)
    claimed_by = models.CharField(max_length=128, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    approved_by = models.CharField(max_length=150, blank=True, default="")
    approved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The earliest it may run (a job failure's settle time, a retry's backoff): the task and
    # the sweep both wait for it.
    not_before = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # For notify actions: when the alerts app delivered it (null: not yet).
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["plan_id", "seq", "id"]
        indexes = [
            models.Index(fields=["cluster", "created_at"], name="recoveryaction_cluster_at"),
            models.Index(fields=["status"], name="recoveryaction_status"),
        ]

    def __str__(self) -> str:
        target = self.host or self.job_scheduler_id or self.audience
        return f"{self.kind} {target} ({self.status})"
