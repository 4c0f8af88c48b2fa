"""Writes of the failures app: node events in, failure events diagnosed, circuit breaker.

- `node_events_ingest(raw)`: one NodeEventBatch (GPU errors, job log windows) from a node,
  stored idempotently (natural keys, INSERT ... ON CONFLICT DO NOTHING). A critical GPU error
  (a page-worthy Xid) opens a `gpu_error` FailureEvent; new evidence for a job that already
  failed gets that failure diagnosed again.
- `job_failure_open(job)`: a job that ended failed gets its `job_failure` FailureEvent (called
  from the Job post_save signal, see signals.py); diagnosis runs in a Celery task after commit.
- `failure_diagnose(pk)`: feeds the deterministic engine (diagnosis.py) the job's log windows,
  the kernel Xid events of its nodes (rendered as kernel log lines) and the scheduler's end
  line; applies the circuit breaker; computes the GPU-hours lost; asks the optional LLM hook
  when no rule explains the failure.
"""

from __future__ import annotations

import io
import json
import logging
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import BinaryIO

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from collectors.schema import NodeEventBatch, parse_node_events
from webapp.failures import diagnosis as engine
from webapp.failures import taxonomy
from webapp.failures.models import (
    DiagnosisSource,
    FailureEvent,
    FailureKind,
    GpuErrorEvent,
    GpuErrorKind,
    JobLogWindow,
    ProposedRule,
)
from webapp.fleet.choices import NodeState
from webapp.fleet.models import Gpu, Node
from webapp.fleet.services import node_authenticate
from webapp.jobs.choices import JobState
from webapp.jobs.models import Job, JobAllocation

log = logging.getLogger("vigil.failures")

# Job end states that get a diagnosis (the brief of issue 4; the paper counts them as failed).
FAILED_STATES = frozenset(
    {JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY}
)
# Counter kinds stand for the Xid the driver would log for them (telemetry.md section 5).
KIND_XID = {
    GpuErrorKind.ECC_DBE: 48,
    GpuErrorKind.REMAP_FAILURE: 64,
    GpuErrorKind.GPU_LOST: 79,
    GpuErrorKind.NVLINK: 74,
    GpuErrorKind.REMAP: 63,
    GpuErrorKind.ECC_SBE: 92,
}
# A node's Xids form one burst until 3 min of silence (telemetry.md section 5, NVIDIA Fleet
# Intelligence): one gpu_error failure per burst.
BURST_SILENCE = timedelta(minutes=3)
# Circuit breaker (failure-taxonomy.md): same cause twice within 24 h; at most
# settings.VIGIL_MAX_AUTO_RESTARTS (default 3) automatic restarts of one job in a row.
BREAKER_WINDOW = timedelta(hours=24)
RESTARTING = (taxonomy.Action.RESTART.value, taxonomy.Action.RETRY.value)
AUTO_RESTART_ACTIONS = (
    taxonomy.Action.RESTART.value,
    taxonomy.Action.RETRY.value,
    taxonomy.Action.CORDON_RESTART.value,
    taxonomy.Action.LOCATE_RESTART.value,
    taxonomy.Action.ROLLBACK_SKIP.value,
)
# The diagnosis window of failure-taxonomy.md step 1, widened by the engine for long NCCL
# timeouts: kernel events this far before the end are handed to it (it keeps what fits).
EVIDENCE_BEFORE = timedelta(minutes=45)
EVIDENCE_AFTER = timedelta(seconds=engine.WINDOW_AFTER_S)


# --- Ingest ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeEventsResult:
    batch_id: str
    gpu_events: int
    gpu_events_stored: int
    log_windows: int
    log_windows_stored: int
    failures_opened: int


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def node_events_ingest(raw: str | bytes) -> NodeEventsResult:
    """Validate, authenticate and store one node-event batch; raises BatchError / AuthError
    to refuse it whole (nothing stored). A redelivered batch stores nothing new."""
    batch = parse_node_events(raw, max_future_s=settings.VIGIL_MAX_FUTURE_SKEW_S)
    node = node_authenticate(batch.cluster, batch.node, batch.credential)
    with transaction.atomic():
        new_errors = _gpu_errors_store(node.id, batch)
        new_windows = _log_windows_store(node.id, node.cluster_id, batch)
        opened = _gpu_failures_open(node.cluster_id, new_errors)
        _rediagnose(node.id, new_errors, new_windows)
    return NodeEventsResult(
        str(batch.batch_id),
        len(batch.gpu_events),
        len(new_errors),
        len(batch.log_windows),
        len(new_windows),
        opened,
    )


