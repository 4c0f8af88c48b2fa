"""What a node can put on the broker that no worker can read: refused alone, recorded, finished,
with a real Redis and a real worker; the good batches beside it are stored."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from collectors import outbox
from collectors.schema import INGEST_QUEUE, INGEST_TASK, NODE_EVENTS_TASK
from collectors.transport import Transport
from tests.helpers import make_batch, wait_for
from webapp.celery import app
from webapp.core.models import RejectedBatch
from webapp.core.outbox import DELIVERIES_KEY

pytestmark = pytest.mark.integration

NOT_ZSTD = "11111111-1111-4111-8111-111111111111"
NOT_UTF8 = "22222222-2222-4222-8222-222222222222"
EVENTS_NOT_ZSTD = "33333333-3333-4333-8333-333333333333"


def _stored_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def _unreadable_entry(broker, batch_id: str, task: str, packed: bytes) -> None:
    """An outbox entry as a node may write it (HSETNX, its index member), and its reference
    published on the ingest queue."""
    broker.hsetnx(outbox.OUTBOX_KEY, batch_id, packed)
    broker.zadd(outbox.SINCE_KEY, {f"{task}\n{batch_id}": time.time()})
    app.send_task(task, args=[outbox.reference(batch_id)], queue=INGEST_QUEUE)


def test_unreadable_entries_and_arguments_are_refused_alone_and_the_group_is_stored(
    committed_node_token, worker_factory, broker
):
    cluster, node, token = committed_node_token
    t0 = time.time() - 3600
    transport = Transport(settings.CELERY_BROKER_URL, Path(tempfile.mkdtemp()) / "spool")
    good = [make_batch(cluster, node, token, t0=t0 + i * 100, intervals=2) for i in range(2)]
    # Waiting before the worker starts, so they are taken as one group.
    assert transport.send(json.dumps(good[0]), good[0]["batch_id"])
    _unreadable_entry(broker, NOT_ZSTD, INGEST_TASK, b"not a zstandard frame at all")
    _unreadable_entry(broker, NOT_UTF8, INGEST_TASK, outbox.zstd.compress(b"\xff\xfe{"))
    app.send_task(INGEST_TASK, args=[12345], queue=INGEST_QUEUE)
    app.send_task(INGEST_TASK, args=[["outbox:" + NOT_ZSTD]], queue=INGEST_QUEUE)
    assert transport.send(json.dumps(good[1]), good[1]["batch_id"])
    # The single-batch tasks too.
    _unreadable_entry(broker, EVENTS_NOT_ZSTD, NODE_EVENTS_TASK, b"\x28\xb5\x2f\xfd garbage")
    app.send_task(NODE_EVENTS_TASK, args=[{"batch": 1}], queue=INGEST_QUEUE)

    worker = worker_factory()
    wait_for(lambda: broker.llen("ingest") == 0 and broker.hlen("unacked") == 0, timeout=60)
    wait_for(lambda: RejectedBatch.objects.count() == 6, timeout=30)

    assert _stored_samples() == 2 * 2 * 8  # both good batches of the group
    refused = sorted(RejectedBatch.objects.values_list("reason", "batch_id", "detail"))
    assert [r[0] for r in refused] == ["unreadable"] * 6
    assert sorted(r[1] for r in refused if r[1]) == [NOT_ZSTD, NOT_UTF8, EVENTS_NOT_ZSTD]
    details = {r[1]: r[2] for r in refused}
    assert "not a Zstandard stream" in details[NOT_ZSTD]
    assert "not UTF-8 text" in details[NOT_UTF8]
    assert sorted(r[2] for r in refused if not r[1]) == [
        "task argument: a dict, not a batch text or outbox reference",
        "task argument: a list, not a batch text or outbox reference",
        "task argument: an int, not a batch text or outbox reference",
    ]
    # Finished: nothing left for the beat task to publish again.
    wait_for(lambda: not (broker.hlen(outbox.OUTBOX_KEY) or broker.zcard(outbox.SINCE_KEY)))
    assert broker.hlen(DELIVERIES_KEY) == 0
    assert worker.proc.poll() is None
