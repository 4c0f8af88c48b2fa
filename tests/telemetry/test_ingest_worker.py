"""The ingest path with real parts: Redis broker, Celery worker subprocesses, PostgreSQL.

Each test publishes wire batches by task name (as a collector does), lets a real worker store
them, and checks the rows in PostgreSQL, including across a SIGKILLed worker and a restarted
PostgreSQL.
"""

from __future__ import annotations

import json
import signal
import time

import psutil
import psycopg
import pytest
from django.conf import settings
from django.db import connection

from collectors.outbox import OUTBOX_KEY, SINCE_KEY
from collectors.schema import INGEST_QUEUE, INGEST_TASK
from tests.helpers import database_url, make_batch, wait_for
from tests.telemetry.helpers import publish
from webapp.celery import app
from webapp.core import embedded
from webapp.core.outbox import DELIVERIES_KEY, outbox_redeliver
from webapp.telemetry.services import rollups_refresh

pytestmark = pytest.mark.integration


def stored_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def distinct_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(DISTINCT (gpu_id, ts)) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def row_counts() -> dict[str, int]:
    """Rows of the tables without a natural key a redelivery could double (node samples have
    one, but are counted too: a lost ON CONFLICT would show here first)."""
    tables = {
        "nodesample": "telemetry_nodesample",
        "rollupdirty": "telemetry_rollupdirty",
        "rejectedbatch": "telemetry_rejectedbatch",
    }
    with connection.cursor() as cur:
        counts = {}
        for name, table in tables.items():
            cur.execute(f"SELECT count(*) FROM {table}")
            counts[name] = cur.fetchone()[0]
        return counts


def rollup_total() -> int:
    rollups_refresh()
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(sum(n), 0) FROM telemetry_gpurollup1m")
        return cur.fetchone()[0]


def many_batches(node_token, count: int, intervals: int = 6) -> list[dict]:
    cluster, node, token = node_token
    t0 = time.time() - count * intervals * 10 - 60
    return [
        make_batch(cluster, node, token, t0=t0 + i * intervals * 10, intervals=intervals)
        for i in range(count)
    ]


def test_redelivered_batch_is_stored_once(committed_node_token, worker_factory, broker):
    """The second copy is handled, not lost: it was taken and acknowledged, not refused, its
    outbox entry is gone, and nothing was stored twice, in the tables
    without a natural key either (RollupDirty: the second copy stored no new GPU row)."""
    worker_factory()
    batch = make_batch(*committed_node_token, intervals=4)
    publish(batch)
    publish(batch)  # the same batch again, as a broker redelivery would
    wait_for(lambda: stored_samples() == 32)
    # Both copies were taken and acknowledged.
    wait_for(lambda: broker.llen("ingest") == 0 and broker.hlen("unacked") == 0)
    wait_for(lambda: outbox_empty(broker))

    assert stored_samples() == distinct_samples() == 32
    assert row_counts() == {"nodesample": 4, "rollupdirty": 1, "rejectedbatch": 0}
    assert rollup_total() == 32


def test_invalid_batch_is_rejected_and_worker_keeps_going(committed_node_token, worker_factory):
    from webapp.core.models import RejectedBatch

    worker = worker_factory()
    cluster, node, token = committed_node_token
    publish(make_batch(cluster, node, "wrong-token-" + "x" * 30))
    app.send_task(INGEST_TASK, args=["\x00\xffnot json at all"], queue=INGEST_QUEUE)
    publish(make_batch(cluster, node, token, intervals=2))

    wait_for(lambda: stored_samples() == 16)
    reasons = sorted(RejectedBatch.objects.values_list("reason", flat=True))
    assert reasons == ["bad_signature", "unsigned"]
    assert worker.proc.poll() is None  # still running
    assert "rejected batch" in worker.log()


def test_a_backlog_is_stored_in_groups_with_refusals_and_redeliveries_sorted_out(
    committed_node_token, worker_factory, broker
):
    """Batches waiting when a worker starts are taken several at a time: refused ones are
    recorded, a batch sent twice is stored once, and every outbox entry is cleared."""
    from webapp.core.models import RejectedBatch

    cluster, node, token = committed_node_token
    batches = many_batches(committed_node_token, 12, intervals=3)
    for i, b in enumerate(batches):
        publish(b)
        if i == 4:
            publish(b)  # the same batch again, as a broker redelivery would
        if i in (2, 7):
            publish(make_batch(cluster, node, "wrong-token-" + "x" * 30, t0=b["sent_at"]))
    assert broker.llen("ingest") == 15

    worker_factory()
    wait_for(lambda: broker.llen("ingest") == 0 and broker.hlen("unacked") == 0, timeout=60)
    wait_for(lambda: RejectedBatch.objects.count() == 2)
    assert stored_samples() == distinct_samples() == 12 * 24
    wait_for(lambda: outbox_empty(broker))
    assert row_counts() == {"nodesample": 12 * 3, "rollupdirty": 12, "rejectedbatch": 2}
    assert rollup_total() == 12 * 24
    assert set(RejectedBatch.objects.values_list("reason", flat=True)) == {"bad_signature"}
    wait_for(lambda: broker.hlen(OUTBOX_KEY) == 0)


