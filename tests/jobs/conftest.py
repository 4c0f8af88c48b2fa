"""Job-event fixtures: a cluster with two GPU nodes (GPUs registered) and a scheduler token.

`gpu-node-01` (GPUs 0-7 registered through the fleet service) and `gpu-node-02` (known to the
fleet, GPUs not registered yet) receive allocations; `scheduler-k8s` is the per-scheduler
token entry that sends the events.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import pytest

from collectors.schema import GpuInfo
from webapp.fleet import services as fleet_services
from webapp.jobs import services as job_services

CLUSTER = "testcluster"


@dataclass
class Sender:
    cluster: str
    node: str
    token: str

    def batch(self, *events: dict, **overrides) -> dict:
        """A JobEventBatch (as a dict) carrying `events`."""
        batch = {
            "v": 1,
            "batch_id": str(uuid.uuid4()),
            "cluster": self.cluster,
            "node": self.node,
            "token": self.token,
            "sent_at": time.time(),
            "source": "slurm",
            "events": list(events),
        }
        batch.update(overrides)
        return batch

    def raw(self, *events: dict, **overrides) -> str:
        return json.dumps(self.batch(*events, **overrides))


def event(job_id: str, kind: str, ts: float, **fields) -> dict:
    return {"job_id": job_id, "kind": kind, "ts": ts, **fields}


def _fleet() -> Sender:
    token = fleet_services.node_token_issue(CLUSTER, "scheduler-k8s")
    fleet_services.node_scheduler_grant(CLUSTER, "scheduler-k8s")
    node1_token = fleet_services.node_token_issue(CLUSTER, "gpu-node-01")
    fleet_services.node_token_issue(CLUSTER, "gpu-node-02")
    node = fleet_services.node_authenticate(CLUSTER, "gpu-node-01", node1_token)
    fleet_services.gpus_register(
        node.id, [GpuInfo(index=i, uuid=f"GPU-node01-{i:02d}", name="A100") for i in range(8)]
    )
    return Sender(CLUSTER, "scheduler-k8s", token)


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
