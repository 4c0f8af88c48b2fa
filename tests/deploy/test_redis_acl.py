"""The broker ACL (deploy/redis/): collectors log in as a Redis user that can only send.

Everything runs against a real redis-server loading the rendered aclfile: a collector's real
Transport sends through it and a real Celery worker, logged in as vigil-worker, stores what it
sent; every other command a node could try on the broker is refused.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
import redis
from django.db import connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from collectors import outbox
from collectors.schema import INGEST_QUEUE, INGEST_TASK, JOB_EVENTS_TASK
from collectors.transport import Transport
from tests.deploy.conftest import acl_render
from tests.helpers import WorkerProcess, database_url, make_batch, wait_for

COLLECTOR = "vigil-collector"
WORKER = "vigil-worker"
CACHE_KEY = ":1:views.decorators.cache.cache_page..GET.0f1e2d3c4b5a.d41d8cd98f00b204e9800998"


def collector_send(acl_redis, tmp_path, text: str, task: str = INGEST_TASK) -> bool:
    transport = Transport(acl_redis.url(COLLECTOR), tmp_path / "spool")
    try:
        return transport.send(text, outbox.batch_id_of(text) or "batch", task)
    finally:
        transport.close()


def stored_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        return cur.fetchone()[0]


@pytest.mark.integration
def test_a_batch_sent_as_the_collector_user_is_stored_by_a_worker_logged_in_as_vigil_worker(
    acl_redis, committed_node_token, settings, tmp_path
):
    batch = make_batch(*committed_node_token, intervals=2)
    assert collector_send(acl_redis, tmp_path, json.dumps(batch)) is True
    assert list((tmp_path / "spool").iterdir()) == []  # sent, not spooled
    admin = acl_redis.client(WORKER)
    assert admin.llen(INGEST_QUEUE) == 1
    assert admin.hexists(outbox.OUTBOX_KEY, batch["batch_id"])

    settings.CELERY_BROKER_URL = acl_redis.url(WORKER)  # what the worker subprocess gets
    worker = WorkerProcess(database_url(), tmp_path / "worker.log")
    worker.start()
    try:
        wait_for(lambda: stored_samples() == 16)
        # Finished: the worker cleared the outbox entry the collector wrote.
        wait_for(lambda: admin.hlen(outbox.OUTBOX_KEY) == 0)
    finally:
        worker.stop()
    assert admin.llen(INGEST_QUEUE) == 0
    assert "NOPERM" not in worker.log()


def test_what_a_collector_sends_is_all_the_acl_allows_and_leaves_no_acl_log_entry(
    acl_redis, tmp_path
):
    """MONITOR (as the worker user) while a collector sends telemetry, a batch without id
    and job events: only the commands users.acl.template grants, and no refusal logged, so
    any ACL LOG entry an operator sees is a node trying something it should not."""
    admin = acl_redis.client(WORKER)
    seen: list[str] = []
    listening = threading.Event()

    def monitor() -> None:
        with acl_redis.client(WORKER).monitor() as m:
            listening.set()
            for command in m.listen():
                seen.append(command["command"].split(" ", 1)[0].upper())
                if command["command"] == "ECHO done":
                    return

    thread = threading.Thread(target=monitor, daemon=True)
    thread.start()
    assert listening.wait(5)
    time.sleep(0.2)  # MONITOR is registered once the server has read it
    with_id = json.dumps({"batch_id": str(uuid.uuid4()), "samples": []})
    assert collector_send(acl_redis, tmp_path, with_id) is True
    assert collector_send(acl_redis, tmp_path, json.dumps({"samples": []})) is True
    events = json.dumps({"batch_id": str(uuid.uuid4()), "events": []})
    assert collector_send(acl_redis, tmp_path, events, JOB_EVENTS_TASK) is True
    admin.echo("done")
    thread.join(5)

    collector_commands = set(seen) - {"ECHO"}
    assert collector_commands <= {"HELLO", "PING", "MULTI", "HSETNX", "ZADD", "EXEC", "LPUSH"}
    assert {"HSETNX", "ZADD", "LPUSH"} <= collector_commands
    assert admin.llen(INGEST_QUEUE) == 3
    assert admin.execute_command("ACL", "LOG") == []


# Everything below is what a user running code on a GPU node could try with the node's broker
# credentials: read or delete other nodes' batches, take their messages off the queue, read or
# poison the web app's cache, or take the broker over.
REFUSED = {
    "read an outbox entry": ("HGET", outbox.OUTBOX_KEY, "{batch_id}"),
    "read the whole outbox": ("HGETALL", outbox.OUTBOX_KEY),
    "list the outbox's batch ids": ("HKEYS", outbox.OUTBOX_KEY),
    "delete an outbox entry": ("HDEL", outbox.OUTBOX_KEY, "{batch_id}"),
    "overwrite an outbox entry": ("HSET", outbox.OUTBOX_KEY, "{batch_id}", "x"),
    "read the outbox's index": ("ZRANGE", outbox.SINCE_KEY, "0", "-1"),
    "drop from the outbox's index": ("ZREM", outbox.SINCE_KEY, "x"),
    "take a message off the queue": ("LPOP", INGEST_QUEUE),
    "take the oldest message": ("RPOP", INGEST_QUEUE),
    "wait for a message": ("BRPOP", INGEST_QUEUE, "1"),
    "read the queue": ("LRANGE", INGEST_QUEUE, "0", "-1"),
    "delete the queue": ("DEL", INGEST_QUEUE),
    "queue a task for the default queue": ("LPUSH", "default", "x"),
    "read kombu's unacknowledged messages": ("HGETALL", "unacked"),
    "read the web cache": ("GET", CACHE_KEY),
    "write the web cache": ("SET", CACHE_KEY, "x"),
    "switch to the cache database": ("SELECT", "1"),
    "list keys": ("KEYS", "*"),
    "scan keys": ("SCAN", "0"),
    "empty the broker": ("FLUSHALL",),
    "empty the database": ("FLUSHDB",),
    "read the configuration": ("CONFIG", "GET", "*"),
    "list the users": ("ACL", "LIST"),
    "run a script": ("EVAL", "return 1", "0"),
    "load a script": ("SCRIPT", "LOAD", "return 1"),
    "crash the server": ("DEBUG", "SEGFAULT"),
    "load a module": ("MODULE", "LIST"),
    "publish to workers": ("PUBLISH", "celeryev", "x"),
    "subscribe to workers": ("SUBSCRIBE", "celeryev"),
    "see every command": ("MONITOR",),
    "make the broker a replica": ("REPLICAOF", "127.0.0.1", "1"),
}


@pytest.mark.parametrize("command", REFUSED.values(), ids=REFUSED.keys())
def test_the_collector_user_is_refused_and_the_broker_is_unchanged(acl_redis, tmp_path, command):
    batch_id = str(uuid.uuid4())
    text = json.dumps({"batch_id": batch_id, "samples": []})
    assert collector_send(acl_redis, tmp_path, text) is True
    admin = acl_redis.client(WORKER)
    admin.set(CACHE_KEY, "page")
    before = {
        "queue": admin.lrange(INGEST_QUEUE, 0, -1),
        "outbox": admin.hgetall(outbox.OUTBOX_KEY),
        "since": admin.zrange(outbox.SINCE_KEY, 0, -1),
        "cache": admin.get(CACHE_KEY),
        "dbsize": admin.dbsize(),
    }

    node = acl_redis.client(COLLECTOR)
    with pytest.raises(redis.exceptions.NoPermissionError):
        node.execute_command(*(arg.format(batch_id=batch_id) for arg in command))

    assert admin.ping()
    after = {
        "queue": admin.lrange(INGEST_QUEUE, 0, -1),
        "outbox": admin.hgetall(outbox.OUTBOX_KEY),
        "since": admin.zrange(outbox.SINCE_KEY, 0, -1),
        "cache": admin.get(CACHE_KEY),
        "dbsize": admin.dbsize(),
    }
    assert after == before


def test_a_node_cannot_replace_another_nodes_outbox_entry(acl_redis, tmp_path):
    """The one write that reaches a shared key: HSETNX keeps the entry stored first."""
    batch_id = str(uuid.uuid4())
    assert collector_send(acl_redis, tmp_path, json.dumps({"batch_id": batch_id, "n": 1}))
    node = acl_redis.client(COLLECTOR)
    assert node.hsetnx(outbox.OUTBOX_KEY, batch_id, b"forged") == 0
    assert outbox.outbox_get(acl_redis.client(WORKER), batch_id) == json.dumps(
        {"batch_id": batch_id, "n": 1}
    )


def test_without_a_password_or_with_a_wrong_one_nothing_runs(acl_redis):
    # No retry: redis-py retries a refused login (a ConnectionError) with backoff by default,
    # seconds of waiting that show nothing more.
    once = {"socket_timeout": 5, "retry": Retry(NoBackoff(), 0)}
    anonymous = redis.Redis(port=acl_redis.port, **once)
    with pytest.raises(redis.exceptions.AuthenticationError):
        anonymous.ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=acl_redis.port, username="default", password="", **once).ping()
    wrong = redis.Redis(port=acl_redis.port, username=COLLECTOR, password="x" * 64, **once)
    with pytest.raises(redis.exceptions.AuthenticationError):
        wrong.ping()


def test_the_rendered_aclfile_holds_hashes_not_passwords(acl_redis):
    text = (acl_redis.dir / "users.acl").read_text()
    assert all(password not in text for password in acl_redis.passwords.values())
    assert (acl_redis.dir / "users.acl").stat().st_mode & 0o777 == 0o600
    assert [line.split()[1] for line in text.splitlines()] == ["default", WORKER, COLLECTOR]


@pytest.mark.parametrize(
    ("passwords", "message"),
    [
        ({"VIGIL_REDIS_WORKER_PASSWORD": "a" * 64}, "VIGIL_REDIS_COLLECTOR_PASSWORD: set it"),
        (
            {"VIGIL_REDIS_WORKER_PASSWORD": "short", "VIGIL_REDIS_COLLECTOR_PASSWORD": "b" * 64},
            "VIGIL_REDIS_WORKER_PASSWORD: set it to at least 32 characters",
        ),
        (
            {"VIGIL_REDIS_WORKER_PASSWORD": "a" * 64, "VIGIL_REDIS_COLLECTOR_PASSWORD": "a" * 64},
            "VIGIL_REDIS_COLLECTOR_PASSWORD: must differ",
        ),
        (
            {"VIGIL_REDIS_WORKER_PASSWORD": "a" * 64, "VIGIL_REDIS_COLLECTOR_PASSWORD": "b@" * 32},
            "VIGIL_REDIS_COLLECTOR_PASSWORD: use only letters",
        ),
    ],
)
def test_the_renderer_refuses_a_missing_short_shared_or_url_breaking_password(
    tmp_path, passwords, message
):
    result = acl_render(tmp_path, **passwords)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "users.acl").exists()
