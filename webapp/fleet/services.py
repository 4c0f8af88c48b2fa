"""Writes to the inventory: node tokens, self-registration of nodes and GPUs, liveness, and
node states as the scheduler reports them."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from collectors.schema import Bearer, Credential, GpuInfo, NodeStateIn, Signature, node_key
from webapp.core.refusals import AuthError
from webapp.core.units import epoch_to_utc
from webapp.fleet.choices import SCHEDULER_OUT_OF_SERVICE, NodeState
from webapp.fleet.models import Cluster, Gpu, Node

log = logging.getLogger("vigil.fleet")


# What PostgreSQL keeps of a node's token, two columns of fleet_node, neither of which signs
# anything without the server's secret (settings.VIGIL_NODE_KEY_SECRET):
# - token_hash: an HMAC of the node's signing key (collectors/schema.py `node_key`, what the
#   collector signs with) under the secret; finds and checks a bearer token;
# - signing_key_sealed: the signing key, XORed with an HMAC of a random salt under the
#   secret (`v1:<salt>:<key ^ pad>`); workers unseal it to check a batch's signature.
# A backup, a replica or a staff user reading the table cannot sign a batch for any node.
_HASH_CONTEXT = b"vigil-node-token\0"
_SEAL_CONTEXT = b"vigil-node-key\0"


def _secret() -> bytes:
    return settings.VIGIL_NODE_KEY_SECRET.encode()


def token_hash(token: str) -> str:
    """What PostgreSQL keeps to find and check a node token (signs nothing)."""
    return key_hash(node_key(token))


def key_hash(key: str) -> str:
    """token_hash of the token whose signing key is `key`."""
    return hmac.new(_secret(), _HASH_CONTEXT + key.encode(), hashlib.sha256).hexdigest()


def key_seal(key: str) -> str:
    """A signing key (64 hex digits) as PostgreSQL keeps it."""
    salt = secrets.token_bytes(16)
    body = bytes(a ^ b for a, b in zip(bytes.fromhex(key), _pad(salt), strict=True))
    return f"v1:{salt.hex()}:{body.hex()}"


def key_unseal(sealed: str) -> str | None:
    """The signing key `key_seal` sealed, or None if `sealed` is not one."""
    version, _, rest = sealed.partition(":")
    salt, _, body = rest.partition(":")
    try:
        salt_b, body_b = bytes.fromhex(salt), bytes.fromhex(body)
    except ValueError:
        return None
    if version != "v1" or len(salt_b) != 16 or len(body_b) != 32:
        return None
    return bytes(a ^ b for a, b in zip(body_b, _pad(salt_b), strict=True)).hex()


def _pad(salt: bytes) -> bytes:
    return hmac.new(_secret(), _SEAL_CONTEXT + salt, hashlib.sha256).digest()


def node_token_issue(cluster_name: str, hostname: str) -> str:
    """Create the node if needed and give it a new token (the old one stops working: at once
    in this process, within VIGIL_AUTH_CACHE_S in every other worker and web process)."""
    # 256 random bits as hex: a token pasted after `--token` or into a shell never starts
    # with "-" (a URL-safe base64 token does one time in 64, and argparse takes it for a flag).
    token = secrets.token_hex(32)
    key = node_key(token)
    stored = {"token_hash": key_hash(key), "signing_key_sealed": key_seal(key)}
    with transaction.atomic():
        cluster, _ = Cluster.objects.get_or_create(name=cluster_name)
        node, created = Node.objects.get_or_create(
            cluster=cluster, hostname=hostname, defaults=stored
        )
        for field, value in stored.items():
            setattr(node, field, value)
        node.token_issued_at = timezone.now()
        node.save(update_fields=[*stored, "token_issued_at"])
    _auth_cache.pop((cluster_name, hostname), None)
    return token


@dataclass(frozen=True)
class AuthenticatedNode:
    id: int
    cluster_id: int
    hostname: str
    token_hash: str
    signing_key: str | None  # unsealed; None if the row holds none
    may_send_job_events: bool = False  # the scheduler role
    read_at: float = 0.0  # time.monotonic() when read from PostgreSQL


# How long a process trusts the key it read for a node (settings.VIGIL_AUTH_CACHE_S, at most
# 60 s): a token rotated by another process (another worker, a web process, `manage.py
# issue_node_token`) is locked out everywhere within it. A worker reads a node's row once per
# period instead of once per batch, and again whenever a credential does not match.

# (cluster, hostname) -> node as last read.
_auth_cache: dict[tuple[str, str], AuthenticatedNode] = {}
# token hash -> (cluster, hostname), for callers that know only the token (the job-events
# API). The node is then checked by node_authenticate, so its cache-lifetime rule holds here
# too: a token rotated by node_token_issue stops working in that process at once.
_bearer_cache: dict[str, tuple[str, str]] = {}


def node_authenticate(
    cluster_name: str, hostname: str, credential: Credential | str | None
) -> AuthenticatedNode:
    """Return the node if `credential` proves the sender is it; raise AuthError otherwise.

    A signature (the broker path) is refused with one reason and one message whether the node
    is unknown or the key wrong, so nobody can probe which node names exist. A bearer token
    (the HTTP job-events API; a plain string is one) keeps its two reasons, `unknown_node`
    and `bad_token`.
    """
    if isinstance(credential, str):
        credential = Bearer(credential)
    if credential is None:
        raise AuthError("bad_signature", f"batch from {cluster_name}/{hostname} is not signed")
    key = (cluster_name, hostname)
    now = time.monotonic()
    node = _auth_cache.get(key)
    fresh = node is None or now - node.read_at > settings.VIGIL_AUTH_CACHE_S
    if fresh:
        node = _node_read(key, now)
    if node is not None and _proves(credential, node):
        return node
    if node is not None and not fresh:
        # Maybe the token was rotated since: the new one must work at once.
        node = _node_read(key, now)
        if node is not None and _proves(credential, node):
            return node
    if isinstance(credential, Signature):
        raise AuthError(
            "bad_signature",
            f"batch from {cluster_name}/{hostname}: no such node has the key it was signed with",
        )
    if node is None:
        raise AuthError("unknown_node", f"no node {hostname!r} in cluster {cluster_name!r}")
    raise AuthError("bad_token", f"wrong token for node {cluster_name}/{hostname}")


def _proves(credential: Credential, node: AuthenticatedNode) -> bool:
    if isinstance(credential, Signature):
        return node.signing_key is not None and credential.valid_for(node.signing_key)
    return hmac.compare_digest(node.token_hash, token_hash(credential.token))


def _node_read(key: tuple[str, str], now: float) -> AuthenticatedNode | None:
    """The node's row as it is now (cached), or None (and nothing cached) if there is none."""
    cluster_name, hostname = key
    row = (
        Node.objects.filter(cluster__name=cluster_name, hostname=hostname)
        .values_list("id", "cluster_id", "token_hash", "signing_key_sealed", "may_send_job_events")
        .first()
    )
    if row is None:
        _auth_cache.pop(key, None)
        return None
    node = AuthenticatedNode(row[0], row[1], hostname, row[2], key_unseal(row[3]), row[4], now)
    if len(_auth_cache) > 100_000:
        _auth_cache.clear()
    _auth_cache[key] = node
    return node


