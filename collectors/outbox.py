"""The outbox: a copy of every published batch in Redis until a worker has stored it.

Why: kombu's Redis transport takes a message off the queue with BRPOP and only then records
it as unacknowledged. A worker killed between the two (SIGKILL, OOM kill, power loss) loses
the message for good (celery/kombu#1733 describes the same window at shutdown). The outbox
closes that hole at the application level:

1. the collector writes the batch to the hash `vigil:outbox` (batch id -> task, time, JSON)
   just before publishing it;
2. the worker removes the entry once the task has finished (stored, or refused for good);
3. a beat task re-publishes entries older than the broker's visibility timeout plus a margin.
   A re-published batch that was in fact stored is a no-op (natural keys), so at-least-once
   becomes "nothing the broker accepted is lost".

Only for Redis brokers; with RabbitMQ (real consumer acknowledgements) it is not needed and
these functions do nothing. Shared by the collector and the server, so it imports nothing
of `webapp`.
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

import redis

OUTBOX_KEY = "vigil:outbox"

# The collector writes "batch_id" among the first keys; a regex over the head of the text is
# far cheaper than parsing a 100 KB batch again.
_BATCH_ID = re.compile(r'"batch_id"\s*:\s*"([0-9a-fA-F-]{32,36})"')


def batch_id_of(text: str) -> str | None:
    """The batch id of a wire batch (JSON text), or None if it has none near the start."""
    m = _BATCH_ID.search(text, 0, 400)
    return m.group(1) if m else None


def client_for(broker_url: str) -> redis.Redis | None:
    """A Redis client for the broker URL (redis://, rediss://, redis+socket://), else None."""
    if broker_url.startswith("redis+socket://"):
        path = urlsplit(broker_url).path
        return redis.Redis(unix_socket_path=path, socket_timeout=5, socket_connect_timeout=2)
    if broker_url.startswith(("redis://", "rediss://")):
        return redis.Redis.from_url(broker_url, socket_timeout=5, socket_connect_timeout=2)
    return None


def outbox_put(client: redis.Redis, batch_id: str, task: str, text: str) -> None:
    client.hset(OUTBOX_KEY, batch_id, f"{task}\n{time.time():.3f}\n{text}")


def outbox_done(client: redis.Redis, batch_id: str) -> None:
    client.hdel(OUTBOX_KEY, batch_id)


def outbox_due(
    client: redis.Redis, older_than_s: float, now: float | None = None
) -> list[tuple[str, str, str]]:
    """(batch id, task, text) of the entries published more than `older_than_s` ago."""
    now = time.time() if now is None else now
    due = []
    for key, value in client.hscan_iter(OUTBOX_KEY, count=500):
        task, at, text = value.decode().split("\n", 2)
        if now - float(at) >= older_than_s:
            due.append((key.decode(), task, text))
    return due


def outbox_size(client: redis.Redis) -> int:
    return int(client.hlen(OUTBOX_KEY))
