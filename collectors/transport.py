"""Getting batches to the broker: a Celery producer without Django, and a disk spool.

One Celery task per node per batch (`INGEST_TASK`, one positional argument: the batch as JSON
text; job-event batches go to `JOB_EVENTS_TASK` and node-event batches (GPU errors, job log
windows) to `NODE_EVENTS_TASK` the same way), published by name so the agent
needs none of the server's code. Publishing never
blocks on long retries: when the broker does not answer at once the batch goes to the spool,
one fsynced file per batch, and is replayed oldest first, before any newer batch, as soon as
the broker answers again. A spooled batch for another task than `INGEST_TASK` carries the
task name in its file name (`<seq>-<batch id>~<task>.json`), so replay publishes it to the
same task. A spool file is deleted only after its publish succeeded, so a
crash in between sends a batch twice at worst; the server's natural key (gpu, ts) makes that
a no-op. With a Redis broker the batch itself goes to the outbox (collectors/outbox.py) and
the task's argument is its reference, so a worker that dies holding it cannot lose it and
the batch crosses Redis once; other brokers get the batch text, compressed, in the message.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError, OperationalError
from kombu.transport import redis as kombu_redis
from redis.exceptions import RedisError

from collectors import outbox
from collectors.schema import INGEST_QUEUE, INGEST_TASK, batch_sign

log = logging.getLogger("vigil.collector.transport")

# Seconds to wait for the broker before spooling. Long enough for a busy Redis, short enough
# that a 10 s sampling interval keeps its rhythm while the broker is down.
CONNECT_TIMEOUT_S = 2.0
SPOOL_SUFFIX = ".json"
TASK_MARK = "~"  # separates batch id and task name in a spool file name


# The agent runs as root and spooled batches are signed with the node's key: only root may
# list, read or replace them.
SPOOL_DIR_MODE = 0o700
SPOOL_FILE_MODE = 0o600


class Spool:
    """A directory of pending batches; file names sort in the order batches were made."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(mode=SPOOL_DIR_MODE, parents=True, exist_ok=True)
        # mkdir's mode is filtered by the umask, and an existing folder keeps its own.
        os.chmod(self.dir, SPOOL_DIR_MODE)
        self._last = max((self._seq(p) for p in self.files()), default=0)

    @staticmethod
    def _seq(path: Path) -> int:
        try:
            return int(path.name.split("-", 1)[0])
        except ValueError:
            return 0

    def files(self) -> list[Path]:
        """Pending batches, oldest first (temporary files of an interrupted write excluded)."""
        return sorted(p for p in self.dir.iterdir() if p.name.endswith(SPOOL_SUFFIX))

    def __len__(self) -> int:
        return len(self.files())

    @staticmethod
    def task_of(path: Path) -> str:
        """The task a spooled batch is for (files written before tasks were named: ingest)."""
        stem = path.name[: -len(SPOOL_SUFFIX)]
        return stem.split(TASK_MARK, 1)[1] if TASK_MARK in stem else INGEST_TASK

    def put(self, batch_json: str, batch_id: str = "batch", task: str = INGEST_TASK) -> Path:
        """Write one batch durably: temp file, fsync, rename, fsync the directory."""
        # Nanosecond clock, forced to increase: order survives clock steps backwards.
        self._last = max(self._last + 1, time.time_ns())
        mark = "" if task == INGEST_TASK else f"{TASK_MARK}{task}"
        name = f"{self._last:020d}-{batch_id}{mark}{SPOOL_SUFFIX}"
        tmp = self.dir / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SPOOL_FILE_MODE)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(batch_json)
            fh.flush()
            os.fsync(fh.fileno())
        final = self.dir / name
        os.replace(tmp, final)
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return final