def test_sigkilled_worker_loses_nothing_and_duplicates_nothing(
    committed_node_token, worker_factory, broker
):
    batches = many_batches(committed_node_token, 150, intervals=30)
    expected = sum(len(b["samples"]) for b in batches)
    for b in batches:
        publish(b)

    first = worker_factory()
    wait_for(lambda: stored_samples() > expected // 10, timeout=60, interval=0.02)
    first.kill()  # SIGKILL mid-stream: prefetched and running batches were never acked
    assert stored_samples() < expected

    second = worker_factory(visibility_timeout_s=3)  # unacked messages come back after this
    # What the broker still knows about is redelivered to the new worker ...
    wait_for(lambda: broker.llen("ingest") == 0 and broker.hlen("unacked") == 0, timeout=120)
    # ... and a batch the killed worker had taken off the queue but not yet recorded (kombu
    # pops with BRPOP first) is still in the outbox: the beat task re-publishes it.
    outbox_redeliver(older_than_s=0)
    try:
        wait_for(lambda: stored_samples() == expected, timeout=120, interval=0.5)
    except AssertionError as exc:
        state = {
            "stored": stored_samples(),
            "expected": expected,
            "queued": broker.llen("ingest"),
            "unacked": broker.hlen("unacked"),
            "mutex_ttl": broker.ttl("unacked_mutex"),
        }
        raise AssertionError(f"{exc}; {state}; second worker:\n{second.log()[-2000:]}") from None
    assert distinct_samples() == expected
    wait_for(lambda: outbox_empty(broker), timeout=30)  # every batch finished
    # Nothing doubled where no key would stop it: one RollupDirty per batch (a redelivered
    # batch stores no GPU row, so marks nothing), no refusal.
    assert row_counts() == {"nodesample": 150 * 30, "rollupdirty": 150, "rejectedbatch": 0}
    assert rollup_total() == expected


def test_batch_lost_between_pop_and_record_is_republished(
    committed_node_token, worker_factory, broker
):
    """The kombu window itself: a consumer pops a message and dies before recording it."""
    batch = make_batch(*committed_node_token, intervals=3)
    publish(batch)
    assert broker.rpop("ingest") is not None  # popped by a worker that then died
    worker_factory()
    time.sleep(2)
    assert stored_samples() == 0  # the broker has forgotten the batch

    assert outbox_redeliver(older_than_s=0) == 1
    wait_for(lambda: stored_samples() == 24)
    wait_for(lambda: broker.hlen(OUTBOX_KEY) == 0)
    assert outbox_redeliver(older_than_s=0) == 0


def test_a_reference_redelivered_after_its_batch_finished_changes_nothing(
    committed_node_token, worker_factory, broker
):
    """A worker that stored a batch and died before its ack: the broker delivers the
    reference again, but the outbox entry is gone; the task finishes quietly."""
    from webapp.core.models import RejectedBatch

    worker = worker_factory()
    batch = make_batch(*committed_node_token, intervals=2)
    publish(batch)
    wait_for(lambda: stored_samples() == 16 and broker.hlen(OUTBOX_KEY) == 0)

    app.send_task(INGEST_TASK, args=[f"outbox:{batch['batch_id']}"], queue=INGEST_QUEUE)
    publish(make_batch(*committed_node_token, t0=batch["sent_at"], intervals=1))
    wait_for(lambda: stored_samples() == 24)  # the batch after it is stored ...
    wait_for(lambda: "was finished before" in worker.log())  # ... the reference was a no-op
    assert distinct_samples() == 24
    assert RejectedBatch.objects.count() == 0
    assert worker.proc.poll() is None


@pytest.mark.skipif(
    not settings.VIGIL_EMBEDDED_POSTGRES,
    reason="restarts the embedded PostgreSQL; DATABASE_URL points at a server tests do not own",
)
def test_postgres_restart_during_ingest_loses_nothing(committed_node_token, worker_factory):
    batches = many_batches(committed_node_token, 120, intervals=30)
    expected = sum(len(b["samples"]) for b in batches)
    worker = worker_factory()
    for b in batches[:20]:
        publish(b)
    wait_for(lambda: stored_samples() > 0, interval=0.02)

    connection.close()
    embedded.postgres_stop()
    try:
        for b in batches[20:]:
            publish(b)  # accepted by the broker while the database is down
        time.sleep(3)  # the worker meets the dead database and retries with backoff
    finally:
        embedded.postgres_url()  # start it again

    wait_for(lambda: stored_samples() == expected, timeout=120, interval=0.5)
    assert distinct_samples() == expected
    assert "will be retried" in worker.log()
    assert row_counts() == {"nodesample": 120 * 30, "rollupdirty": 120, "rejectedbatch": 0}
    assert rollup_total() == expected


def outbox_empty(broker) -> bool:
    """No batch is waiting to be finished: the outbox, its publish times and the delivery
    counts are all empty."""
    return not (broker.hlen(OUTBOX_KEY) or broker.zcard(SINCE_KEY) or broker.hlen(DELIVERIES_KEY))


def test_a_poison_batch_in_a_group_is_refused_once_and_the_group_is_stored(
    committed_node_token, worker_factory, broker
):
    """Eight batches waiting when a worker starts come as one group; one of them cannot be
    stored (a GPU model the database refuses, by a CHECK the test adds). The other seven are
    stored, the poison one is refused once, with the exception, and nothing of it is ever
    published again."""
    from tests.telemetry.helpers import ALLOW_MODEL_SQL, REFUSE_MODEL_SQL, poisoned
    from webapp.core.models import RejectedBatch

    batches = many_batches(committed_node_token, 8, intervals=3)
    batches[3] = poison = poisoned(batches[3])
    for b in batches:
        publish(b)
    assert broker.llen("ingest") == 8

    with connection.cursor() as cur:
        cur.execute(REFUSE_MODEL_SQL)
    try:
        worker_factory(visibility_timeout_s=2)
        wait_for(lambda: stored_samples() == 7 * 24, timeout=60)
        wait_for(lambda: outbox_empty(broker), timeout=30)
    finally:
        with connection.cursor() as cur:
            cur.execute(ALLOW_MODEL_SQL)
    rejected = RejectedBatch.objects.get()
    assert (rejected.batch_id, rejected.reason) == (poison["batch_id"], "store_failed")
    assert (
        rejected.detail.startswith("IntegrityError: ") and "test_refused_model" in rejected.detail
    )

    # Past the visibility timeout nothing comes back, from the broker or the outbox.
    assert outbox_redeliver(older_than_s=0) == 0
    time.sleep(4)
    assert broker.llen("ingest") == 0 and broker.hlen("unacked") == 0
    assert RejectedBatch.objects.count() == 1
    assert stored_samples() == distinct_samples() == 7 * 24
    assert row_counts() == {"nodesample": 7 * 3, "rollupdirty": 7, "rejectedbatch": 1}


def _pool_children(worker) -> list[psutil.Process]:
    return psutil.Process(worker.proc.pid).children()


def _waiting_on_locks() -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cur.fetchone()[0]


def test_a_batch_whose_worker_is_killed_every_time_ends_as_poison(
    committed_node_token, worker_factory, broker
):
    """Each delivery of the batch is SIGKILLed mid-store (its pool process, while PostgreSQL
    makes it wait on a lock the test holds). After VIGIL_POISON_DELIVERIES such deliveries it
    is refused as poison, once, without being tried again; then the worker goes on."""

    from webapp.core.models import RejectedBatch

    worker = worker_factory(visibility_timeout_s=2)
    batch = make_batch(*committed_node_token, intervals=3)
    holder = psycopg.connect(database_url(), autocommit=False)
    try:
        holder.execute("LOCK TABLE telemetry_rollupdirty IN ACCESS EXCLUSIVE MODE")
        publish(batch)
        for kill in range(settings.VIGIL_POISON_DELIVERIES):
            wait_for(lambda k=kill: _waiting_on_locks() > k, timeout=60)
            [child] = _pool_children(worker)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        rejected = wait_for(lambda: RejectedBatch.objects.first(), timeout=60)
    finally:
        holder.close()

    assert (rejected.batch_id, rejected.reason) == (batch["batch_id"], "poison")
    assert f"delivered {settings.VIGIL_POISON_DELIVERIES} times" in rejected.detail
    wait_for(lambda: outbox_empty(broker), timeout=30)
    later = make_batch(*committed_node_token, t0=batch["sent_at"], intervals=2)
    publish(later)
    wait_for(lambda: stored_samples() == 16, timeout=30)
    assert outbox_redeliver(older_than_s=0) == 0
    time.sleep(3)
    assert RejectedBatch.objects.count() == 1
    assert row_counts()["rollupdirty"] == 1  # the later batch's; none of the killed ones


def test_a_batch_carrying_its_token_through_the_broker_is_refused(
    committed_node_token, worker_factory
):
    """Only signed batches may come through Redis: one that carries its node token (an old
    or hand-rolled collector) put a secret in the broker, and is refused so it is noticed,
    on the grouped path (samples) and the single one (job events) alike."""
    from collectors.schema import JOB_EVENTS_TASK
    from webapp.core.models import RejectedBatch

    cluster, node, token = committed_node_token
    worker_factory()
    app.send_task(
        INGEST_TASK, args=[json.dumps(make_batch(cluster, node, token))], queue=INGEST_QUEUE
    )
    events = {"v": 1, "batch_id": "8a0c3f9e-1b2d-4c5e-9f00-000000000001", "cluster": cluster,
              "node": node, "token": token, "sent_at": time.time(), "source": "slurm",
              "events": [{"job_id": "j1", "kind": "submitted", "ts": time.time() - 60}]}  # fmt: skip
    app.send_task(JOB_EVENTS_TASK, args=[json.dumps(events)], queue=INGEST_QUEUE)

    wait_for(lambda: RejectedBatch.objects.count() == 2)
    assert set(RejectedBatch.objects.values_list("reason", flat=True)) == {"unsigned"}
    assert stored_samples() == 0
    assert token not in " ".join(RejectedBatch.objects.values_list("detail", flat=True))
