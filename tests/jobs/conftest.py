"""Job-event fixtures: a cluster with two GPU nodes (GPUs registered) and a scheduler token.

`gpu-node-01` (GPUs 0-7 registered through the fleet service) and `gpu-node-02` (known to the
fleet, GPUs not registered yet) receive allocations; `scheduler-k8s` is the per-scheduler
token entry that sends the events.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest

from tests.factory import cluster_make, job_event_batch
from webapp.jobs import services as job_services

CLUSTER = "testcluster"
SCHEDULER = "scheduler-k8s"


@dataclass
class Sender:
    cluster: str
    node: str
    token: str

    def batch(self, *events: dict, **overrides) -> dict:
        """A JobEventBatch (as a dict) carrying `events`."""
        return job_event_batch(self.cluster, self.node, self.token, *events, **overrides)

    def raw(self, *events: dict, **overrides) -> str:
        return json.dumps(self.batch(*events, **overrides))


def event(job_id: str, kind: str, ts: float, **fields) -> dict:
    return {"job_id": job_id, "kind": kind, "ts": ts, **fields}


def _fleet() -> Sender:
    made = cluster_make(
        CLUSTER,
        {SCHEDULER: 0, "gpu-node-01": 8, "gpu-node-02": 0},
        scheduler=SCHEDULER,
        uuid_format="GPU-node01-{index:02d}",  # gpu-node-01's are the only GPUs registered
    )
    return Sender(CLUSTER, SCHEDULER, made.tokens[SCHEDULER])


@pytest.fixture(autouse=True)
def _fresh_type_rules():
    """The type-rule cache must not carry rules across tests (each test has its own rows)."""
    job_services.type_rules_forget()
    yield
    job_services.type_rules_forget()


@pytest.fixture
def sender(db) -> Sender:
    return _fleet()


@pytest.fixture
def committed_sender(transactional_db) -> Sender:
    """Committed (visible to a worker subprocess). transactional_db flushes the tables
    afterwards, default type rules included, so they are put back for the next test."""
    yield _fleet()


@pytest.fixture
def t0() -> float:
    """A recent whole second (events may not be in the future)."""
    return float(int(time.time()) - 3600)


@pytest.fixture
def default_rules(db) -> None:
    """The default type rules. The data migration adds them, but any earlier test that
    committed data (transactional_db) flushed them away."""
    job_services.type_rules_restore_defaults()
