"""The ingest refusal log: every path that takes a batch records what it refused here.

A refusal names a machine-readable `reason` (the label of the rejection counter in
`/metrics`) and a `detail` a person can act on. `BatchError` (collectors/schema.py) is the
refusal of what a batch says; `AuthError` is the refusal of who sent it.
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

from collectors.schema import batch_body
from webapp.core.models import RejectedBatch

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