_GPU_FIELDS = (
    "node_id", "index", "model", "memory_total_bytes", "pci_bus_id", "serial", "minor_number",
)  # fmt: skip

# node id -> (tuple of (index, uuid, minor number)) -> {index: gpu id}
_gpu_cache: dict[int, tuple[tuple[tuple[int, str, int | None], ...], dict[int, int]]] = {}


def gpus_register(node_id: int, gpus: list[GpuInfo]) -> dict[int, int]:
    """Make sure every listed GPU exists under this node; return {index: gpu id}.

    A GPU is keyed by UUID: one that moved to another slot, or to another node of the cluster,
    is updated, not duplicated. A node's token speaks for its own hardware only, so AuthError
    `foreign_gpu` refuses the batch, and nothing moves, when a GPU is registered in another
    cluster (an operator who moved the hardware deletes the old GPU in the admin), or to
    another node of the cluster that is live (reported within VIGIL_STALE_AFTER_S), unless an
    operator released it in the admin (Gpu.released: the hardware was moved by hand). A GPU
    pulled from a node stops being reported with it, so it moves on its own once that node
    has been quiet for VIGIL_STALE_AFTER_S.
    """
    signature = tuple(sorted((g.index, g.uuid, g.minor_number) for g in gpus))
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
            "minor_number": info.minor_number,
        }
        for info in gpus
    }
    # A worker that restarts meets every node again: one read when nothing changed, instead
    # of a locking read and an update per GPU.
    stored = {
        row.pop("uuid"): row
        for row in Gpu.objects.filter(uuid__in=wanted).values(
            "uuid", "id", "node__cluster_id", "released", *_GPU_FIELDS
        )
    }
    _gpus_of_others_refuse(node_id, stored)
    mapping: dict[int, int] = {}
    with transaction.atomic():
        for uuid, fields in wanted.items():
            row = stored.get(uuid)
            if row is not None and all(row[name] == fields[name] for name in _GPU_FIELDS):
                gpu_id = row["id"]
            else:
                moved = {"released": False} if row is not None and row["released"] else {}
                gpu_id = Gpu.objects.update_or_create(uuid=uuid, defaults=fields | moved)[0].id
                if row is not None and row["node_id"] != node_id:
                    _gpu_cache.pop(row["node_id"], None)  # its old node no longer maps it
            mapping[fields["index"]] = gpu_id
    _gpu_cache[node_id] = (signature, mapping)
    return mapping


