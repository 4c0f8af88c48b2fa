"""The ingest queue is the one nodes write to: an ingest worker runs only the ingest tasks from
it and records any other task name as refused (real Redis, real workers)."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from collectors.schema import INGEST_QUEUE
from collectors.transport import Transport
from tests.helpers import make_batch, wait_for
from webapp.celery import app
from webapp.core.models import RejectedBatch
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Node

pytestmark = pytest.mark.integration


def _stored_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def test_a_node_putting_other_tasks_on_the_ingest_queue_gets_them_refused_and_recorded(
    committed_node_token, worker_factory, broker
):
    cluster, hostname, token = committed_node_token
    # A node not heard from for a day: the beat's mark_stale_nodes would mark it stale.
    fleet_services.node_token_issue(cluster, "gpu-node-09")
    quiet = Node.objects.get(hostname="gpu-node-09")
    Node.objects.filter(pk=quiet.pk).update(
        state="up", last_seen=timezone.now() - timedelta(days=1)
    )
    # What a node with the broker's password can write: any task name, on its queue, with any
    # route it likes written in the message.
    app.send_task("vigil.recovery.execute", args=[1], queue=INGEST_QUEUE)
    app.send_task("vigil.fleet.mark_stale_nodes", queue=INGEST_QUEUE)
    message = json.loads(broker.rpop(INGEST_QUEUE))
    message["properties"]["delivery_info"]["routing_key"] = "default"
    broker.lpush(INGEST_QUEUE, json.dumps(message))
    worker_factory(queues=INGEST_QUEUE)
    batch = make_batch(cluster, hostname, token, intervals=2)
    transport = Transport(settings.CELERY_BROKER_URL, Path(tempfile.mkdtemp()) / "spool")
    assert transport.send(json.dumps(batch), batch["batch_id"])

    wait_for(lambda: _stored_samples() == 16)  # the ingest task ran
    wait_for(lambda: RejectedBatch.objects.count() == 2)
    refused = sorted(RejectedBatch.objects.values_list("reason", "detail"))
    assert refused == [
        (
            "foreign_task",
            f"task {name} came through the ingest queue, which runs only the ingest tasks",
        )
        for name in ("vigil.fleet.mark_stale_nodes", "vigil.recovery.execute")
    ]
    assert Node.objects.get(pk=quiet.pk).state == "up"  # the task did nothing

    # The same task from the default queue, which nodes cannot write, runs.
    worker_factory(queues="default")
    app.send_task("vigil.fleet.mark_stale_nodes", queue="default")
    wait_for(lambda: Node.objects.get(pk=quiet.pk).state == "stale")