class _ReusingRedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, keeping its redis-py clients instead of making one per command.

    kombu 5.x builds a new `redis.Redis` for every publish, delivery and ack
    (`Channel.conn_or_acquire`), and redis-py 8 copies its ~170 response callbacks into a
    case-insensitive dict in every constructor, a noticeable share of the worker's time per
    ingested batch. A client holds no connection of its
    own (each command borrows one from the pool), so one per pool serves every caller.
    """

    def _create_client(self, asynchronous: bool = False):
        pool = self.async_pool if asynchronous else self.pool
        cache = self.__dict__.setdefault("_vigil_clients", {})
        client = cache.get(asynchronous)
        if client is None or client.connection_pool is not pool:
            client = cache[asynchronous] = super()._create_client(asynchronous)
        return client


def reuse_redis_clients() -> None:
    """Make every Celery/kombu Redis connection of this process use `_ReusingRedisChannel`.

    The transport is chosen from the URL scheme, so the class attribute that names its
    channel class is the one place to plug it in. Idempotent; the collector (make_celery) and
    the server's Celery app (webapp/celery.py) both call it.
    """
    kombu_redis.Transport.Channel = _ReusingRedisChannel


# Batches that travel inside the message (brokers other than Redis) are compressed with
# Celery's `compression`, Zstandard as kombu registers it (workers decompress by the
# message's content type).
COMPRESSION = "zstd"


def make_celery(broker_url: str) -> Celery:
    """A Celery app that can only publish: no Django, no result backend, no retries."""
    reuse_redis_clients()
    app = Celery("vigil-collector", broker=broker_url, set_as_current=False)
    app.conf.update(
        broker_connection_timeout=CONNECT_TIMEOUT_S,
        broker_connection_retry=False,
        broker_connection_max_retries=0,
        task_publish_retry=False,
        task_ignore_result=True,
        result_backend=None,
        broker_transport_options={
            "socket_connect_timeout": CONNECT_TIMEOUT_S,
            "socket_timeout": CONNECT_TIMEOUT_S,
            "max_retries": 0,
        },
    )
    return app


class Transport:
    """Publish batches, spooling them while the broker is unreachable."""

    def __init__(self, broker_url: str, spool_dir: Path) -> None:
        self.broker_url = broker_url
        self.app = make_celery(broker_url)
        self.spool = Spool(spool_dir)
        self.sent = 0
        self.spooled = 0
        self._down = False
        self._producer: Any = None
        # Redis brokers: a copy of each batch stays in the outbox until a worker stored it.
        self._outbox = outbox.client_for(broker_url)
        # What to declare before publishing: nothing on Redis, where a publish is one LPUSH on
        # the queue's list, which works whether or not the queue was declared (workers declare
        # it and its binding when they start consuming). Declaring would need LLEN and SADD,
        # which the collector's broker user may not run (deploy/redis/users.acl.template).
        # Other brokers get Celery's default: RabbitMQ drops a message to an undeclared queue.
        self._declare: list | None = [] if self._outbox is not None else None
        pending = len(self.spool)
        if pending:
            log.info("%d spooled batches in %s will be sent first", pending, self.spool.dir)

    def _publish(self, batch_json: str, task: str = INGEST_TASK) -> bool:
        """Publish a signed batch (the outbox entry and the message carry no token)."""
        try:
            if self._producer is None:
                # Our own connection instead of Celery's pool: after a failure the pool keeps
                # the dead connection (and force_close_all() closes the pool for good).
                # The URL is passed here, not only to Celery(): Celery's conf prefers the
                # CELERY_BROKER_URL environment variable over the `broker` argument.
                conn = self.app.connection_for_write(url=self.broker_url)
                self._producer = self.app.amqp.Producer(conn)
            batch_id = outbox.batch_id_of(batch_json) if self._outbox is not None else None
            if batch_id is not None:
                # The batch waits in the outbox; the message carries its reference.
                outbox.outbox_put(self._outbox, batch_id, task, batch_json)
                args, compression = [outbox.reference(batch_id)], None
            else:
                args, compression = [batch_json], COMPRESSION
            self.app.send_task(
                task,
                args=args,
                queue=INGEST_QUEUE,
                compression=compression,
                producer=self._producer,
                retry=False,
                ignore_result=True,
                declare=self._declare,
            )
        except (OperationalError, KombuError, OSError, ConnectionError, RedisError) as exc:
            if not self._down:
                log.warning("broker unreachable (%s); spooling to %s", exc, self.spool.dir)
            self._down = True
            self._drop_connection()
            return False
        if self._down:
            log.warning("broker answers again")
            self._down = False
        self.sent += 1
        return True

    def _drop_connection(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.connection.release()
            except Exception as exc:  # noqa: BLE001 (best effort: the next publish redials)
                log.debug("closing broker connection: %s", exc)

    def flush(self) -> int:
        """Send spooled batches oldest first; stop at the first failure. Returns how many left."""
        files = self.spool.files()
        for path in files:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            # Files spooled before batches were signed still hold their token.
            if not self._publish(batch_sign(text), Spool.task_of(path)):
                return len(self.spool)
            path.unlink()
        return 0

    def send(self, batch_json: str, batch_id: str = "batch", task: str = INGEST_TASK) -> bool:
        """Publish to `task` now (True) or keep it in the spool for later (False); never raises.

        Every task goes to the `ingest` queue: telemetry and job events share its workers.
        The batch is signed with the token it carries (schema.batch_sign), which is removed:
        neither the broker nor the spool ever holds it.
        """
        batch_json = batch_sign(batch_json)
        if self.spool.files() and self.flush():
            self.spool.put(batch_json, batch_id, task)
            self.spooled += 1
            return False
        if self._publish(batch_json, task):
            return True
        self.spool.put(batch_json, batch_id, task)
        self.spooled += 1
        return False

    def close(self) -> None:
        self._drop_connection()
