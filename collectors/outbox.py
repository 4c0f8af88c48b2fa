"""The outbox: every published batch waits in Redis until a worker has finished it.

Why: kombu's Redis transport takes a message off the queue with BRPOP and only then records
it as unacknowledged. A worker killed between the two (SIGKILL, OOM kill, power loss) loses
the message for good (celery/kombu#1733 describes the same window at shutdown). The outbox
closes that hole at the application level, and it carries the batch itself, so the batch
crosses Redis once instead of in every copy of the message:

1. the collector stores the batch (Zstandard level 1) in the hash `vigil:outbox` under its batch
   id, and "<task>\n<batch id>" with the publish time in the sorted set
   `vigil:outbox:since`, in one transaction;
2. it publishes the task with a reference, `outbox:<batch id>`, as the only argument: a
   message of a few hundred bytes, where the batch text would be about 100 KB in every copy
   (the queue, kombu's unacknowledged record, each redelivery);
3. the worker reads the batch by its reference and removes the entry once the task has
   finished (stored, or refused for good). A reference whose entry is gone was finished
   before (a redelivery after success) and is a no-op;
4. a beat task re-publishes the references of entries older than the broker's visibility
   timeout plus a margin, reading only the sorted set (never a payload). A batch
   re-published after it was stored is a no-op (natural keys), so at-least-once becomes
   "nothing the broker accepted is lost".

Only for Redis brokers; with RabbitMQ (real consumer acknowledgements) there is no outbox and
the batch text travels in the message. Tasks accept both forms. Shared by the collector and
the server, so it imports nothing of `webapp`.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

import redis

from collectors.schema import (
    MAX_BATCH_BYTES,
    MAX_BATCH_COMPRESSED_BYTES,
    OversizedBatch,
    UnreadableBatch,
)

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

OUTBOX_KEY = "vigil:outbox"  # batch id -> zstd(batch JSON text)
SINCE_KEY = "vigil:outbox:since"  # "<task>\n<batch id>" -> when last (re)published, epoch s
REFERENCE_PREFIX = "outbox:"

# The collector writes "batch_id" among the first keys; a regex over the head of the text is
# far cheaper than parsing a 100 KB batch again.
_BATCH_ID = re.compile(r'"batch_id"\s*:\s*"([0-9a-fA-F-]{32,36})"')
_REFERENCE = re.compile(r"outbox:([0-9a-fA-F-]{32,36})")


def batch_id_of(text: str) -> str | None:
    """The batch id of a wire batch (JSON text, signed or not), or None if it has none near
    the start."""
    m = _BATCH_ID.search(text, 0, 500)
    return m.group(1) if m else None


def reference(batch_id: str) -> str:
    """The task argument that stands for the batch stored under `batch_id`."""
    return f"{REFERENCE_PREFIX}{batch_id}"


def reference_id(arg: str) -> str | None:
    """The batch id if `arg` is an outbox reference; None if it is anything else (a batch)."""
    m = _REFERENCE.fullmatch(arg) if arg.startswith(REFERENCE_PREFIX) else None
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
    """Store a batch for `task`, compressed with Zstandard level 1 (smaller and faster both
    ways than zlib level 1 on a batch)."""
    pipe = client.pipeline(transaction=True)
    # HSETNX, not HSET: every node may write to the one hash (deploy/redis/README.md), and
    # must not be able to replace an entry another node stored. A re-sent batch has the same
    # id and text, so keeping the first copy loses nothing.
    pipe.hsetnx(OUTBOX_KEY, batch_id, zstd.compress(text.encode(), level=1))
    pipe.zadd(SINCE_KEY, {_since_member(task, batch_id): time.time()})
    pipe.execute()


def outbox_get(client: redis.Redis, batch_id: str) -> str | None:
    """The batch JSON text stored under `batch_id`, or None if there is no entry."""
    return outbox_get_many(client, [batch_id])[0]


def outbox_get_many(
    client: redis.Redis,
    batch_ids: list[str],
    max_bytes: int = MAX_BATCH_BYTES,
    max_compressed_bytes: int = MAX_BATCH_COMPRESSED_BYTES,
) -> list[str | None]:
    """`outbox_get` of several batches in one round trip, in the order asked. An entry over
    either size limit comes back as an `OversizedBatch`, one that cannot be read back as an
    `UnreadableBatch` (every parse refuses both), and none is decompressed past `max_bytes`."""
    if not batch_ids:
        return []
    packed = client.hmget(OUTBOX_KEY, batch_ids)
    return [
        None if p is None else _unpacked(p, batch_id, max_bytes, max_compressed_bytes)
        for batch_id, p in zip(batch_ids, packed, strict=True)
    ]


def _unpacked(packed: bytes, batch_id: str, max_bytes: int, max_compressed_bytes: int) -> str:
    if len(packed) > max_compressed_bytes:
        return OversizedBatch(
            f"compressed batch of {len(packed)} bytes exceeds {max_compressed_bytes}",
            len(packed),
        )
    # Nodes write the outbox: an entry may be anything, and must fail alone, as a refusal.
    try:
        text = decompress_bounded(zstd.ZstdDecompressor(), packed, max_bytes)
    except (zstd.ZstdError, ValueError) as exc:
        return UnreadableBatch(
            f"outbox entry of {len(packed)} bytes: not a Zstandard stream ({exc})", batch_id
        )
    if text is None:
        return OversizedBatch(f"batch decompresses past {max_bytes} bytes", max_bytes + 1)
    try:
        return text.decode()
    except UnicodeDecodeError as exc:
        return UnreadableBatch(f"outbox entry: not UTF-8 text ({exc})", batch_id)


def decompress_bounded(decompressor: Any, packed: bytes, max_bytes: int) -> bytes | None:
    """`packed` decompressed by a fresh `decompressor` (zlib, bz2, lzma or Zstandard: each
    takes `max_length` and has `eof`), or None if it holds more than `max_bytes`: at most
    `max_bytes + 1` bytes are ever produced, so a bomb costs no more memory than the cap.
    ValueError if the data ends before its stream does."""
    out = decompressor.decompress(packed, max_bytes + 1)
    if len(out) > max_bytes:
        return None
    if not decompressor.eof:
        raise ValueError("truncated compressed data")
    return out


def outbox_done(
    client: redis.Redis, task: str, batch_ids: Collection[str], *also_keys: str
) -> None:
    """Remove the entries of finished batches of `task`, and their fields in the hashes
    `also_keys` (the worker's delivery counts), all in one transaction."""
    if not batch_ids:
        return
    pipe = client.pipeline(transaction=True)
    for key in (OUTBOX_KEY, *also_keys):
        pipe.hdel(key, *batch_ids)
    pipe.zrem(SINCE_KEY, *(_since_member(task, batch_id) for batch_id in batch_ids))
    pipe.execute()


def outbox_due(
    client: redis.Redis, older_than_s: float, now: float | None = None, limit: int = 10_000
) -> list[tuple[str, str]]:
    """(batch id, task) of up to `limit` entries last published more than `older_than_s` ago,
    oldest first. Restarts their clock: the caller re-publishes them now. An entry finished
    meanwhile stays finished (a reference without an entry is a no-op for the worker)."""
    now = time.time() if now is None else now
    members = client.zrangebyscore(SINCE_KEY, "-inf", now - older_than_s, start=0, num=limit)
    if not members:
        return []
    client.zadd(SINCE_KEY, dict.fromkeys(members, now), xx=True)
    due = []
    for member in members:
        task, _, batch_id = member.decode().partition("\n")
        due.append((batch_id, task))
    return due


def _since_member(task: str, batch_id: str) -> str:
    return f"{task}\n{batch_id}"
