"""Fleet writes that guard a trust boundary: GPUs stay in their cluster; the scheduler role."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from collectors.schema import GpuInfo
from tests.helpers import make_batch
from webapp.core.models import RejectedBatch
from webapp.core.refusals import AuthError, batch_reject
from webapp.fleet.models import Gpu, Node
from webapp.fleet.services import (
    gpus_register,
    node_authenticate,
    node_scheduler_grant,
    node_seen,
    node_token_issue,
)
from webapp.telemetry.models import GpuSample
from webapp.telemetry.services import samples_ingest


def _node(cluster: str, hostname: str) -> int:
    return node_authenticate(cluster, hostname, node_token_issue(cluster, hostname)).id


def test_a_gpu_of_another_cluster_is_refused_and_not_moved(db, caplog):
    home = _node("c1", "node-a")
    gpus_register(home, [GpuInfo(index=0, uuid="GPU-shared-00", name="H100")])
    token = node_token_issue("c2", "node-x")
    raw = json.dumps(make_batch("c2", "node-x", token, gpus=2, uuid_prefix="GPU-shared"))

    with caplog.at_level(logging.WARNING, logger="vigil.fleet"), pytest.raises(AuthError) as exc:
        samples_ingest(raw)
    batch_reject(raw, exc.value)

    assert exc.value.reason == "foreign_gpu"
    assert "GPU-shared-00 of cluster 'c1'" in exc.value.detail
    assert "claims GPUs of another cluster" in caplog.text
    gpu = Gpu.objects.get(uuid="GPU-shared-00")
    assert (gpu.node.cluster.name, gpu.node.hostname) == ("c1", "node-a")
    assert not Gpu.objects.filter(uuid="GPU-shared-01").exists()  # nothing of the batch
    assert GpuSample.objects.count() == 0
    assert RejectedBatch.objects.get().reason == "foreign_gpu"


def test_a_gpu_swapped_from_a_node_that_stopped_reporting_moves(db):
    a, b = _node("c1", "node-a"), _node("c1", "node-b")
    gpus_register(a, [GpuInfo(index=0, uuid="GPU-moved-00", name="H100")])
    node_seen(a, timezone.now(), "nvml")
    Node.objects.filter(pk=a).update(last_contact_at=timezone.now() - timedelta(hours=1))
    mapping = gpus_register(b, [GpuInfo(index=3, uuid="GPU-moved-00", name="H100")])

    gpu = Gpu.objects.get(uuid="GPU-moved-00")
    assert (gpu.node_id, gpu.index, mapping) == (b, 3, {3: gpu.id})


def test_a_gpu_of_a_live_node_of_the_cluster_is_refused_and_not_moved(db):
    """A node cannot take over the GPUs of a neighbour that is reporting them."""
    a, b = _node("c1", "node-a"), _node("c1", "node-b")
    gpus_register(a, [GpuInfo(index=0, uuid="GPU-taken-00", name="H100")])
    node_seen(a, timezone.now(), "nvml")
    token = node_token_issue("c1", "node-b")
    raw = json.dumps(make_batch("c1", "node-b", token, gpus=2, uuid_prefix="GPU-taken"))

    with pytest.raises(AuthError) as exc:
        samples_ingest(raw)
    batch_reject(raw, exc.value)

    assert exc.value.reason == "foreign_gpu"
    assert "GPU-taken-00 of live node node-a" in exc.value.detail
    gpu = Gpu.objects.get(uuid="GPU-taken-00")
    assert gpu.node_id == a and gpu.index == 0
    assert not Gpu.objects.filter(node_id=b).exists()
    assert GpuSample.objects.count() == 0
    assert RejectedBatch.objects.get().reason == "foreign_gpu"


def test_a_gpu_an_operator_released_moves_to_the_next_node_reporting_it(db, admin_client):
    a, b = _node("c1", "node-a"), _node("c1", "node-b")
    gpus_register(a, [GpuInfo(index=0, uuid="GPU-rma-00", name="H100")])
    node_seen(a, timezone.now(), "nvml")
    gpu = Gpu.objects.get(uuid="GPU-rma-00")
    response = admin_client.post(
        "/admin/fleet/gpu/", {"action": "gpus_release", "_selected_action": [gpu.pk]}
    )
    assert response.status_code == 302

    mapping = gpus_register(b, [GpuInfo(index=5, uuid="GPU-rma-00", name="H100")])
    gpu.refresh_from_db()
    assert (gpu.node_id, gpu.index, mapping) == (b, 5, {5: gpu.pk})
    assert not gpu.released  # once: it belongs to node-b now
    node_seen(b, timezone.now(), "nvml")
    with pytest.raises(AuthError):
        gpus_register(a, [GpuInfo(index=0, uuid="GPU-rma-00", name="H100")])


def test_the_scheduler_role_is_granted_and_taken_away(db):
    node_token_issue("c1", "slurm-ctl")
    assert not Node.objects.get(hostname="slurm-ctl").may_send_job_events  # not by default
    node_scheduler_grant("c1", "slurm-ctl")
    assert Node.objects.get(hostname="slurm-ctl").may_send_job_events
    node_scheduler_grant("c1", "slurm-ctl", granted=False)
    assert not Node.objects.get(hostname="slurm-ctl").may_send_job_events
    with pytest.raises(Node.DoesNotExist):
        node_scheduler_grant("c1", "no-such-node")


def _envelope(cluster: str, node: str, token: str, **body) -> str:
    import time
    import uuid

    return json.dumps(
        {"v": 1, "batch_id": str(uuid.uuid4()), "cluster": cluster, "node": node,
         "token": token, "sent_at": time.time(), **body}
    )  # fmt: skip


def test_a_node_token_speaks_for_its_own_node_only(db):
    """Node A's token in a batch that claims to be node B is refused on every ingest path;
    an error event naming B's GPU from A's own batch is A's, never B's GPU's."""
    import time

    from webapp.failures.models import GpuErrorEvent
    from webapp.failures.node_events import node_events_ingest
    from webapp.jobs.services import job_events_ingest

    token_a = node_token_issue("c1", "node-a")
    token_b = node_token_issue("c1", "node-b")
    samples_ingest(json.dumps(make_batch("c1", "node-b", token_b, gpus=1, uuid_prefix="GPU-B")))
    node_scheduler_grant("c1", "node-b")
    now = time.time() - 5
    xid = {"ts": now, "kind": "xid", "xid": 79, "source": "nvml", "gpu_uuid": "GPU-B-00"}
    claims_b = [
        (samples_ingest, json.dumps(make_batch("c1", "node-b", token_a, gpus=1))),
        (node_events_ingest, _envelope("c1", "node-b", token_a, gpu_events=[xid])),
        (job_events_ingest, _envelope("c1", "node-b", token_a, source="slurm", events=[])),
    ]
    for ingest, raw in claims_b:
        with pytest.raises(AuthError) as exc:
            ingest(raw)
        assert exc.value.reason == "bad_token", ingest.__name__

    node_events_ingest(_envelope("c1", "node-a", token_a, gpu_events=[xid]))
    event = GpuErrorEvent.objects.get()
    assert (event.node.hostname, event.gpu_id) == ("node-a", None)
    assert GpuSample.objects.filter(gpu__node__hostname="node-b").count() == 1  # its own