def _gpus_of_others_refuse(node_id: int, stored: dict[str, dict]) -> None:
    """Raise AuthError if a stored GPU that would move to this node is of another cluster, or
    of a live node of its cluster without an operator's release."""
    moving = {uuid: row for uuid, row in stored.items() if row["node_id"] != node_id}
    if not moving:
        return
    node = Node.objects.select_related("cluster").get(id=node_id)
    foreign = {
        uuid: row for uuid, row in moving.items() if row["node__cluster_id"] != node.cluster_id
    }
    if not foreign:
        _gpus_of_live_nodes_refuse(node, moving)
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


def _gpus_of_live_nodes_refuse(node: Node, moving: dict[str, dict]) -> None:
    held = {uuid: row for uuid, row in moving.items() if not row["released"]}
    if not held:
        return
    since = timezone.now() - timedelta(seconds=settings.VIGIL_STALE_AFTER_S)
    live = dict(
        Node.objects.filter(
            id__in={row["node_id"] for row in held.values()}, last_contact_at__gte=since
        ).values_list("id", "hostname")
    )
    taken = {uuid: row for uuid, row in held.items() if row["node_id"] in live}
    if not taken:
        return
    uuid, row = min(taken.items())
    detail = (
        f"gpus: {len(taken)} GPU(s) registered to another node that is reporting, first {uuid} "
        f"of live node {live[row['node_id']]}; not moved to {node.hostname} (an operator who "
        "moved the hardware releases the GPU in the admin)"
    )
    log.warning("node %s claims GPUs of a live node: %s", node, detail)
    raise AuthError("foreign_gpu", detail)


def node_scheduler_grant(cluster_name: str, hostname: str, granted: bool = True) -> None:
    """Give the node the scheduler role (job events signed by its token are accepted), or
    take it away. Raises Node.DoesNotExist for an unknown node."""
    updated = Node.objects.filter(cluster__name=cluster_name, hostname=hostname).update(
        may_send_job_events=granted
    )
    if not updated:
        raise Node.DoesNotExist(f"no node {hostname!r} in cluster {cluster_name!r}")
    _auth_cache.pop((cluster_name, hostname), None)


_OUT_OF_SERVICE_SQL = ", ".join(f"'{s}'" for s in SCHEDULER_OUT_OF_SERVICE)