def _gpu_errors_store(node_id: int, batch: NodeEventBatch) -> list[GpuErrorEvent]:
    if not batch.gpu_events:
        return []
    gpus = list(
        Gpu.objects.filter(node_id=node_id).values_list("id", "index", "uuid", "pci_bus_id")
    )
    by_uuid = {g[2]: g for g in gpus}
    by_pci = {_bdf(g[3]): g for g in gpus if g[3]}
    by_index: dict[int, tuple] = {}
    for g in sorted(gpus, key=lambda g: g[0]):  # the most recently registered holds the slot
        by_index[g[1]] = g
    rows = []
    for e in batch.gpu_events:
        gpu = (
            (by_uuid.get(e.gpu_uuid) if e.gpu_uuid else None)
            or (by_pci.get(_bdf(e.pci_bus_id)) if e.pci_bus_id else None)
            or (by_index.get(e.gpu_index) if e.gpu_index is not None else None)
        )
        index = e.gpu_index if e.gpu_index is not None else (gpu[1] if gpu else None)
        pci = e.pci_bus_id or (gpu[3] if gpu else "") or ""
        xid = e.xid if e.xid is not None else KIND_XID.get(e.kind, 0)
        rows.append(
            (
                node_id,
                gpu[0] if gpu else None,
                index,
                pci,
                _dt(e.ts),
                e.kind,
                xid,
                e.count,
                e.source,
                e.message,
            )
        )
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO failures_gpuerrorevent
                (node_id, gpu_id, gpu_index, pci_bus_id, ts, kind, xid, count, source, message)
            SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::int[], %s::text[],
                                 %s::timestamptz[], %s::text[], %s::int[], %s::int[],
                                 %s::text[], %s::text[])
            ON CONFLICT DO NOTHING
            RETURNING id
            """,
            [list(column) for column in zip(*rows, strict=True)],  # one array per column
        )
        ids = [r[0] for r in cur.fetchall()]
    return list(GpuErrorEvent.objects.filter(id__in=ids).order_by("ts", "id"))


def _bdf(pci: str | None) -> str:
    """PCI bus id in one spelling: lowercase, 4-digit domain ("00000000:3B:00.0" -> "0000:3b:00.0")."""
    if not pci:
        return ""
    p = pci.strip().lower()
    parts = p.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    elif len(parts) == 2:
        parts.insert(0, "0000")
    return ":".join(parts)


def _log_windows_store(node_id: int, cluster_id: int, batch: NodeEventBatch) -> list[int]:
    """Store the windows; return the ids of the jobs that got new ones (or -1 if unknown)."""
    if not batch.log_windows:
        return []
    job_ids = dict(
        Job.objects.filter(
            cluster_id=cluster_id, scheduler_id__in={w.job_id for w in batch.log_windows}
        ).values_list("scheduler_id", "id")
    )
    rows = [
        (
            job_ids.get(w.job_id),
            w.job_id,
            node_id,
            _dt(w.ts),
            w.path,
            w.first_line_no,
            json.dumps(w.lines),
            w.trigger,
        )
        for w in batch.log_windows
    ]
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO failures_joblogwindow
                (job_id, job_scheduler_id, node_id, ts, path, first_line_no, lines, trigger)
            SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::timestamptz[],
                                 %s::text[], %s::int[], %s::jsonb[], %s::text[])
            ON CONFLICT DO NOTHING
            RETURNING coalesce(job_id, -1)
            """,
            [list(column) for column in zip(*rows, strict=True)],  # one array per column
        )
        return [r[0] for r in cur.fetchall()]


def _critical(e: GpuErrorEvent) -> bool:
    """A page-worthy Xid (the `page` column of the Xid table)."""
    return e.xid is not None and taxonomy.xid_info(e.xid).page


