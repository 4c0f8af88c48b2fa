"""Reads of the inventory: the nodes of a cluster with their GPU counts and how many are busy."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from webapp.fleet.choices import NodeState
from webapp.fleet.models import Cluster, Node
from webapp.telemetry.selectors import BUSY, gpus_latest


@dataclass(frozen=True)
class NodeRow:
    id: int
    hostname: str
    state: str
    state_label: str
    last_seen: datetime | None
    gpus: int
    busy: int


def node_state_now(state: str, last_seen: datetime | None, now: datetime) -> str:
    """The state to show: an up node silent for VIGIL_STALE_AFTER_S is stale already.

    The stored state turns stale only when the periodic `mark_stale_nodes` task runs (every
    30 s, and not at all without a beat); the page must not call a silent node up meanwhile.
    """
    stale_before = now - timedelta(seconds=settings.VIGIL_STALE_AFTER_S)
    if state == NodeState.UP and (last_seen is None or last_seen < stale_before):
        return NodeState.STALE
    return state


def cluster_nodes(cluster: Cluster) -> list[NodeRow]:
    """Every node of the cluster with its GPU count and busy GPUs now (two queries)."""
    now = timezone.now()
    nodes = (
        Node.objects.filter(cluster=cluster).annotate(gpu_count=Count("gpus")).order_by("hostname")
    )
    busy = Counter(g.node_id for g in gpus_latest(cluster) if g.status == BUSY)
    rows = []
    for n in nodes:
        state = node_state_now(n.state, n.last_seen, now)
        rows.append(
            NodeRow(
                id=n.id,
                hostname=n.hostname,
                state=state,
                state_label=NodeState(state).label,
                last_seen=n.last_seen,
                gpus=n.gpu_count,
                busy=busy[n.id],
            )
        )
    return rows
