"""Reads of the failures app: the failure timeline, one failure in context, and (from
`reliability.py`) reliability and the one test of a replayed or late failure. Other apps read
the failures app through this module."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from webapp.failures import taxonomy
from webapp.failures.models import FailureEvent, FailureInputs, GpuErrorEvent
from webapp.failures.reliability import (
    LIVE_DETECTION_MAX,
    SIZE_BUCKETS,
    CategoryRow,
    CauseRow,
    CheckpointRow,
    EttrRow,
    NodeMtbf,
    OffenderRow,
    RecoveryRow,
    Reliability,
    SizeMtbf,
    counted_failures,
    detected_live,
    reliability,
    reported_late_s,
    running_again_after,
    time_to_detect_live,
    used_checkpoint_interval_s,
    young_daly_s,
)
from webapp.fleet.models import Node
from webapp.jobs.models import JobAllocation

# What other modules read of reliability.py, through this module.
__all__ = [
    "LIVE_DETECTION_MAX",
    "SIZE_BUCKETS",
    "CategoryRow",
    "CauseRow",
    "CheckpointRow",
    "EttrRow",
    "NodeMtbf",
    "OffenderRow",
    "RecoveryRow",
    "Reliability",
    "SizeMtbf",
    "counted_failures",
    "detected_live",
    "reliability",
    "reported_late_s",
    "running_again_after",
    "time_to_detect_live",
    "used_checkpoint_interval_s",
    "young_daly_s",
]

CONTEXT_LINES = 4  # lines shown before and after an evidence line


# --- Timeline --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailureFilter:
    cluster: str = ""
    category: str = ""
    cause: str = ""
    job_type: str = ""
    user: str = ""
    kind: str = ""
    job_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None


def failures_filter(f: FailureFilter) -> QuerySet[FailureEvent]:
    qs = FailureEvent.objects.select_related(
        "cluster", "job", "node", "blamed_node", "blamed_gpu", "gpu"
    )
    if f.cluster:
        qs = qs.filter(cluster__name=f.cluster)
    if f.category:
        qs = qs.filter(category=f.category)
    if f.cause:
        qs = qs.filter(cause=f.cause)
    if f.job_type:
        qs = qs.filter(job__job_type=f.job_type)
    if f.user:
        qs = qs.filter(job__user=f.user)
    if f.kind:
        qs = qs.filter(kind=f.kind)
    if f.job_id:
        qs = qs.filter(job_id=f.job_id)
    if f.since:
        qs = qs.filter(occurred_at__gte=f.since)
    if f.until:
        qs = qs.filter(occurred_at__lt=f.until)
    return qs.order_by("-occurred_at", "-id")


def failure_lane(
    failure: FailureEvent, lane: str, job_hosts: dict[int, list[str]] | None = None
) -> str:
    """The timeline row a failure sits on: its job, or its node (blamed, else where it happened).

    A job failure that names no node sits on its node's lane when the job ran on one node
    (`job_hosts`: job id -> hostnames of its allocations, from `job_hosts_for`), else on its
    job's lane: a failure is never on a lane of unknown nodes."""
    if lane == "job":
        if failure.job is not None:
            return f"job {failure.job.scheduler_id}"
        return "(no job)"
    node = failure.blamed_node or failure.node
    if node is not None:
        return node.hostname
    if failure.blamed_host:
        return failure.blamed_host
    if failure.job is not None:
        hosts = (job_hosts or {}).get(failure.job_id, [])
        return hosts[0] if len(hosts) == 1 else f"job {failure.job.scheduler_id}"
    return f"cluster {failure.cluster.name}"


def job_hosts_for(failures: list[FailureEvent]) -> dict[int, list[str]]:
    """Job id -> hostnames its allocations were on, for the failures that name no node (one
    query)."""
    jobs = {
        f.job_id
        for f in failures
        if f.job_id and not (f.blamed_node_id or f.node_id or f.blamed_host)
    }
    out: dict[int, set[str]] = defaultdict(set)
    rows = JobAllocation.objects.filter(job_id__in=jobs).values_list("job_id", "node__hostname")
    for job_id, hostname in rows:
        out[job_id].add(hostname)
    return {job_id: sorted(hosts) for job_id, hosts in out.items()}


# --- One failure -----------------------------------------------------------------------------


@dataclass
class ContextBlock:
    """Lines around one evidence line, from the stream the engine read."""

    source: str
    lines: list[tuple[int, str, bool]]  # (line number as in the file, text, is evidence)


def failure_inputs(failure: FailureEvent, *, streams: bool = True) -> dict:
    """What the engine read for a failure ({} before its diagnosis). Without `streams`, only
    its notes and symptoms: the lines themselves (up to tens of MB) stay in the database."""
    rows = FailureInputs.objects.filter(failure_id=failure.pk)
    if streams:
        return rows.values_list("data", flat=True).first() or {}
    row = rows.values("data__notes", "data__symptoms").first() or {}
    return {"notes": row.get("data__notes") or [], "symptoms": row.get("data__symptoms") or []}


def evidence_in_context(
    failure: FailureEvent, around: int = CONTEXT_LINES, inputs: dict | None = None
) -> list[ContextBlock]:
    """The lines around each evidence line, from `inputs` (failure_inputs, read if not given)."""
    inputs = failure_inputs(failure) if inputs is None else inputs
    streams = {name: lines for name, lines in inputs.get("streams", [])}
    wanted: dict[str, set[int]] = defaultdict(set)
    for e in failure.evidence or []:
        if e.get("file") in streams and e.get("line"):
            wanted[e["file"]].add(int(e["line"]))
    blocks = []
    for name, hits in wanted.items():
        lines = streams[name]
        source, offset = name, 0
        parts = name.rsplit(":", 1)
        if len(parts) == 2 and parts[1].isdigit():  # host:path:first_line_no (a log window)
            source, offset = parts[0], int(parts[1]) - 1
        shown = sorted(
            {i for h in hits for i in range(max(1, h - around), min(len(lines), h + around) + 1)}
        )
        blocks.append(ContextBlock(source, [(i + offset, lines[i - 1], i in hits) for i in shown]))
    return blocks


def node_xid_history(node: Node | None, days: int = 30, limit: int = 200) -> list[GpuErrorEvent]:
    if node is None:
        return []
    since = timezone.now() - timedelta(days=days)
    return list(
        GpuErrorEvent.objects.filter(node=node, last_ts__gte=since)
        .select_related("gpu", "failure")
        .order_by("-ts", "-id")[:limit]
    )


def xid_meaning(code: int) -> str:
    return taxonomy.xid_info(code).meaning
