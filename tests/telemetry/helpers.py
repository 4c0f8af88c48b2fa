"""Helpers shared by the tests of this package (imported, never defined, by test modules)."""

from __future__ import annotations

import json
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from collectors.schema import NodeStateIn
from collectors.transport import Transport
from webapp.fleet.services import node_states_apply
from webapp.jobs.models import Job, JobAllocation


def publish(batch: dict) -> None:
    """Publish as the collector does (its transport: outbox copy, then the task by name)."""
    url = settings.CELERY_BROKER_URL
    transport = _transports.get(url)
    if transport is None:
        transport = _transports[url] = Transport(url, Path(tempfile.mkdtemp()) / "spool")
    assert transport.send(json.dumps(batch), batch["batch_id"])


# A GPU model the database refuses (a CHECK the tests add on fleet_gpu): the schema lets the
# batch through, and storing it fails while registering the GPU, as a value out of range for
# its column would. (A NUL byte, the natural example, is refused by the schema already.)
REFUSED_MODEL = "NVIDIA H100 refused by the database"

REFUSE_MODEL_SQL = (
    f"ALTER TABLE fleet_gpu ADD CONSTRAINT test_refused_model CHECK (model <> '{REFUSED_MODEL}')"
)


ALLOW_MODEL_SQL = "ALTER TABLE fleet_gpu DROP CONSTRAINT IF EXISTS test_refused_model"


def poisoned(batch: dict) -> dict:
    """The batch with a GPU swapped in whose model the database refuses (REFUSE_MODEL_SQL)."""
    gpus = [dict(g) for g in batch["gpus"]]
    gpus[0].update(uuid="GPU-swapped-in", name=REFUSED_MODEL)
    return dict(batch, gpus=gpus)


_transports: dict[str, Transport] = {}


# --- The overview's and the node page's jobs, node states and history ---------------------


def gpus_hold(fleet, scheduler_id: str, indices: list[int], *, ended: bool = False) -> Job:
    """A job holding GPUs `indices` of gpu-a-01 (ended an hour ago when `ended`); GPUs 0-3 are
    named by id, the others by (node, index) only, as a watcher that did not know them does."""
    now = timezone.now()
    node = fleet.a01
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id=scheduler_id,
        name=f"train-{scheduler_id}",
        user="alice",
        state="completed" if ended else "running",
        start_at=now - timedelta(hours=2),
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(
            job=job,
            node=node,
            gpu=fleet.gpu(node, i) if i < 4 else None,
            gpu_index=i,
            start=now - timedelta(hours=2),
            end=now - timedelta(hours=1) if ended else None,
        )
        for i in indices
    )
    return job


def node_a01_drain(fleet) -> None:
    """The scheduler reports gpu-a-01 drained (as Vigil's drain leaves it)."""
    node_states_apply(
        fleet.a01.cluster_id,
        [NodeStateIn(node="gpu-a-01", state="drained", reason="Xid 79", since=time.time())],
    )


def node_history(fleet) -> dict:
    """On gpu-a-01: job 77 holds GPUs 0-3 now (job 76 held them before), an Xid 79 on GPU 2,
    the job failure it caused and the drain that followed; one of each elsewhere."""
    from datetime import timedelta

    from django.utils import timezone

    from webapp.failures.models import FailureEvent, GpuErrorEvent
    from webapp.jobs.models import Job, JobAllocation
    from webapp.recovery.models import RecoveryAction, RecoveryPlan

    now = timezone.now()
    node, cluster = fleet.a01, fleet.a01.cluster

    def job(scheduler_id: str, state: str, start, end=None) -> Job:
        j = Job.objects.create(
            cluster=cluster,
            scheduler_id=scheduler_id,
            name=f"train-{scheduler_id}",
            user="alice",
            state=state,
            submit_at=start,
            start_at=start,
            end_at=end,
            gpus_requested=4,
        )
        JobAllocation.objects.bulk_create(
            JobAllocation(job=j, node=node, gpu_index=i, start=start, end=end) for i in range(4)
        )
        return j

    old = job("76", "failed", now - timedelta(hours=3), now - timedelta(hours=2))
    current = job("77", "running", now - timedelta(hours=1))
    xid = GpuErrorEvent.objects.create(
        node=node,
        gpu=fleet.gpu(node, 2),
        gpu_index=2,
        ts=now - timedelta(hours=2),
        kind="xid",
        xid=79,
        message="GPU has fallen off the bus",
    )
    # The failed job opened its failure (a signal); the diagnosis blamed this node.
    failure = FailureEvent.objects.get(job=old)
    FailureEvent.objects.filter(pk=failure.pk).update(
        node=node, blamed_node=node, cause="gpu_xid_79"
    )
    plan = RecoveryPlan.objects.create(
        cluster=cluster, failure=failure, node=node, mode="auto", executor="simulated"
    )
    RecoveryAction.objects.create(
        plan=plan,
        cluster=cluster,
        kind="drain",
        status="succeeded",
        mode="auto",
        executor="simulated",
        node=node,
        host=node.hostname,
        reason="Xid 79 on GPU 2",
        result="node drained",
    )
    return {"current": current, "old": old, "xid": xid, "failure": failure}