# A node reported: a registered or stale node becomes up, and last_seen never moves backwards,
# so replaying a spool of old batches does not make a live node look stale. A node the
# scheduler took out of service (draining, drained, down) stays so: only the scheduler says
# when it is back (node_states_apply). Ingest runs this inside its own statement
# (telemetry.services), one per batch; the rules live here once.
NODE_SEEN_UPDATE = f"""
UPDATE fleet_node SET
    last_seen = greatest(last_seen, %(seen_at)s),
    last_contact_at = now(),
    source = %(seen_source)s,
    state = CASE WHEN state IN ({_OUT_OF_SERVICE_SQL}) THEN state ELSE '{NodeState.UP}' END
WHERE id = %(seen_node)s
"""


def node_seen(node_id: int, at: datetime, source: str) -> None:
    """Record that the node reported; a registered or stale node becomes up."""
    with connection.cursor() as cur:
        cur.execute(NODE_SEEN_UPDATE, {"seen_node": node_id, "seen_at": at, "seen_source": source})


# One statement for a whole batch of scheduler node states (a watcher's first poll names every
# node of the cluster). A state older than the one stored (a batch replayed from a spool, or
# delivered late) changes nothing. A node reported up leaves the scheduler's states for what
# telemetry says: up if it was ever seen (stale follows if it is silent), else registered; a
# node that was not out of service keeps its telemetry state.
_NODE_STATES_UPDATE = f"""
UPDATE fleet_node AS n SET
    state = CASE
        WHEN s.state <> '{NodeState.UP}' THEN s.state
        WHEN n.state NOT IN ({_OUT_OF_SERVICE_SQL}) THEN n.state
        WHEN n.last_seen IS NULL THEN '{NodeState.REGISTERED}'
        ELSE '{NodeState.UP}' END,
    state_reason = s.reason,
    state_since = s.since
FROM unnest(%(hostnames)s::text[], %(states)s::text[], %(reasons)s::text[],
            %(sinces)s::timestamptz[]) AS s(hostname, state, reason, since)
WHERE n.cluster_id = %(cluster)s AND n.hostname = s.hostname
    AND (n.state_since IS NULL OR n.state_since <= s.since)
"""


def node_states_apply(cluster_id: int, states: list[NodeStateIn]) -> int:
    """Set the scheduler's state, reason and since-time on the named nodes of this cluster
    (only this cluster's: the sender speaks for its own). Names the fleet does not know (a
    scheduler node without a collector) are ignored; returns how many there were."""
    if not states:
        return 0
    hostnames = [s.node for s in states]
    known = set(
        Node.objects.filter(cluster_id=cluster_id, hostname__in=hostnames).values_list(
            "hostname", flat=True
        )
    )
    with connection.cursor() as cur:
        cur.execute(
            _NODE_STATES_UPDATE,
            {
                "cluster": cluster_id,
                "hostnames": hostnames,
                "states": [s.state for s in states],
                "reasons": [s.reason for s in states],
                "sinces": [epoch_to_utc(s.since) for s in states],
            },
        )
    return len(set(hostnames) - known)


def nodes_mark_stale(older_than: datetime) -> int:
    """Mark up nodes not heard from since `older_than` as stale; return how many."""
    return Node.objects.filter(state=NodeState.UP, last_seen__lt=older_than).update(
        state=NodeState.STALE
    )


def caches_clear() -> None:
    """Forget cached tokens and GPU maps (tests, token rotation from another process)."""
    _auth_cache.clear()
    _bearer_cache.clear()
    _gpu_cache.clear()


def node_authenticate_bearer(token: str) -> tuple[str, str]:
    """(cluster, hostname) of the node whose token this is, found by the token's hash alone;
    AuthError if none. One message for every failure: a caller learns nothing about which
    nodes exist."""
    presented = token_hash(token)
    name = _bearer_cache.get(presented)
    if name is None:
        name = (
            Node.objects.filter(token_hash=presented)
            .values_list("cluster__name", "hostname")
            .first()
        )
    if name is not None:
        try:
            node_authenticate(name[0], name[1], token)
        except AuthError:
            _bearer_cache.pop(presented, None)
        else:
            if len(_bearer_cache) > 100_000:
                _bearer_cache.clear()
            _bearer_cache[presented] = name
            return name
    raise AuthError("bad_token", "unknown or wrong node token")