def _gpu_failures_open(cluster_id: int, errors: Sequence[GpuErrorEvent]) -> int:
    """One gpu_error FailureEvent per burst of critical errors on a node."""
    opened = 0
    for e in errors:
        if not _critical(e):
            continue
        burst = FailureEvent.objects.filter(
            kind=FailureKind.GPU_ERROR,
            node_id=e.node_id,
            occurred_at__gte=e.ts - BURST_SILENCE,
            occurred_at__lte=e.ts + BURST_SILENCE,
        ).exists()
        if burst:
            continue
        failure = FailureEvent.objects.create(
            cluster_id=cluster_id,
            kind=FailureKind.GPU_ERROR,
            node_id=e.node_id,
            gpu_id=e.gpu_id,
            gpu_error=e,
            occurred_at=e.ts,
            detected_at=timezone.now(),
        )
        _diagnose_after_commit(failure.pk)
        opened += 1
    return opened


def _rediagnose(node_id: int, errors: Sequence[GpuErrorEvent], job_ids: Iterable[int]) -> None:
    """New evidence for a failure already on record (it arrived after the job ended)."""
    jobs = {j for j in job_ids if j > 0}
    if errors:
        lo = min(e.ts for e in errors) - EVIDENCE_AFTER
        hi = max(e.ts for e in errors) + EVIDENCE_BEFORE
        jobs |= set(
            FailureEvent.objects.filter(
                kind=FailureKind.JOB_FAILURE,
                occurred_at__gte=lo,
                occurred_at__lte=hi,
                job__allocations__node_id=node_id,
            ).values_list("job_id", flat=True)
        )
    for pk in FailureEvent.objects.filter(
        kind=FailureKind.JOB_FAILURE, job_id__in=jobs
    ).values_list("pk", flat=True):
        _diagnose_after_commit(pk)


def _diagnose_after_commit(pk: int) -> None:
    from webapp.failures.tasks import diagnose

    # robust: a broker hiccup must not fail the ingest that committed the failure; the
    # failure stays "pending" and is diagnosed again when new evidence comes.
    transaction.on_commit(lambda: diagnose.delay(pk), robust=True)


# --- Job failures ----------------------------------------------------------------------------


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
        _diagnose_after_commit(failure.pk)
    return failure


# --- Diagnosis -------------------------------------------------------------------------------


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def xid_line(e: GpuErrorEvent, hostname: str) -> str:
    """A GPU error event as the kernel log line the driver prints for it (what rules read)."""
    info = taxonomy.xid_info(e.xid)
    pci = e.pci_bus_id or (f"GPU{e.gpu_index}" if e.gpu_index is not None else "unknown")
    meaning = e.message.strip() or info.meaning
    count = f" [x{e.count}]" if e.count > 1 else ""
    return f"{_iso(e.ts)} {hostname} kernel: NVRM: Xid (PCI:{pci}): {e.xid}, {meaning}{count}"


def scheduler_end_line(job: Job, hostname: str | None) -> str:
    """The line Slurm writes at the end of a job in this state (failure-signatures.md s7).

    `hostname`: the node the line is about; None when it is not known (a multi-node job's
    NODE_FAIL with no node down), so that the engine blames no node rather than a wrong one.
    """
    at = _iso(job.end_at)
    stamp = job.end_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if hostname is None:
        head = f"{at} slurmctld: error: *** JOB {job.scheduler_id}"
        hostname = "unknown"
    else:
        head = f"{at} {hostname} slurmstepd: error: *** JOB {job.scheduler_id} ON {hostname}"
    if job.state == JobState.NODE_FAIL:
        return f"{head} CANCELLED AT {stamp} DUE TO NODE FAILURE ***"
    if job.state == JobState.TIMEOUT:
        return f"{head} CANCELLED AT {stamp} DUE TO TIME LIMIT ***"
    if job.state == JobState.OUT_OF_MEMORY:
        return (
            f"{at} {hostname} slurmstepd: error: Detected 1 oom_kill event(s) in StepId="
            f"{job.scheduler_id}.0. Some of your processes may have been killed by the cgroup "
            "out-of-memory handler."
        )
    code = job.exit_code if job.exit_code is not None else 1
    return f"{at} {hostname} srun: error: {hostname}: task 0: Exited with exit code {code}"


