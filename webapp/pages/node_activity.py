"""What a node page says beside its samples: which job holds each GPU now, and the
node's recent GPU errors, failures and recovery actions.

Reads of the jobs, failures and recovery apps' tables through their models and selectors (an
app may use another's selectors); each list is one query, bounded by a limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.failures.selectors import node_xid_history, xid_meaning
from webapp.fleet.models import Node
from webapp.jobs.models import Job, JobAllocation
from webapp.recovery.models import RecoveryAction

RECENT_DAYS = 30  # the window of the node's errors, failures and actions
RECENT_MAX = 20  # rows of each list (the failure timeline and recovery pages have them all)


def jobs_holding_gpus(node: Node, now: datetime) -> dict[int, Job]:
    """GPU index -> the job that holds it now (an allocation started and not ended)."""
    allocations = (
        JobAllocation.objects.filter(node=node, start__lte=now)
        .filter(Q(end__isnull=True) | Q(end__gt=now))
        .select_related("job")
        .order_by("start")
    )
    # The newest allocation of an index wins (a requeued job's old one may still be open).
    return {a.gpu_index: a.job for a in allocations}


@dataclass(frozen=True)
class GpuErrorRow:
    event: GpuErrorEvent
    meaning: str


def gpu_errors_recent(node: Node, *, days: int = RECENT_DAYS) -> list[GpuErrorRow]:
    return [
        GpuErrorRow(e, xid_meaning(e.xid) if e.xid else e.get_kind_display())
        for e in node_xid_history(node, days=days, limit=RECENT_MAX)
    ]


def failures_recent(node: Node, now: datetime, *, days: int = RECENT_DAYS) -> list[FailureEvent]:
    """Failures that happened on the node or blame it, newest first."""
    return list(
        FailureEvent.objects.filter(Q(node=node) | Q(blamed_node=node))
        .filter(occurred_at__gte=now - timedelta(days=days))
        .select_related("job")
        .order_by("-occurred_at", "-id")[:RECENT_MAX]
    )


def recovery_actions_recent(
    node: Node, now: datetime, *, days: int = RECENT_DAYS
) -> list[RecoveryAction]:
    """Recovery actions on the node (drains, health checks, returns to service), newest first."""
    return list(
        RecoveryAction.objects.filter(node=node, created_at__gte=now - timedelta(days=days))
        .select_related("job")
        .order_by("-created_at", "-id")[:RECENT_MAX]
    )
