"""Reads of the inventory: the nodes of a cluster with their GPU counts and how many are busy."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

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


def cluster_nodes(cluster: Cluster) -> list[NodeRow]:
    """Every node of the cluster with its GPU count and busy GPUs now (two queries)."""
    nodes = (
        Node.objects.filter(cluster=cluster).annotate(gpu_count=Count("gpus")).order_by("hostname")
    )
    busy = Counter(g.node_id for g in gpus_latest(cluster) if g.status == BUSY)
    return [
        NodeRow(
            id=n.id,
            hostname=n.hostname,
            state=n.state,
            state_label=n.get_state_display(),
            last_seen=n.last_seen,
            gpus=n.gpu_count,
            busy=busy[n.id],
        )
        for n in nodes
    ]