@dataclass(frozen=True)
class EngineInput:
    """What the engine reads for one failure: named text streams and the job's nodes."""

    streams: list[tuple[str, list[str]]]
    job_nodes: list[str]

    def as_streams(self) -> list[tuple[str, BinaryIO]]:
        return [
            (name, io.BytesIO("\n".join(lines).encode() + b"\n")) for name, lines in self.streams
        ]


def _job_input(job: Job) -> EngineInput:
    nodes = dict(
        Node.objects.filter(
            id__in=JobAllocation.objects.filter(job=job).values("node_id")
        ).values_list("id", "hostname")
    )
    # Windows that arrived before the job was known are attached now.
    JobLogWindow.objects.filter(
        job__isnull=True, job_scheduler_id=job.scheduler_id, node__cluster_id=job.cluster_id
    ).update(job=job)
    streams: list[tuple[str, list[str]]] = []
    start = job.start_at or job.end_at - EVIDENCE_BEFORE
    windows = JobLogWindow.objects.filter(job=job, ts__lte=job.end_at + EVIDENCE_AFTER)
    for w in windows.select_related("node").order_by("node__hostname", "path", "first_line_no"):
        nodes.setdefault(w.node_id, w.node.hostname)
        name = f"{w.node.hostname}:{w.path}:{w.first_line_no}"
        streams.append((name, list(w.lines)))
    # An Xid shortly before the start still explains a job that died at once (the GPU fell
    # off the bus as it was handed over): the taxonomy's 15-minute window reaches back that far.
    lo = max(start - timedelta(seconds=engine.WINDOW_BEFORE_S), job.end_at - EVIDENCE_BEFORE)
    errors = GpuErrorEvent.objects.filter(
        node_id__in=list(nodes), ts__gte=lo, ts__lte=job.end_at + EVIDENCE_AFTER
    ).order_by("ts", "id")
    kernel = [xid_line(e, nodes[e.node_id]) for e in errors if e.xid]
    streams.append(("scheduler", [scheduler_end_line(job, _end_line_host(job, nodes))]))
    if kernel:
        streams.append(("kernel", kernel))
    return EngineInput(streams, sorted(nodes.values()))


def _end_line_host(job: Job, nodes: dict[int, str]) -> str | None:
    """The node a NODE_FAIL is about: the job's only node, else its only node that is down or
    stale in the fleet; None if that is not clear. Other states: the first node (the line
    only dates the end)."""
    if not nodes:
        return None
    if job.state != JobState.NODE_FAIL or len(nodes) == 1:
        return sorted(nodes.values())[0]
    down = list(
        Node.objects.filter(
            id__in=list(nodes), state__in=[NodeState.DOWN, NodeState.STALE]
        ).values_list("hostname", flat=True)
    )
    return down[0] if len(down) == 1 else None


def _gpu_error_input(failure: FailureEvent) -> EngineInput:
    e = failure.gpu_error
    host = failure.node.hostname if failure.node else "unknown"
    burst = GpuErrorEvent.objects.filter(
        node_id=failure.node_id, ts__gte=e.ts, ts__lte=e.ts + BURST_SILENCE
    ).order_by("ts", "id")
    return EngineInput([("kernel", [xid_line(x, host) for x in burst if x.xid])], [host])


def engine_input(failure: FailureEvent) -> EngineInput:
    if failure.kind == FailureKind.JOB_FAILURE and failure.job is not None:
        return _job_input(failure.job)
    if failure.kind == FailureKind.GPU_ERROR and failure.gpu_error is not None:
        return _gpu_error_input(failure)
    return EngineInput([], [])


