"""Node tokens with real parts: no token crosses Redis, and a rotated token is locked out of
a worker that already trusted it (a real Celery worker subprocess, the real broker)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from collectors.outbox import client_for
from collectors.schema import INGEST_QUEUE, INGEST_TASK, batch_sign
from collectors.transport import Transport
from tests.helpers import make_batch, wait_for
from webapp.celery import app
from webapp.core.models import RejectedBatch
from webapp.fleet.services import node_token_issue

pytestmark = pytest.mark.integration


def stored_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


class Monitor:
    """Every command the Redis server runs while this is open (redis-py `monitor()`)."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self._client = client_for(settings.CELERY_BROKER_URL)
        self._client.connection_pool.connection_kwargs["socket_timeout"] = None
        self._monitor = self._client.monitor()
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for command in self._monitor.listen():
                self.commands.append(command["command"])
        except Exception:  # noqa: BLE001 (the connection closes when the test ends)
            return

    def close(self) -> None:
        self._monitor.connection.disconnect()
        self._thread.join(5)


def test_no_token_reaches_redis_while_batches_are_sent_and_stored(
    worker_factory, committed_node_token, tmp_path
):
    cluster, node, token = committed_node_token
    worker_factory()
    monitor = Monitor()
    try:
        transport = Transport(settings.CELERY_BROKER_URL, tmp_path / "spool")
        for k in range(3):
            batch = make_batch(cluster, node, token, t0=time.time() - 600 + k * 60)
            assert transport.send(json.dumps(batch), batch["batch_id"])
        wait_for(lambda: stored_samples() == 24, timeout=60)
    finally:
        monitor.close()

    assert len(monitor.commands) > 10  # the sends, the worker's reads and acks were seen
    assert any("HSET" in c.upper() for c in monitor.commands)
    assert not [c for c in monitor.commands if token in c]
    assert not RejectedBatch.objects.exists()


def test_a_batch_altered_after_signing_is_refused_by_the_worker(
    worker_factory, committed_node_token
):
    cluster, node, token = committed_node_token
    worker_factory()
    signed = batch_sign(json.dumps(make_batch(cluster, node, token), separators=(",", ":")))
    altered = signed.replace("300.0", "30.0", 1)
    assert altered != signed

    app.send_task(INGEST_TASK, args=[altered], queue=INGEST_QUEUE)

    rejected = wait_for(lambda: RejectedBatch.objects.first(), timeout=60)
    assert (rejected.reason, rejected.node) == ("bad_signature", node)
    assert stored_samples() == 0


def test_an_unknown_node_and_a_wrong_key_get_the_same_refusal(worker_factory, transactional_db):
    token = node_token_issue("testcluster", "gpu-node-01")
    worker_factory()
    wrong_key = batch_sign(json.dumps(make_batch("testcluster", "gpu-node-01", "x" * 64)))
    unknown = batch_sign(json.dumps(make_batch("testcluster", "gpu-node-99", token)))
    for text in (wrong_key, unknown):
        app.send_task(INGEST_TASK, args=[text], queue=INGEST_QUEUE)

    wait_for(lambda: RejectedBatch.objects.count() == 2, timeout=60)
    refusals = {
        (r.reason, r.detail.replace("gpu-node-99", "gpu-node-01"))
        for r in RejectedBatch.objects.all()
    }
    assert len(refusals) == 1 and next(iter(refusals))[0] == "bad_signature"


def test_a_rotated_token_is_locked_out_of_a_worker_that_trusted_it_within_60_s(
    worker_factory, committed_node_token, monkeypatch, tmp_path
):
    cluster, node, old_token = committed_node_token
    # The worker keeps a key 30 s by default; 5 s here keeps the test short, and the claim
    # checked is the same: the old token stops working there without being told.
    monkeypatch.setenv("VIGIL_AUTH_CACHE_S", "5")
    worker_factory()
    transport = Transport(settings.CELERY_BROKER_URL, tmp_path / "spool")
    first = make_batch(cluster, node, old_token, t0=time.time() - 900)
    assert transport.send(json.dumps(first), first["batch_id"])
    wait_for(lambda: stored_samples() == 8, timeout=60)  # the worker now trusts the old key

    new_token = node_token_issue(cluster, node)  # in this process, not the worker's
    rotated_at = time.monotonic()

    def old_token_refused() -> bool:
        """Send one batch signed with the old token; True if the worker refused it."""
        before = stored_samples()
        batch = make_batch(cluster, node, old_token, t0=time.time() - 800 + len(sent) * 10)
        sent.append(batch["batch_id"])
        transport.send(json.dumps(batch), batch["batch_id"])
        refused = RejectedBatch.objects.filter(batch_id=batch["batch_id"]).exists
        wait_for(lambda: refused() or stored_samples() > before, timeout=30)
        return refused()

    sent: list[str] = []
    wait_for(old_token_refused, timeout=60, interval=1)
    assert time.monotonic() - rotated_at < 60
    assert RejectedBatch.objects.get(reason="bad_signature").node == node

    fresh = make_batch(cluster, node, new_token, t0=time.time() - 700)
    before = stored_samples()
    assert transport.send(json.dumps(fresh), fresh["batch_id"])
    wait_for(lambda: stored_samples() == before + 8, timeout=60)