# --- Node states from the scheduler ---------------------------------------------------------


def _states(*states: tuple) -> list:
    """NodeStateIn from (node, state, reason, since) tuples."""
    from collectors.schema import NodeStateIn

    return [NodeStateIn(node=n, state=s, reason=r, since=t) for n, s, r, t in states]


def _node_row(cluster: str, hostname: str) -> Node:
    return Node.objects.get(cluster__name=cluster, hostname=hostname)


def test_scheduler_states_land_on_the_nodes_of_the_senders_cluster_only(db):
    from webapp.fleet.services import node_states_apply

    _node("c1", "gpu-01")
    _node("c1", "gpu-02")
    _node("c2", "gpu-01")  # the same name in another cluster
    c1 = Node.objects.get(cluster__name="c1", hostname="gpu-01").cluster_id
    t = time.time() - 60

    unknown = node_states_apply(
        c1,
        _states(
            ("gpu-01", "drained", "vigil: gpu_off_bus failure 123", t),
            ("gpu-02", "draining", "hand drain, ticket 7", t + 1),
            ("login-01", "down", "Not responding", t),  # a Slurm node Vigil does not know
        ),
    )

    assert unknown == 1
    drained = _node_row("c1", "gpu-01")
    assert (drained.state, drained.state_reason) == ("drained", "vigil: gpu_off_bus failure 123")
    assert drained.state_since == datetime.fromtimestamp(t, UTC)
    assert _node_row("c1", "gpu-02").state == "draining"
    other = _node_row("c2", "gpu-01")
    assert (other.state, other.state_reason, other.state_since) == ("registered", "", None)
    assert not Node.objects.filter(hostname="login-01").exists()


