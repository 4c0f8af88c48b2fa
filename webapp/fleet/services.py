"""Writes to the inventory: node tokens, self-registration of nodes and GPUs, liveness."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from collectors.schema import GpuInfo
from webapp.core.refusals import AuthError
from webapp.fleet.choices import NodeState
from webapp.fleet.models import Cluster, Gpu, Node

log = logging.getLogger("vigil.fleet")


def token_hash(token: str) -> str:
    # Tokens are 256-bit random strings, so a plain SHA-256 is enough (no password stretching).
    return hashlib.sha256(token.encode()).hexdigest()


def node_token_issue(cluster_name: str, hostname: str) -> str:
    """Create the node if needed and give it a new token (the old one stops working)."""
    # 256 random bits as hex: a token pasted after `--token` or into a shell never starts
    # with "-" (a URL-safe base64 token does one time in 64, and argparse takes it for a flag).
    token = secrets.token_hex(32)
    with transaction.atomic():
        cluster, _ = Cluster.objects.get_or_create(name=cluster_name)
        node, created = Node.objects.get_or_create(
            cluster=cluster, hostname=hostname, defaults={"token_hash": token_hash(token)}
        )
        if not created:
            node.token_hash = token_hash(token)
        node.token_issued_at = timezone.now()
        node.save(update_fields=["token_hash", "token_issued_at"])
    _auth_cache.pop((cluster_name, hostname), None)
    return token


@dataclass(frozen=True)
class AuthenticatedNode:
    id: int
    cluster_id: int
    hostname: str
    token_hash: str


# (cluster, hostname) -> node; re-read whenever a token does not match, so rotation works.
_auth_cache: dict[tuple[str, str], AuthenticatedNode] = {}


def node_authenticate(cluster_name: str, hostname: str, token: str) -> AuthenticatedNode:
    """Return the node if the token is right; raise AuthError otherwise."""
    presented = token_hash(token)
    key = (cluster_name, hostname)
    cached = _auth_cache.get(key)
    if cached is not None and hmac.compare_digest(cached.token_hash, presented):
        return cached
    row = (
        Node.objects.filter(cluster__name=cluster_name, hostname=hostname)
        .values_list("id", "cluster_id", "token_hash")
        .first()
    )
    if row is None:
        raise AuthError("unknown_node", f"no node {hostname!r} in cluster {cluster_name!r}")
    node = AuthenticatedNode(row[0], row[1], hostname, row[2])
    if not hmac.compare_digest(node.token_hash, presented):
        raise AuthError("bad_token", f"wrong token for node {cluster_name}/{hostname}")
    if len(_auth_cache) > 100_000:
        _auth_cache.clear()
    _auth_cache[key] = node
    return node


_GPU_FIELDS = ("node_id", "index", "model", "memory_total_bytes", "pci_bus_id", "serial")

# node id -> (tuple of (index, uuid)) -> {index: gpu id}
_gpu_cache: dict[int, tuple[tuple[tuple[int, str], ...], dict[int, int]]] = {}


def gpus_register(node_id: int, gpus: list[GpuInfo]) -> dict[int, int]:
    """Make sure every listed GPU exists under this node; return {index: gpu id}.

    A GPU is keyed by UUID: one that moved to another node of the cluster or to another slot
    is updated, not duplicated. One registered in another cluster is not moved: a node's token
    speaks for its own cluster only, so AuthError `foreign_gpu` refuses the batch (an operator
    who moved the hardware deletes the old GPU in the admin).
    """
    signature = tuple(sorted((g.index, g.uuid) for g in gpus))
    cached = _gpu_cache.get(node_id)
    if cached is not None and cached[0] == signature:
        return cached[1]
    wanted = {
        info.uuid: {
            "node_id": node_id,
            "index": info.index,
            "model": info.name,
            "memory_total_bytes": info.memory_total_bytes,
            "pci_bus_id": info.pci_bus_id or "",
            "serial": info.serial or "",
        }
        for info in gpus
    }
    # A worker that restarts meets every node again: one read when nothing changed, instead
    # of a locking read and an update per GPU.
    stored = {
        row.pop("uuid"): row
        for row in Gpu.objects.filter(uuid__in=wanted).values(
            "uuid", "id", "node__cluster_id", *_GPU_FIELDS
        )
    }
    _gpus_of_other_clusters_refuse(node_id, stored)
    mapping: dict[int, int] = {}
    with transaction.atomic():
        for uuid, fields in wanted.items():
            row = stored.get(uuid)
            if row is not None and all(row[name] == fields[name] for name in _GPU_FIELDS):
                gpu_id = row["id"]
            else:
                gpu_id = Gpu.objects.update_or_create(uuid=uuid, defaults=fields)[0].id
            mapping[fields["index"]] = gpu_id
    _gpu_cache[node_id] = (signature, mapping)
    return mapping


def _gpus_of_other_clusters_refuse(node_id: int, stored: dict[str, dict]) -> None:
    """Raise AuthError if a stored GPU that would move to this node is of another cluster."""
    moving = {uuid: row for uuid, row in stored.items() if row["node_id"] != node_id}
    if not moving:
        return
    node = Node.objects.select_related("cluster").get(id=node_id)
    foreign = {
        uuid: row for uuid, row in moving.items() if row["node__cluster_id"] != node.cluster_id
    }
    if not foreign:
        return
    owners = dict(
        Node.objects.filter(id__in={row["node_id"] for row in foreign.values()}).values_list(
            "id", "cluster__name"
        )
    )
    uuid, row = min(foreign.items())
    detail = (
        f"gpus: {len(foreign)} GPU(s) registered in another cluster, first {uuid} of cluster "
        f"{owners.get(row['node_id'], '?')!r}; not moved to {node}"
    )
    log.warning("node %s claims GPUs of another cluster: %s", node, detail)
    raise AuthError("foreign_gpu", detail)


def node_scheduler_grant(cluster_name: str, hostname: str, granted: bool = True) -> None:
    """Give the node the scheduler role (job events signed by its token are accepted), or
    take it away. Raises Node.DoesNotExist for an unknown node."""
    updated = Node.objects.filter(cluster__name=cluster_name, hostname=hostname).update(
        may_send_job_events=granted
    )
    if not updated:
        raise Node.DoesNotExist(f"no node {hostname!r} in cluster {cluster_name!r}")


# A node reported: a registered or stale node becomes up, and last_seen never moves backwards,
# so replaying a spool of old batches does not make a live node look stale. Ingest runs this
# inside its own statement (telemetry.services), one per batch; the rules live here once.
NODE_SEEN_UPDATE = f"""
UPDATE fleet_node SET
    last_seen = greatest(last_seen, %(seen_at)s),
    source = %(seen_source)s,
    state = CASE WHEN state IN ('{NodeState.DRAINING}', '{NodeState.DOWN}')
        THEN state ELSE '{NodeState.UP}' END
WHERE id = %(seen_node)s
"""


def node_seen(node_id: int, at: datetime, source: str) -> None:
    """Record that the node reported; a registered or stale node becomes up."""
    with connection.cursor() as cur:
        cur.execute(NODE_SEEN_UPDATE, {"seen_node": node_id, "seen_at": at, "seen_source": source})


def nodes_mark_stale(older_than: datetime) -> int:
    """Mark up nodes not heard from since `older_than` as stale; return how many."""
    return Node.objects.filter(state=NodeState.UP, last_seen__lt=older_than).update(
        state=NodeState.STALE
    )


def caches_clear() -> None:
    """Forget cached tokens and GPU maps (tests, token rotation from another process)."""
    _auth_cache.clear()
    _gpu_cache.clear()
