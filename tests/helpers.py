"""Test helpers: wire batches, real worker subprocesses, waiting for outcomes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from collectors.schema import GPU_FIELDS, NODE_FIELDS

ROOT = Path(__file__).resolve().parent.parent


def gpu_row(index: int, ts: float, util: float = 50.0, power: float = 300.0) -> list:
    """A plausible wide GPU row (wire order), with a few values set and the rest null."""
    values: dict[str, float | int | None] = {m.name: None for m in GPU_FIELDS}
    values.update(
        gpu_util=util,
        mem_copy_util=util / 3,
        sm_active=util / 100 * 0.8,
        fb_used_bytes=40 * 2**30,
        fb_total_bytes=80 * 2**30,
        power_w=power,
        energy_mj=int(ts * 1000) % 10**12,
        gpu_temp_c=55.0,
        sm_clock_mhz=1980.0,
    )
    return [index, ts, *values.values()]


def node_row(ts: float) -> list:
    values: dict[str, float | int | None] = {m.name: None for m in NODE_FIELDS}
    values.update(cpu_util=20.0, mem_util=30.0, gpu_count=8)
    return [ts, *values.values()]


def envelope(cluster: str, node: str, token: str) -> dict:
    """The fields every wire batch starts with: version, a new batch id, who sends it, when."""
    return {
        "v": 1,
        "batch_id": str(uuid.uuid4()),
        "cluster": cluster,
        "node": node,
        "token": token,
        "sent_at": time.time(),
    }


def make_batch(
    cluster: str,
    node: str,
    token: str,
    *,
    t0: float | None = None,
    intervals: int = 1,
    step_s: float = 10.0,
    gpus: int = 8,
    uuid_prefix: str | None = None,
    **overrides,
) -> dict:
    """A valid wire batch (as a dict): `gpus` GPUs x `intervals` timestamps from t0."""
    t0 = time.time() - intervals * step_s if t0 is None else t0
    prefix = uuid_prefix or f"GPU-{node}"
    batch = {
        **envelope(cluster, node, token),
        "source": "simulated",
        "gpus": [
            {"index": i, "uuid": f"{prefix}-{i:02d}", "name": "NVIDIA H100 80GB HBM3"}
            for i in range(gpus)
        ],
        "samples": [gpu_row(i, t0 + k * step_s) for k in range(intervals) for i in range(gpus)],
        "node_samples": [node_row(t0 + k * step_s) for k in range(intervals)],
    }
    batch.update(overrides)
    return batch


def wait_for(predicate: Callable[[], object], timeout: float = 30, interval: float = 0.1):
    """Poll until predicate() is truthy; return its value or fail with the last value."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")


def database_url() -> str:
    """URL of the database the tests use (pytest-django's test database), for subprocesses."""
    from django.db import connection

    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))


def subprocess_env(db_url: str, **extra: str) -> dict[str, str]:
    from django.conf import settings

    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        DJANGO_SETTINGS_MODULE="webapp.settings",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class WorkerProcess:
    """A real `celery worker` in a subprocess, consuming the ingest and default queues.

    Prefork by default, as deployed: the parent's event loop stays free to record each
    delivered message as unacknowledged at once. With the solo pool a delivery can sit
    unread in the socket for a whole task, and a SIGKILL then loses it (kombu's Redis
    transport pops with BRPOP before it records the message).
    """

    def __init__(
        self,
        db_url: str,
        logfile: Path,
        *,
        pool: str = "prefork",
        concurrency: int = 1,
        visibility_timeout_s: int = 5,
        queues: str = "ingest,default",
        env: dict[str, str] | None = None,
    ) -> None:
        self.db_url = db_url
        self.logfile = logfile
        self.pool = pool
        self.concurrency = concurrency
        self.visibility_timeout_s = visibility_timeout_s
        self.queues = queues
        self.env = env or {}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        env = subprocess_env(
            self.db_url,
            VIGIL_BROKER_VISIBILITY_TIMEOUT=str(self.visibility_timeout_s),
            VIGIL_BROKER_RESTORE_INTERVAL_S="1",
            **self.env,
        )
        self._log = open(self.logfile, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "webapp",
                "worker",
                "-Q",
                self.queues,
                "-P",
                self.pool,
                "-c",
                str(self.concurrency),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "INFO",
                "-n",
                f"test-{uuid.uuid4().hex[:8]}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self._ready, timeout=timeout, interval=0.2)

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"worker exited early:\n{self.log()}")
        return " ready." in self.log()

    def log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL the whole worker (and its pool children): no chance to ack or clean up."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "_log", None):
            self._log.close()


def batch_json(batch: dict) -> str:
    return json.dumps(batch)


def send_signed(name: str, args: list[str], **options) -> None:
    """Publish a batch task by name as a collector's transport does: the batch signed with the
    token it carries (collectors/schema.py `batch_sign`), which never crosses the broker."""
    from collectors.schema import batch_sign
    from webapp.celery import app

    app.send_task(name, args=[batch_sign(args[0]), *args[1:]], **options)