def test_telemetry_does_not_return_a_drained_node_to_up_the_scheduler_does(db):
    from webapp.fleet.selectors import node_state_now
    from webapp.fleet.services import node_states_apply, nodes_mark_stale

    token = node_token_issue("c1", "gpu-01")
    node_token_issue("c1", "gpu-02")  # never reported telemetry
    samples_ingest(json.dumps(make_batch("c1", "gpu-01", token, gpus=1)))
    cluster = _node_row("c1", "gpu-01").cluster_id
    assert _node_row("c1", "gpu-01").state == "up"
    t = time.time() - 60
    node_states_apply(
        cluster, _states(("gpu-01", "drained", "bad gpu", t), ("gpu-02", "down", "", t))
    )

    # The node keeps reporting and later falls silent: drained all along, on the page too.
    samples_ingest(json.dumps(make_batch("c1", "gpu-01", token, gpus=1)))
    node = _node_row("c1", "gpu-01")
    assert node.state == "drained" and node.last_seen is not None
    nodes_mark_stale(older_than=timezone.now() + timedelta(hours=1))
    assert _node_row("c1", "gpu-01").state == "drained"
    assert (
        node_state_now("drained", node.last_seen - timedelta(days=1), timezone.now()) == "drained"
    )

    # Resumed in Slurm: back to what telemetry says (seen: up; never seen: registered).
    node_states_apply(cluster, _states(("gpu-01", "up", "", t + 10), ("gpu-02", "up", "", t + 10)))
    node = _node_row("c1", "gpu-01")
    assert (node.state, node.state_reason) == ("up", "")
    assert node.state_since == datetime.fromtimestamp(t + 10, UTC)
    assert _node_row("c1", "gpu-02").state == "registered"


def test_up_from_the_scheduler_leaves_a_stale_node_stale(db):
    from webapp.fleet.services import node_states_apply, nodes_mark_stale

    token = node_token_issue("c1", "gpu-01")
    samples_ingest(json.dumps(make_batch("c1", "gpu-01", token, gpus=1)))
    nodes_mark_stale(older_than=timezone.now() + timedelta(hours=1))
    node_states_apply(
        _node_row("c1", "gpu-01").cluster_id, _states(("gpu-01", "up", "", time.time()))
    )
    assert _node_row("c1", "gpu-01").state == "stale"  # Slurm's "up" is not telemetry


def test_an_older_state_arriving_late_changes_nothing(db):
    from webapp.fleet.services import node_states_apply

    _node("c1", "gpu-01")
    cluster = _node_row("c1", "gpu-01").cluster_id
    t = time.time() - 600
    node_states_apply(cluster, _states(("gpu-01", "drained", "second drain", t + 100)))
    # A batch replayed from a spool, from before the drain.
    node_states_apply(cluster, _states(("gpu-01", "up", "", t)))
    node = _node_row("c1", "gpu-01")
    assert (node.state, node.state_reason) == ("drained", "second drain")
    # The same time again (draining, then drained with the same reason time) applies.
    node_states_apply(cluster, _states(("gpu-01", "down", "second drain", t + 100)))
    assert _node_row("c1", "gpu-01").state == "down"
