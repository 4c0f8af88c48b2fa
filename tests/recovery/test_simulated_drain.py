"""The demo's simulated executor says of a drained node what Slurm would: draining while a job
still holds GPUs on it, drained once none does (here once the plan's requeue took the job
off it), with the reason its drain command gave; the cluster's nodes page and the recovery
nodes page read it so."""

from __future__ import annotations

import re
import time

import pytest
from django.utils import timezone

from tests.failures.conftest import xid_event
from tests.recovery.conftest import policy
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet.models import Node
from webapp.recovery.execution import action_execute
from webapp.recovery.models import RecoveryAction

pytestmark = pytest.mark.django_db


def _drain_after_xid(fleet, node: str, node_no: int) -> FailureEvent:
    """An Xid 79 on `node`, diagnosed; its plan's drain run by the simulated executor."""
    now = float(int(time.time()))
    node_events_ingest(
        fleet.node_batch(node, gpu_events=[xid_event(now - 5, 79, index=3, node_no=node_no)])
    )
    failure = FailureEvent.objects.get(kind="gpu_error", node__hostname=node)
    failure_diagnose(failure.pk)
    drain = failure.recovery_plan.actions.get(kind="drain")
    action_execute(drain.pk, "test")
    drain.refresh_from_db()
    assert drain.status == "succeeded"
    return failure


def _badge(html: str, row: str) -> str:
    """The state badge's words in the table row that starts at `row`."""
    return re.search(re.escape(row) + r'.*?<span class="badge [^"]*">([^<]+)<', html, re.S)[1]


def test_a_node_running_a_job_is_draining_on_both_nodes_pages(fleet, operator_client):
    policy("auto")
    fleet.run_job("900", time.time() - 3600, None, nodes=("gpu-node-02",))
    failure = _drain_after_xid(fleet, "gpu-node-02", 2)
    node = Node.objects.get(hostname="gpu-node-02")
    reason = f"vigil: gpu_off_bus failure {failure.pk}"  # what `sinfo -R` would show
    assert (node.state, node.state_reason) == ("draining", reason)
    html = operator_client.get(f"/clusters/{fleet.cluster}/nodes/").content.decode()
    assert _badge(html, "gpu-node-02</a>") == "Draining"
    html = operator_client.get("/recovery/nodes/").content.decode()
    assert _badge(html, '<tr data-node="gpu-node-02">') == "Draining"
    # The plan's requeue takes the job off it, its last one: drained, the same reason.
    requeue = failure.recovery_plan.actions.get(kind="requeue")
    assert action_execute(requeue.pk, "test").status == "succeeded"
    node.refresh_from_db()
    assert (node.state, node.state_reason) == ("drained", reason)
    html = operator_client.get(f"/clusters/{fleet.cluster}/nodes/").content.decode()
    assert _badge(html, "gpu-node-02</a>") == "Drained"


def test_a_node_no_job_holds_is_drained(fleet):
    policy("auto")
    _drain_after_xid(fleet, "gpu-node-01", 1)
    assert Node.objects.get(hostname="gpu-node-01").state == "drained"


def test_a_gpu_fault_right_after_vigil_resumed_the_node_drains_it_again(fleet):
    # Vigil drained gpu-node-01 and returned it to service; the scheduler's watcher has not
    # reported it since (its last word: drained, before the resume). A new GPU fault there
    # must drain it again, not be taken for a node still out.
    policy("auto")
    first = _drain_after_xid(fleet, "gpu-node-01", 1)
    node = Node.objects.get(hostname="gpu-node-01")
    drain = first.recovery_plan.actions.get(kind="drain")
    assert node.state == "drained" and drain.status == "succeeded"
    RecoveryAction.objects.create(
        plan=first.recovery_plan, cluster=first.cluster, seq=99, kind="resume",
        status="succeeded", mode="auto", executor="simulated", node=node, host=node.hostname,
        started_at=timezone.now(), ended_at=timezone.now(),
    )  # fmt: skip
    now = float(int(time.time()))
    node_events_ingest(
        fleet.node_batch("gpu-node-01", gpu_events=[xid_event(now, 48, index=5, node_no=1)])
    )
    second = FailureEvent.objects.filter(node__hostname="gpu-node-01").exclude(pk=first.pk).get()
    failure_diagnose(second.pk)
    assert second.recovery_plan.actions.filter(kind="drain", host="gpu-node-01").exists()
