"""Writes of the failures app: failure events opened and diagnosed, proposed rules reviewed.

- `job_failure_open(job)`: a job that ended failed gets its `job_failure` FailureEvent (called
  from the Job post_save signal, see signals.py); diagnosis runs in a Celery task after commit.
- `failure_diagnose(pk)`: feeds the deterministic engine (diagnosis/) what evidence.py reads
  for the failure (the job's log windows, the kernel Xid events of its nodes, the scheduler's
  end line), kept apart in FailureInputs; computes the GPU-hours lost; sends
  `failure_diagnosed` (the recovery app plans from it, applying the circuit breaker); asks the
  optional LLM hook when no rule explains the failure.

The other writes live with their concern: node-event ingest in node_events.py, stragglers
in stragglers.py. Follow-up tasks are sent by name (dispatch.py), so no write imports tasks.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.failures import diagnosis as engine
from webapp.failures import taxonomy
from webapp.failures.dispatch import failure_diagnose_later, failure_diagnosed
from webapp.failures.evidence import failure_evidence
from webapp.failures.models import (
    DiagnosisSource,
    FailureEvent,
    FailureInputs,
    FailureKind,
    JobLogWindow,
    ProposedRule,
)
from webapp.failures.node_events import pci_bdf
from webapp.fleet.models import Node
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job, JobAllocation

log = logging.getLogger("vigil.failures")

# Job end states that get a diagnosis (the paper counts them as failed).
FAILED_STATES = frozenset(
    {JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY}
)


def job_failure_open(job: Job) -> FailureEvent | None:
    """The job_failure event of a job that ended in a failed state (created once per run)."""
    if job.state not in FAILED_STATES or job.end_at is None:
        return None
    failure, created = FailureEvent.objects.get_or_create(
        kind=FailureKind.JOB_FAILURE,
        job=job,
        occurred_at=job.end_at,
        defaults={"cluster_id": job.cluster_id, "detected_at": timezone.now()},
    )
    if created:
        failure_diagnose_later(failure.pk)
    return failure


def job_log_windows_attach(job: Job) -> int:
    """Attach the log windows that arrived before the job was known; how many. Only windows
    sent by a node the job held GPUs on count: a node speaks for its own jobs only."""
    nodes = JobAllocation.objects.filter(job=job).values("node_id")
    return JobLogWindow.objects.filter(
        job__isnull=True, job_scheduler_id=job.scheduler_id, node_id__in=nodes
    ).update(job=job)


def gpu_hours_lost(job: Job) -> float | None:
    """GPUs x (end - max(last checkpoint, start)), in GPU-hours (rework since the checkpoint)."""
    if job.end_at is None or job.start_at is None:
        return None
    gpus = job.gpus_requested or JobAllocation.objects.filter(job=job).count()
    since = max(job.start_at, job.last_checkpoint_at or job.start_at)
    seconds = max(0.0, (job.end_at - since).total_seconds())
    return round(gpus * seconds / 3600, 4)


def _blame(failure: FailureEvent, host: str | None, gpu_label: str | None) -> None:
    failure.blamed_host = host or ""
    failure.blamed_gpu_label = gpu_label or ""
    failure.blamed_node = None
    failure.blamed_gpu = None
    if not host:
        return
    node = Node.objects.filter(cluster_id=failure.cluster_id, hostname=host).first()
    failure.blamed_node = node
    if node is None or not gpu_label:
        return
    gpus = list(node.gpus.all())
    bdf = pci_bdf(gpu_label) if ":" in gpu_label else ""
    failure.blamed_gpu = next(
        (g for g in gpus if bdf and pci_bdf(g.pci_bus_id) == bdf),
        next((g for g in gpus if gpu_label.isdigit() and g.index == int(gpu_label)), None),
    )
    if failure.blamed_gpu is None and failure.gpu_error_id and failure.gpu_error.gpu_id:
        failure.blamed_gpu = failure.gpu_error.gpu


def failure_diagnose(pk: int) -> FailureEvent | None:
    """Diagnose one failure event (again, if new evidence came); None if it is gone."""
    with transaction.atomic():
        failure = (
            FailureEvent.objects.select_for_update(of=("self",))
            .select_related("job", "node", "gpu_error")
            .filter(pk=pk)
            .first()
        )
        if failure is None:
            return None
        if failure.kind == FailureKind.PERFORMANCE:
            return failure  # decided from metrics by stragglers_detect, not from logs
        if failure.job is not None:
            job_log_windows_attach(failure.job)
        inputs = failure_evidence(failure)
        result = engine.diagnose_streams(inputs.as_streams(), job_nodes=inputs.job_nodes or None)
        failure.cause = result.cause
        failure.category = result.category
        failure.alias = result.acme_alias or ""
        failure.detail = result.detail[:512]
        failure.confidence = result.confidence
        failure.rule_id = result.rule_id or ""
        failure.evidence = [
            {"file": e.file, "line": e.line, "text": e.text, "rule_id": e.rule_id}
            for e in result.evidence
        ]
        stored = {
            "streams": [(s.name, s.lines) for s in inputs.streams],
            "job_nodes": inputs.job_nodes,
            "notes": list(result.notes),
            "symptoms": list(result.symptoms),
        }
        FailureInputs.objects.update_or_create(
            failure=failure, defaults={"data": stored, "stored_at": timezone.now()}
        )
        _blame(failure, result.blamed_node, result.blamed_gpu)
        failure.default_action = result.action
        # The recovery app's policy (circuit breaker, restart limit) decides the final action
        # when it plans, through failure_action_record; until then it is the engine's.
        failure.action, failure.breaker = result.action, ""
        failure.source = DiagnosisSource.RULES
        failure.llm = {}
        if failure.job is not None:
            failure.gpu_hours_lost = gpu_hours_lost(failure.job)
        failure.diagnosed_at = timezone.now()
        failure.save()
        failure_diagnosed.send(sender=FailureEvent, failure=failure)
    if result.cause == "unknown":
        _llm_consult(failure, stored["streams"])
    return failure


def _llm_consult(failure: FailureEvent, streams: list[tuple[str, list[str]]]) -> None:
    """Ask the optional LLM hook about a failure no rule explains (off by default)."""
    from webapp.failures import llm

    if not settings.VIGIL_LLM_URL:
        return
    config = llm.LlmConfig(
        url=settings.VIGIL_LLM_URL,
        model=settings.VIGIL_LLM_MODEL,
        api_key=settings.VIGIL_LLM_API_KEY,
    )
    lines = [e["text"] for e in failure.evidence] or [
        line for _, lines in streams for line in lines[-20:]
    ]
    try:
        answer = llm.classify(config, lines)
    except llm.LlmError as exc:
        log.warning("LLM hook failed for failure %s: %s", failure.pk, exc)
        FailureEvent.objects.filter(pk=failure.pk).update(llm={"error": str(exc)[:500]})
        return
    with transaction.atomic():
        failure.llm = answer.as_dict()
        if answer.cause != "unknown":
            cause = taxonomy.CAUSES[answer.cause]
            failure.cause = cause.name
            failure.category = cause.category.value
            failure.alias = taxonomy.acme_alias(cause.name) or ""
            failure.confidence = answer.confidence
            failure.source = DiagnosisSource.LLM
            # A suggestion never triggers cordon or restart (docs/failure-signatures.md s10).
            failure.action = taxonomy.Action.NOTIFY.value
        failure.save(
            update_fields=["llm", "cause", "category", "alias", "confidence", "source", "action"]
        )
        if answer.suggested_regex and answer.cause != "unknown":
            ProposedRule.objects.get_or_create(
                cause=answer.cause,
                pattern=answer.suggested_regex[:512],
                defaults={
                    "failure": failure,
                    "example": "\n".join(lines[:5])[:4000],
                    "model": config.model,
                },
            )


def failure_action_record(failure: FailureEvent, action: str, why: str = "") -> None:
    """The action recovery chose for a failure, and why it differs from the engine's (the
    circuit breaker, the restart limit); shown on the failure pages."""
    failure.action, failure.breaker = action, why[:256]
    FailureEvent.objects.filter(pk=failure.pk).update(action=action, breaker=why[:256])


# Days what the engine read for a failure is kept (the page's "in context" view); the failure,
# its diagnosis and its evidence lines stay. VIGIL_FAILURE_INPUTS_RETENTION_DAYS.
INPUTS_RETENTION_DAYS = 90
PRUNE_CHUNK = 1000  # rows deleted per statement: each transaction stays short


def retention_days(name: str, default: int) -> int:
    """A retention setting in days (a positive integer), read with its default."""
    days = getattr(settings, name, default)
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"{name} must be a whole number of days of at least 1, got {days!r}")
    return days


def failure_inputs_prune(now: datetime | None = None) -> int:
    """Delete what the engine read for failures diagnosed longer ago than the retention, a
    chunk at a time; how many were deleted."""
    days = retention_days("VIGIL_FAILURE_INPUTS_RETENTION_DAYS", INPUTS_RETENTION_DAYS)
    before = (now or timezone.now()) - timedelta(days=days)
    old = FailureInputs.objects.filter(stored_at__lt=before)
    deleted = 0
    while ids := list(old.values_list("pk", flat=True)[:PRUNE_CHUNK]):
        deleted += FailureInputs.objects.filter(pk__in=ids).delete()[0]
    return deleted


def proposed_rules_review(ids: Iterable[int], status: str, reviewer: str) -> int:
    """Mark proposed rules accepted or rejected (the admin's actions)."""
    return ProposedRule.objects.filter(id__in=list(ids)).update(
        status=status, reviewed_at=timezone.now(), reviewed_by=reviewer[:150]
    )
