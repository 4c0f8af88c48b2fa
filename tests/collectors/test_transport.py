"""Transport: batches reach a real Redis as Celery tasks, or wait on disk, in order."""

from __future__ import annotations

import base64
import json
import os
import stat
import uuid

import kombu.compression

from collectors import outbox
from collectors.schema import INGEST_QUEUE, INGEST_TASK, is_signed
from collectors.transport import Spool, Transport


def queued(server, resolve: bool = True) -> list[tuple[str, list]]:
    """(task name, args) of the messages waiting in the ingest queue, oldest first; with
    `resolve`, an outbox reference is replaced by the batch text it stands for."""
    # kombu's Redis transport LPUSHes and workers BRPOP: the oldest message is last.
    client = server.client()
    out = []
    for item in reversed(client.lrange(INGEST_QUEUE, 0, -1)):
        message = json.loads(item)
        body = base64.b64decode(message["body"])
        if "compression" in message["headers"]:
            body = kombu.compression.decompress(body, message["headers"]["compression"])
        args, _kwargs, _embed = json.loads(body)
        batch_id = outbox.reference_id(args[0])
        if resolve and batch_id is not None:
            args = [outbox.outbox_get(client, batch_id)]
        out.append((message["headers"]["task"], args))
    return out


def batch(n: int) -> str:
    return json.dumps({"n": n})


def test_batches_become_one_ingest_task_each_with_the_json_text_as_only_argument(
    private_redis, tmp_path
):
    private_redis.start()
    transport = Transport(private_redis.url, tmp_path / "spool")
    assert transport.send(batch(1), "b1") is True
    assert transport.send(batch(2), "b2") is True
    transport.close()
    assert queued(private_redis) == [(INGEST_TASK, [batch(1)]), (INGEST_TASK, [batch(2)])]
    assert list((tmp_path / "spool").iterdir()) == []


def real_sized_batch(batch_id: str | None) -> str:
    samples = [[i % 8, 1.7e9 + i, 97.0, 41.0, 312.5] for i in range(2000)]
    head = {"batch_id": batch_id} if batch_id else {}
    return json.dumps({**head, "samples": samples})


def test_batches_travel_compressed_once_in_the_outbox_with_a_reference_in_the_message(
    private_redis, tmp_path
):
    """A real-sized batch is stored once, compressed, and the message only names it."""
    private_redis.start()
    batch_id = str(uuid.uuid4())
    text = real_sized_batch(batch_id)
    transport = Transport(private_redis.url, tmp_path / "spool")
    assert transport.send(text, batch_id) is True
    transport.close()
    client = private_redis.client()
    [item] = client.lrange(INGEST_QUEUE, 0, -1)
    assert len(item) < 2000  # Celery's headers and the reference, not the batch
    assert queued(private_redis, resolve=False) == [(INGEST_TASK, [f"outbox:{batch_id}"])]
    assert client.hstrlen(outbox.OUTBOX_KEY, batch_id) < len(text) / 2
    assert queued(private_redis) == [(INGEST_TASK, [text])]


def test_a_batch_without_an_id_travels_compressed_in_the_message(private_redis, tmp_path):
    private_redis.start()
    text = real_sized_batch(None)
    transport = Transport(private_redis.url, tmp_path / "spool")
    assert transport.send(text, "big") is True
    transport.close()
    [item] = private_redis.client().lrange(INGEST_QUEUE, 0, -1)
    assert len(item) < len(text) / 2
    assert private_redis.client().hlen(outbox.OUTBOX_KEY) == 0
    assert queued(private_redis, resolve=False) == [(INGEST_TASK, [text])]


def test_broker_down_spools_then_replays_oldest_first_before_new_batches(private_redis, tmp_path):
    spool_dir = tmp_path / "spool"
    transport = Transport(private_redis.url, spool_dir)  # nothing listens on the socket yet
    for n in range(3):
        assert transport.send(batch(n), f"b{n}") is False
    files = sorted(spool_dir.iterdir())
    assert [f.read_text() for f in files] == [batch(0), batch(1), batch(2)]

    private_redis.start()
    assert transport.send(batch(3), "b3") is True
    transport.close()
    assert [args[0] for _task, args in queued(private_redis)] == [batch(n) for n in range(4)]
    assert list(spool_dir.iterdir()) == []


def test_broker_dying_mid_run_loses_nothing_and_keeps_order(private_redis, tmp_path):
    private_redis.start()
    transport = Transport(private_redis.url, tmp_path / "spool")
    assert transport.send(batch(0), "b0")
    private_redis.stop()
    assert transport.send(batch(1), "b1") is False
    assert transport.send(batch(2), "b2") is False
    private_redis.start()  # append-only file: batch 0 is still queued
    assert transport.send(batch(3), "b3")
    transport.close()
    assert [args[0] for _task, args in queued(private_redis)] == [batch(n) for n in range(4)]


def test_a_restarted_agent_sends_what_an_earlier_run_spooled(private_redis, tmp_path):
    spool_dir = tmp_path / "spool"
    first = Transport(private_redis.url, spool_dir)
    first.send(batch(0), "b0")
    first.send(batch(1), "b1")
    first.close()
    (spool_dir / ".00000000000000000001-half-written.json.tmp").write_text("{")  # a crash

    private_redis.start()
    second = Transport(private_redis.url, spool_dir)
    assert second.flush() == 0
    second.send(batch(2), "b2")
    second.close()
    assert [args[0] for _task, args in queued(private_redis)] == [batch(0), batch(1), batch(2)]


def test_spool_names_keep_order_even_within_one_clock_tick(tmp_path):
    spool = Spool(tmp_path)
    paths = [spool.put(batch(n), f"b{n}") for n in range(50)]
    assert spool.files() == paths
    # A new Spool on the same folder continues after the newest file.
    later = Spool(tmp_path).put(batch(99), "b99")
    assert Spool(tmp_path).files()[-1] == later


def test_job_event_batches_go_to_their_own_task_also_after_a_spool_replay(private_redis, tmp_path):
    from collectors.schema import JOB_EVENTS_TASK

    spool_dir = tmp_path / "spool"
    transport = Transport(private_redis.url, spool_dir)  # broker down: both are spooled
    assert transport.send(batch(1), "b1") is False
    assert transport.send(batch(2), "b2", task=JOB_EVENTS_TASK) is False
    private_redis.start()
    # A new transport (the agent restarted) replays them oldest first, each to its task.
    transport = Transport(private_redis.url, spool_dir)
    assert transport.flush() == 0
    transport.close()
    assert queued(private_redis) == [(INGEST_TASK, [batch(1)]), (JOB_EVENTS_TASK, [batch(2)])]


def test_spool_folder_is_0700_and_its_batches_0600_whatever_the_umask(tmp_path):
    old_umask = os.umask(0o022)
    try:
        spool_dir = tmp_path / "spool"
        spool_dir.mkdir(mode=0o755)  # an existing folder of a looser mode is tightened
        spool = Spool(spool_dir)
        path = spool.put('{"batch_id": "x"}', "x")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(spool_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_spooled_batch_holds_its_signature_not_its_token(tmp_path):
    token = "a-node-token-of-enough-length-0123"
    transport = Transport("redis+socket:///nowhere/redis.sock", tmp_path / "spool")
    batch = {"v": 1, "batch_id": "3f2c3f0e-6a57-4a43-9d6c-2f9f3a0b8a11", "token": token}
    assert not transport.send(json.dumps(batch), batch["batch_id"])
    [path] = transport.spool.files()
    assert token not in path.read_text() and is_signed(path.read_text())
