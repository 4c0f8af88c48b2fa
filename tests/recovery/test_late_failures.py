"""A failure detected long after it happened (a spool replayed after an outage, the demo's
history) is told, not acted on: through the real node-event worker, diagnosis and planning, its
plan drains, resets and requeues nothing, and its page says why; a failure detected as it
happens, on the same fleet, is acted on."""

from __future__ import annotations

import time

import pytest

from collectors.schema import NODE_EVENTS_TASK
from tests.failures.conftest import make_fleet, xid_event
from tests.helpers import send_signed, wait_for
from tests.recovery.conftest import policy
from webapp.fleet.models import Node
from webapp.recovery.models import RecoveryPlan

pytestmark = pytest.mark.timeout(120)


def _plan_of(node: str) -> RecoveryPlan | None:
    return RecoveryPlan.objects.filter(failure__node__hostname=node).first()


def test_a_replayed_gpu_failure_is_told_and_a_live_one_acted_on(worker_factory, operator_client):
    fleet = make_fleet()
    policy("auto")
    now = float(int(time.time()))
    fleet.run_job("800", now - 3 * 3600, None, nodes=("gpu-node-01",))
    fleet.run_job("801", now - 3 * 3600, None, nodes=("gpu-node-02",))
    worker_factory(queues="ingest,default,recovery.testcluster")
    # 40 minutes old, arriving now: replayed. Xid 79 (fallen off the bus) on a node running a
    # job would drain the node, requeue the job and have the node rebooted.
    old = xid_event(now - 40 * 60, 79, index=5, node_no=1)
    send_signed(NODE_EVENTS_TASK, args=[fleet.node_batch("gpu-node-01", gpu_events=[old])])
    late = wait_for(lambda: _plan_of("gpu-node-01"), timeout=60)
    assert (late.proposed_action, late.action, late.rule) == ("reboot", "notify", "detected_late")
    (told,) = late.actions.all()
    assert (told.kind, told.audience) == ("notify", "operators")
    assert "detected 40 min after it happened" in late.reason
    assert "would have run drain gpu-node-01, requeue job 800, reboot gpu-node-01" in late.reason
    # Its page says why nothing was done.
    page = operator_client.get(f"/recovery/actions/{told.pk}/").content.decode()
    assert "detected 40 min after it happened (replayed or reported late" in page
    assert "within 10 min" in page

    # The same Xid as it happens, on the other node: drained and its job requeued.
    live = xid_event(now - 2, 79, index=5, node_no=2)
    send_signed(NODE_EVENTS_TASK, args=[fleet.node_batch("gpu-node-02", gpu_events=[live])])
    acted = wait_for(lambda: _plan_of("gpu-node-02"), timeout=60)
    assert (acted.action, acted.rule) == ("reboot", "default_reboot")
    drain, requeue = acted.actions.order_by("seq")[:2]
    assert (drain.kind, drain.host, requeue.kind, requeue.job_scheduler_id) == (
        "drain", "gpu-node-02", "requeue", "801"
    )  # fmt: skip
    wait_for(lambda: acted.actions.filter(kind="requeue", status="succeeded").exists(), timeout=60)
    assert Node.objects.get(hostname="gpu-node-01").state not in ("draining", "drained")