def breaker_apply(
    action: str,
    node: str | None,
    same_cause_nodes: Sequence[str | None],
    restarts_in_a_row: int = 0,
    max_restarts: int = 3,
) -> tuple[str, str]:
    """The circuit breaker of failure-taxonomy.md over plain data: (action, why or "").

    `same_cause_nodes`: blamed nodes of the earlier failures with this cause within 24 h.
    """
    if action in RESTARTING and node and node in same_cause_nodes:
        return (
            taxonomy.Action.CORDON_RESTART.value,
            f"same cause on {node} twice within 24 h: cordon the node",
        )
    others = sorted({n for n in same_cause_nodes if n and n != node})
    if action in RESTARTING and others:
        return (
            taxonomy.Action.NOTIFY.value,
            "same cause on other nodes within 24 h (" + ", ".join(others[:5]) + "): "
            "points to software, no automatic restart",
        )
    if action in AUTO_RESTART_ACTIONS and restarts_in_a_row >= max_restarts:
        return (
            taxonomy.Action.NOTIFY.value,
            f"already restarted automatically {restarts_in_a_row} times in a row",
        )
    return action, ""


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
    bdf = _bdf(gpu_label) if ":" in gpu_label else ""
    failure.blamed_gpu = next(
        (g for g in gpus if bdf and _bdf(g.pci_bus_id) == bdf),
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
        inputs = engine_input(failure)
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
        failure.inputs = {
            "streams": inputs.streams,
            "job_nodes": inputs.job_nodes,
            "notes": list(result.notes),
            "symptoms": list(result.symptoms),
        }
        _blame(failure, result.blamed_node, result.blamed_gpu)
        failure.default_action = result.action
        failure.action, failure.breaker = _breaker(failure, result.action)
        failure.source = DiagnosisSource.RULES
        failure.llm = {}
        if failure.job is not None:
            failure.gpu_hours_lost = gpu_hours_lost(failure.job)
        failure.diagnosed_at = timezone.now()
        failure.save()
    if result.cause == "unknown":
        _llm_consult(failure)
    return failure


def _breaker(failure: FailureEvent, action: str) -> tuple[str, str]:
    since = failure.occurred_at - BREAKER_WINDOW
    earlier = FailureEvent.objects.filter(
        cause=failure.cause,
        cluster_id=failure.cluster_id,
        occurred_at__gte=since,
        occurred_at__lt=failure.occurred_at,
    ).exclude(pk=failure.pk)
    # A job failure and the GPU error that caused it are one incident, not a repeat.
    earlier = earlier.filter(kind=failure.kind)
    nodes = list(earlier.values_list("blamed_host", flat=True))
    in_a_row = 0
    if failure.job_id:
        for act in (
            FailureEvent.objects.filter(job_id=failure.job_id, occurred_at__lt=failure.occurred_at)
            .order_by("-occurred_at")
            .values_list("action", flat=True)
        ):
            if act not in AUTO_RESTART_ACTIONS:
                break
            in_a_row += 1
    return breaker_apply(
        action, failure.blamed_host or None, nodes, in_a_row, settings.VIGIL_MAX_AUTO_RESTARTS
    )


def _llm_consult(failure: FailureEvent) -> None:
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
        line for _, lines in failure.inputs.get("streams", []) for line in lines[-20:]
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
            # A suggestion never triggers cordon or restart (failure-signatures.md s10).
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


def proposed_rules_review(ids: Iterable[int], status: str, reviewer: str) -> int:
    """Mark proposed rules accepted or rejected (the admin's actions)."""
    return ProposedRule.objects.filter(id__in=list(ids)).update(
        status=status, reviewed_at=timezone.now(), reviewed_by=reviewer[:150]
    )


# --- Stragglers ------------------------------------------------------------------------------

# A GPU that runs at under 0.8x its job's median for settings.VIGIL_STRAGGLER_MINUTES
# (default 10) straight minutes is a straggler: failure-signatures.md section 8 calls a rank a
# straggler when its iteration time stays above 1.1-1.25x the baseline; 1 / 1.25 = 0.8 of the
# peers' activity, power or clock. It is a performance event for operations, not a failure
# label (no cause, not counted in MTBF).
STRAGGLER_RATIO = 0.8
STRAGGLER_METRICS = ("sm_active", "power_w", "sm_clock_mhz")


def stragglers_find(
    series: dict[int, dict[datetime, dict[str, float | None]]],
    minutes: list[datetime],
    ratio: float = STRAGGLER_RATIO,
) -> dict[int, dict[str, list[tuple[float, float]]]]:
    """Plain data in, stragglers out: {gpu: {minute: {metric: mean}}} of one job's GPUs over
    `minutes` -> {gpu: {metric: [(value, median of the others), ...] per minute}} for each GPU
    below `ratio` x the others' median in every minute, for some metric."""
    out: dict[int, dict[str, list[tuple[float, float]]]] = {}
    if len(series) < 2:
        return out
    for metric in STRAGGLER_METRICS:
        for gpu in series:
            trail: list[tuple[float, float]] = []
            for minute in minutes:
                mine = series[gpu].get(minute, {}).get(metric)
                others = [
                    v
                    for g, per in series.items()
                    if g != gpu and (v := per.get(minute, {}).get(metric)) is not None
                ]
                if mine is None or not others:
                    break
                median = statistics.median(others)
                if median <= 0 or mine >= ratio * median:
                    break
                trail.append((mine, median))
            else:
                if trail:
                    out.setdefault(gpu, {})[metric] = trail
    return out


def stragglers_detect(now: datetime | None = None) -> int:
    """Open a `performance` FailureEvent for each straggling GPU of a running job (once per
    job run and GPU); how many were opened. Reads the 1-minute rollup."""
    from webapp.telemetry.models import GpuRollup1m

    n_minutes = settings.VIGIL_STRAGGLER_MINUTES
    end = (now or timezone.now()).replace(second=0, microsecond=0)
    minutes = [end - timedelta(minutes=k) for k in range(n_minutes, 0, -1)]
    allocations = list(
        JobAllocation.objects.filter(
            end__isnull=True,
            gpu__isnull=False,
            start__lte=minutes[0],
            job__state=JobState.RUNNING,
        ).values_list("job_id", "gpu_id", "node_id", "job__cluster_id", "job__start_at")
    )
    by_job: dict[int, list[tuple]] = {}
    for row in allocations:
        by_job.setdefault(row[0], []).append(row)
    by_job = {j: rows for j, rows in by_job.items() if len(rows) >= 2}
    if not by_job:
        return 0
    gpu_ids = [r[1] for rows in by_job.values() for r in rows]
    fields = [f"{m}_{s}" for m in STRAGGLER_METRICS for s in ("sum", "cnt")]
    data: dict[int, dict[datetime, dict[str, float | None]]] = {}
    for row in GpuRollup1m.objects.filter(
        gpu_id__in=gpu_ids, minute__gte=minutes[0], minute__lte=minutes[-1]
    ).values("gpu_id", "minute", *fields):
        data.setdefault(row["gpu_id"], {})[row["minute"]] = {
            m: (row[f"{m}_sum"] / row[f"{m}_cnt"]) if row[f"{m}_cnt"] else None
            for m in STRAGGLER_METRICS
        }
    opened = 0
    for job_id, rows in by_job.items():
        series = {r[1]: data.get(r[1], {}) for r in rows}
        found = stragglers_find(series, minutes)
        for gpu_id, metrics in found.items():
            row = next(r for r in rows if r[1] == gpu_id)
            if FailureEvent.objects.filter(
                kind=FailureKind.PERFORMANCE, job_id=job_id, gpu_id=gpu_id, occurred_at__gte=row[4]
            ).exists():
                continue
            gpu = Gpu.objects.select_related("node").get(pk=gpu_id)
            evidence = [
                {
                    "file": "telemetry",
                    "line": i + 1,
                    "text": f"{minutes[i]:%H:%M} {metric} {value:.3g} vs job median {median:.3g}",
                    "rule_id": f"straggler-{metric}",
                }
                for metric, trail in metrics.items()
                for i, (value, median) in enumerate(trail)
            ]
            first_metric, trail = next(iter(metrics.items()))
            share = statistics.fmean(v / m for v, m in trail)
            now_ts = timezone.now()
            FailureEvent.objects.create(
                cluster_id=row[3],
                kind=FailureKind.PERFORMANCE,
                job_id=job_id,
                node_id=row[2],
                gpu_id=gpu_id,
                occurred_at=minutes[0],
                detected_at=now_ts,
                diagnosed_at=now_ts,
                source=DiagnosisSource.RULES,
                rule_id="straggler",
                detail=(
                    f"straggler: GPU {gpu.index} on {gpu.node.hostname} at {share:.0%} of the job's "
                    f"median {' / '.join(metrics)} for {n_minutes} min"
                ),
                evidence=evidence[: engine.EVIDENCE_LINES * 2],
                blamed_node_id=row[2],
                blamed_gpu_id=gpu_id,
                blamed_host=gpu.node.hostname,
                blamed_gpu_label=str(gpu.index),
                confidence=0.6,
                inputs={"metrics": {m: t for m, t in metrics.items()}, "first": first_metric},
            )
            opened += 1
    return opened
