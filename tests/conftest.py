"""Shared fixtures: personas, a registered node with its token, clean state between tests.

Everything is real: the embedded PostgreSQL and Redis started by webapp/core/embedded.py (or the
servers DATABASE_URL / CELERY_BROKER_URL name), real Celery workers as subprocesses.
"""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps
from django.core.cache import cache
from django.db import connection
from django.test import Client

from tests import factory
from tests.helpers import WorkerProcess, database_url
from webapp.fleet import services as fleet_services
from webapp.jobs import services as jobs_services
from webapp.telemetry import partitions

SAMPLE_TABLES = (
    "telemetry_gpusample",
    "telemetry_nodesample",
    "telemetry_gpurollup1m",
    "telemetry_gpusamplepacked",
    "telemetry_gpurollup1h",
)


@pytest.fixture(autouse=True)
def _forget_process_caches():
    """Caches (partitions, tokens, GPU ids, computed pages) must not outlive a test."""
    yield
    partitions.known_forget()
    jobs_services.type_rules_forget()
    fleet_services.caches_clear()
    cache.clear()  # the shared Redis cache outlives tests (and test runs)


# The rows data migrations make, which every site has: a transactional test ends with a flush
# that empties them with everything else, and a later test in the process would find none.
MIGRATION_DATA = (
    ("webapp.jobs.migrations.0003_default_type_rules", "add_rules"),
    ("webapp.teams.migrations.0002_operators_group", "add_group"),
    ("webapp.alerts.migrations.0002_default_rules", "create"),
)
_DB_FIXTURES = {"db", "transactional_db", "live_server", "django_db_setup"}


@pytest.fixture(autouse=True)
def _migration_data(request, django_db_blocker):
    """Before each database test, the migrations' rows are there (made again, idempotently,
    if a flush took them)."""
    if _DB_FIXTURES.isdisjoint(request.fixturenames) and not request.node.get_closest_marker(
        "django_db"
    ):
        return
    request.getfixturevalue("django_db_setup")
    with django_db_blocker.unblock():
        for module, function in MIGRATION_DATA:
            getattr(importlib.import_module(module), function)(django_apps, None)


@pytest.fixture
def transactional_db(transactional_db):
    """Committed data, visible to worker subprocesses; sample tables emptied afterwards.

    pytest-django's flush only knows managed tables, so the partitioned ones are truncated here.
    """
    yield transactional_db
    with connection.cursor() as cur:
        cur.execute(f"TRUNCATE {', '.join(SAMPLE_TABLES)}")


@pytest.fixture
def node_token(db) -> tuple[str, str, str]:
    """(cluster, hostname, token) of a node that may send batches."""
    token = fleet_services.node_token_issue("testcluster", "gpu-node-01")
    return "testcluster", "gpu-node-01", token


@pytest.fixture
def committed_node_token(transactional_db) -> tuple[str, str, str]:
    token = fleet_services.node_token_issue("testcluster", "gpu-node-01")
    return "testcluster", "gpu-node-01", token


# Personas (tests/factory.py): an operator who may see everything; the owner of the fleet
# fixtures' jobs (they run as scheduler user "alice"), a teammate in the team a rule gives
# alice's jobs, and an outsider who is logged in but in no team; and an anonymous visitor. Each
# has its own client, so one test can compare what they see.
PASSWORD = factory.PASSWORD
OWNER = factory.ENGINEER


@pytest.fixture
def operator(db):
    return factory.operator_make()


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def owner(db):
    return factory.engineer_make(OWNER)


@pytest.fixture
def teammate(db, owner):
    return factory.teammate_make(of=OWNER)


@pytest.fixture
def outsider(db):
    return factory.outsider_make()


@pytest.fixture
def owner_client(owner) -> Client:
    return factory.client_for(owner)


@pytest.fixture
def teammate_client(teammate) -> Client:
    return factory.client_for(teammate)


@pytest.fixture
def outsider_client(outsider) -> Client:
    return factory.client_for(outsider)


@pytest.fixture
def broker():
    """The real Redis broker, emptied before the test."""
    import redis
    from django.conf import settings

    url = settings.CELERY_BROKER_URL
    if url.startswith("redis+socket://"):
        r = redis.Redis(unix_socket_path=url.removeprefix("redis+socket://"))
    else:
        r = redis.Redis.from_url(url)
    r.flushdb()
    yield r
    r.flushdb()


@pytest.fixture
def worker_factory(transactional_db, broker, tmp_path):
    """Start real `celery worker` subprocesses against the test database; stop them after."""
    started: list[WorkerProcess] = []

    def start(**kwargs) -> WorkerProcess:
        w = WorkerProcess(database_url(), tmp_path / f"worker{len(started)}.log", **kwargs)
        w.start()
        started.append(w)
        return w

    yield start
    # The test has read what it needed: killed at once (a warm shutdown takes a second or two
    # per worker); stop() then only closes the log. A test that needs a graceful stop calls
    # stop() itself.
    for w in started:
        w.kill()
        w.stop()
