"""Node events in: one NodeEventBatch (GPU errors, job log windows) from a node agent.

Stored idempotently: a redelivered batch stores nothing new (log windows by natural key, GPU
errors by the batch's id, since they are counted into one row per GPU, Xid and burst). The first
critical GPU error (a page-worthy Xid) of a GPU's burst opens one `gpu_error` FailureEvent;
new evidence for a job that already failed gets that failure diagnosed again (after commit).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from collectors.schema import NodeEventBatch, parse_node_events
from webapp.core.units import epoch_to_utc
from webapp.failures import taxonomy
from webapp.failures.dispatch import failure_diagnose_later
from webapp.failures.evidence import EVIDENCE_AFTER, EVIDENCE_BEFORE
from webapp.failures.models import (
    BURST_SILENCE,
    FailureEvent,
    FailureKind,
    GpuErrorBatch,
    GpuErrorEvent,
    GpuErrorKind,
)
from webapp.fleet.models import Gpu
from webapp.fleet.services import node_authenticate
from webapp.jobs.models import Job, JobAllocation

# Counter kinds stand for the Xid the driver would log for them (docs/telemetry.md section 5).
KIND_XID = {
    GpuErrorKind.ECC_DBE: 48,
    GpuErrorKind.REMAP_FAILURE: 64,
    GpuErrorKind.GPU_LOST: 79,
    GpuErrorKind.NVLINK: 74,
    GpuErrorKind.REMAP: 63,
    GpuErrorKind.ECC_SBE: 92,
}

BATCH_IDS_KEPT = timedelta(days=7)

log = logging.getLogger("vigil.failures")


@dataclass(frozen=True)
class NodeEventsResult:
    batch_id: str
    gpu_events: int
    gpu_events_stored: int
    log_windows: int
    log_windows_stored: int
    failures_opened: int


def node_events_ingest(raw: str | bytes) -> NodeEventsResult:
    """Validate, authenticate and store one node-event batch; raises BatchError / AuthError
    to refuse it whole (nothing stored). A redelivered batch stores nothing new."""
    batch = parse_node_events(raw, max_future_s=settings.VIGIL_MAX_FUTURE_SKEW_S)
    node = node_authenticate(batch.cluster, batch.node, batch.credential)
    with transaction.atomic():
        counted, new_errors = _gpu_errors_store(node.id, batch)
        new_windows = _log_windows_store(node.id, node.cluster_id, batch)
        opened = _gpu_failures_open(node.cluster_id, new_errors)
        _rediagnose(node.id, new_errors, new_windows)
    return NodeEventsResult(
        str(batch.batch_id),
        len(batch.gpu_events),
        counted,
        len(batch.log_windows),
        len(new_windows),
        opened,
    )


def _gpu_errors_store(node_id: int, batch: NodeEventBatch) -> tuple[int, list[GpuErrorEvent]]:
    """Count the batch's GPU errors into their bursts: one row per (GPU, kind, Xid, burst),
    its count and first and last time. Returns how many lines were counted and the rows they
    touched (new bursts first opened here, and bursts that grew). A batch counted before (a
    redelivery) counts nothing."""
    if not batch.gpu_events:
        return 0, []
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO failures_gpuerrorbatch (node_id, batch_id, received_at) "
            "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING id",
            [node_id, batch.batch_id, timezone.now()],
        )
        if cur.fetchone() is None:
            return 0, []
    # A redelivery comes within the broker's visibility timeout (hours); a week of batch ids is
    # ample, and the table stays as small as a week of one node's batches with GPU errors.
    GpuErrorBatch.objects.filter(
        node_id=node_id, received_at__lt=timezone.now() - BATCH_IDS_KEPT
    ).delete()
    gpus = list(
        Gpu.objects.filter(node_id=node_id).values_list("id", "index", "uuid", "pci_bus_id")
    )
    by_uuid = {g[2]: g for g in gpus}
    by_pci = {pci_bdf(g[3]): g for g in gpus if g[3]}
    by_index: dict[int, tuple] = {}
    for g in sorted(gpus, key=lambda g: g[0]):  # the most recently registered holds the slot
        by_index[g[1]] = g
    lines: dict[tuple, list[tuple]] = {}
    for e in batch.gpu_events:
        gpu = (
            (by_uuid.get(e.gpu_uuid) if e.gpu_uuid else None)
            or (by_pci.get(pci_bdf(e.pci_bus_id)) if e.pci_bus_id else None)
            or (by_index.get(e.gpu_index) if e.gpu_index is not None else None)
        )
        index = e.gpu_index if e.gpu_index is not None else (gpu[1] if gpu else None)
        pci = e.pci_bus_id or (gpu[3] if gpu else "") or ""
        xid = e.xid if e.xid is not None else KIND_XID.get(e.kind, 0)
        key = (index, e.kind, xid)
        lines.setdefault(key, []).append(
            (epoch_to_utc(e.ts), e.count, gpu[0] if gpu else None, pci, e.source, e.message)
        )
    touched: dict[int, GpuErrorEvent] = {}
    for (index, kind, xid), found in lines.items():
        found.sort(key=lambda x: x[0])
        # The bursts of this GPU and Xid that the batch's lines may extend (locked: two
        # workers counting into one row would lose a count).
        open_rows = list(
            GpuErrorEvent.objects.select_for_update()
            .filter(
                node_id=node_id,
                gpu_index=index,
                kind=kind,
                xid=xid,
                last_ts__gte=found[0][0] - BURST_SILENCE,
                ts__lte=found[-1][0] + BURST_SILENCE,
            )
            .order_by("ts")
        )
        for ts, count, gpu_id, pci, source, message in found:
            row = next(
                (r for r in open_rows if r.ts - BURST_SILENCE <= ts <= r.last_ts + BURST_SILENCE),
                None,
            )
            if row is None:
                row = GpuErrorEvent(
                    node_id=node_id,
                    gpu_id=gpu_id,
                    gpu_index=index,
                    pci_bus_id=pci,
                    ts=ts,
                    last_ts=ts,
                    kind=kind,
                    xid=xid,
                    count=0,
                    source=source,
                    message=message,
                )
                open_rows.append(row)
            row.ts, row.last_ts = min(row.ts, ts), max(row.last_ts, ts)
            row.count += count
            if row.pk is None:
                row.save()
            touched[row.pk] = row
    for row in touched.values():
        GpuErrorEvent.objects.filter(pk=row.pk).update(
            ts=row.ts, last_ts=row.last_ts, count=row.count
        )
    counted = sum(c for found in lines.values() for _, c, *_ in found)
    return counted, sorted(touched.values(), key=lambda r: (r.ts, r.pk))


def pci_bdf(pci: str | None) -> str:
    """PCI bus id in one spelling: lowercase, 4-digit domain, with its function.

    "00000000:3B:00.0" -> "0000:3b:00.0"; the kernel's Xid line leaves the function out
    ("PCI:0000:3b:00"), and a GPU is function 0 of its device: "0000:3b:00" -> "0000:3b:00.0".
    """
    if not pci:
        return ""
    p = pci.strip().lower()
    parts = p.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    elif len(parts) == 2:
        parts.insert(0, "0000")
    if "." not in parts[-1]:
        parts[-1] += ".0"
    return ":".join(parts)


def _log_windows_store(node_id: int, cluster_id: int, batch: NodeEventBatch) -> list[int]:
    """Store the windows; return the ids of the jobs that got new ones (or -1 if unknown)."""
    if not batch.log_windows:
        return []
    named = {w.job_id for w in batch.log_windows}
    job_ids = dict(
        Job.objects.filter(cluster_id=cluster_id, scheduler_id__in=named).values_list(
            "scheduler_id", "id"
        )
    )
    # A node speaks only for the jobs it runs: a window of a job whose GPUs are all elsewhere
    # is dropped, and only a job that held GPUs here gets the window attached now. A job with
    # no allocation yet (its start not stored yet) keeps its windows unattached, and
    # `job_log_windows_attach` checks the node when the job is diagnosed.
    held_on: dict[str, set[int]] = {}
    for scheduler_id, held_node in JobAllocation.objects.filter(
        job__cluster_id=cluster_id, job__scheduler_id__in=named
    ).values_list("job__scheduler_id", "node_id"):
        held_on.setdefault(scheduler_id, set()).add(held_node)
    here = {job for job, nodes in held_on.items() if node_id in nodes}
    foreign = held_on.keys() - here
    if foreign:
        log.warning(
            "node %s/%s sent log windows of jobs it does not run: %s (dropped)",
            batch.cluster,
            batch.node,
            ", ".join(sorted(foreign)[:10]),
        )
    rows = [
        (
            job_ids.get(w.job_id) if w.job_id in here else None,
            w.job_id,
            node_id,
            epoch_to_utc(w.ts),
            w.path,
            w.first_line_no,
            json.dumps(w.lines),
            w.trigger,
        )
        for w in batch.log_windows
        if w.job_id not in foreign
    ]
    if not rows:
        return []
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
    """A page-worthy Xid (the `page` column of the Xid table, once its line is read: Xid 154
    naming a reset or reboot pages). A rise of the corrected ECC counter is not the driver's
    Xid 92 (a high corrected-error rate): recorded, never paged."""
    if e.xid is None or e.kind == GpuErrorKind.ECC_SBE:
        return False
    return taxonomy.xid_resolved(e.xid, e.message).page


def _gpu_failures_open(cluster_id: int, errors: Sequence[GpuErrorEvent]) -> int:
    """One gpu_error FailureEvent per incident: a GPU's burst of Xids with a critical one,
    its root the first critical Xid. Keyed by GPU, not node: each GPU's recovery (its reset)
    is its own, and two GPUs failing together on a node are two incidents (recovery drains the
    node once)."""
    opened = 0
    for e in errors:
        if not _critical(e) or _in_open_incident(e):
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
        failure_diagnose_later(failure.pk)
        opened += 1
    return opened


def _in_open_incident(e: GpuErrorEvent) -> bool:
    """Whether the error continues an incident of its GPU already on record: the GPU's errors
    since that incident's root kept coming with less than BURST_SILENCE between them."""
    incident = (
        FailureEvent.objects.filter(
            kind=FailureKind.GPU_ERROR,
            node_id=e.node_id,
            gpu_error__gpu_index=e.gpu_index,
            occurred_at__lte=e.ts + BURST_SILENCE,
        )
        .order_by("-occurred_at")
        .first()
    )
    if incident is None:
        return False
    if incident.gpu_error_id == e.pk:
        return True
    last = (
        GpuErrorEvent.objects.filter(
            node_id=e.node_id,
            gpu_index=e.gpu_index,
            ts__gte=incident.occurred_at - BURST_SILENCE,
            ts__lte=e.ts,
        )
        .exclude(pk=e.pk)
        .aggregate(last=Max("last_ts"))["last"]
    )
    return last is not None and e.ts <= last + BURST_SILENCE


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
        failure_diagnose_later(pk)
