"""Loaded first (`-p tests.testenv`), before Django settings: keep the test servers apart.

Tests get their own embedded PostgreSQL and Redis under `.vigil/test/` (unless DATABASE_URL /
CELERY_BROKER_URL point elsewhere), so a running `make demo` never consumes test batches. Under
pytest-xdist each worker process gets its own folder, `.vigil/test/gw0/` and so on, and so its
own servers: one worker's flush, queues and Redis keys never reach another's tests.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("VIGIL_DATA_DIR", str(ROOT / ".vigil" / "test"))
# Settings write the embedded servers' URLs into os.environ (so subprocesses find them), and
# xdist's controller loads settings too: its workers would inherit the controller's servers.
# The controller notes which URLs were the user's own; a worker drops the others.
_URLS = ("DATABASE_URL", "CELERY_BROKER_URL", "VIGIL_CACHE_URL")
# xdist names its worker in the environment before this plugin loads; the worker inherited the
# controller's environment, so its folder goes below the one set there.
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["VIGIL_DATA_DIR"] = str(Path(os.environ["VIGIL_DATA_DIR"]) / worker)
    given = set(filter(None, os.environ.get("VIGIL_TEST_GIVEN_URLS", "").split(",")))
    for name in _URLS:
        if name not in given:
            os.environ.pop(name, None)
else:
    os.environ["VIGIL_TEST_GIVEN_URLS"] = ",".join(n for n in _URLS if os.environ.get(n))
os.environ.setdefault(
    "VIGIL_RECOVERY_WORKDIR", str(Path(os.environ["VIGIL_DATA_DIR"]) / "recovery")
)
# Settings fail closed (VIGIL_DEBUG defaults to false); the tests run as a developer's
# machine does. Set here, in os.environ, so every Celery worker and demo subprocess a test
# starts (tests/helpers.py subprocess_env copies the environment) gets the same.
os.environ.setdefault("VIGIL_DEBUG", "true")
Path(os.environ["VIGIL_DATA_DIR"]).mkdir(parents=True, exist_ok=True)


def pytest_unconfigure(config) -> None:
    """Stop the embedded servers this test run started (none if they were already up)."""
    from webapp.core import embedded

    if embedded.CACHE in embedded.started_here:
        embedded.redis_stop(embedded.CACHE)
    if embedded.BROKER in embedded.started_here:
        embedded.redis_stop(embedded.BROKER)
    if "postgres" in embedded.started_here:
        from django.db import connections

        connections.close_all()
        embedded.postgres_stop()
