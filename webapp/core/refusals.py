"""The ingest refusal log: every path that takes a batch records what it refused here.

A refusal names a machine-readable `reason` (the label of the rejection counter in
`/metrics`) and a `detail` a person can act on. `BatchError` (collectors/schema.py) is the
refusal of what a batch says; `AuthError` is the refusal of who sent it.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from collectors.schema import batch_body
from webapp.core.models import RejectedBatch, RejectedBatchPruned

log = logging.getLogger("vigil.ingest")


class Refusal(Protocol):
    reason: str
    detail: str


class AuthError(Exception):
    """A batch or request that names an unknown node or carries the wrong credential."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def batch_reject(raw: str | bytes, error: Refusal) -> RejectedBatch:
    """Record a refused batch (reason, detail, who claimed to send it) and log it."""
    claimed: dict = {}
    try:
        parsed = json.loads(batch_body(raw))
        if isinstance(parsed, dict):
            claimed = parsed
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        pass

    def text(key: str) -> str:
        value = claimed.get(key)
        return str(value)[:128].replace("\x00", "") if isinstance(value, str | int) else ""

    rejected = RejectedBatch.objects.create(
        reason=error.reason,
        detail=error.detail[:2000].replace("\x00", ""),
        cluster=text("cluster"),
        node=text("node"),
        # An unreadable outbox entry says nothing, but was stored under its batch id.
        batch_id=(text("batch_id") or getattr(raw, "batch_id", ""))[:64],
        size_bytes=len(raw),
    )
    log.warning(
        "rejected batch %s from %s/%s: %s: %s",
        rejected.batch_id or "?",
        rejected.cluster or "?",
        rejected.node or "?",
        error.reason,
        error.detail,
    )
    return rejected


PRUNE_CHUNK = 10_000  # refusals deleted per statement, so one run never holds a long lock

# Delete one chunk of old refusals and add them, by reason, to the pruned counts, in one
# statement: the rejection counter (rows kept + pruned) stays the same at every instant. The
# refusal log's table keeps the name it had under telemetry (RejectedBatch's Meta).
_LOG = RejectedBatch._meta.db_table
_PRUNE_SQL = f"""
WITH gone AS (
    DELETE FROM {_LOG}
    WHERE id IN (SELECT id FROM {_LOG} WHERE received_at < %s ORDER BY id LIMIT %s)
    RETURNING reason
), counted AS (
    INSERT INTO core_rejectedbatchpruned (reason, count)
    SELECT reason, count(*) FROM gone GROUP BY reason
    ON CONFLICT (reason) DO UPDATE
        SET count = core_rejectedbatchpruned.count + excluded.count
    RETURNING count
)
SELECT count(*) FROM gone
"""


def refusals_prune(now: datetime | None = None) -> int:
    """Delete refusals older than VIGIL_REFUSALS_RETENTION_DAYS, a chunk at a time, keeping
    their count by reason; how many were deleted."""
    before = (now or timezone.now()) - timedelta(days=settings.VIGIL_REFUSALS_RETENTION_DAYS)
    deleted = 0
    while True:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(_PRUNE_SQL, [before, PRUNE_CHUNK])
            n = cur.fetchone()[0]
        deleted += n
        if n < PRUNE_CHUNK:
            return deleted


def refusals_by_reason() -> dict[str, int]:
    """Every refusal ever recorded, by reason: the rows kept plus those pruned."""
    counts = {
        row["reason"]: row["n"]
        for row in RejectedBatch.objects.values("reason").annotate(n=Count("id")).order_by()
    }
    for reason, pruned in RejectedBatchPruned.objects.values_list("reason", "count"):
        counts[reason] = counts.get(reason, 0) + pruned
    return counts
