"""The circuit breaker: its rules over plain data, and over the failures on record (real
PostgreSQL, failures diagnosed through the services)."""

from __future__ import annotations

import time

import pytest

from webapp.failures.breaker import breaker_apply
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose


def _now() -> float:
    return float(int(time.time()))


def test_breaker_rules_over_plain_data():
    assert breaker_apply("restart", "n1", []) == ("restart", "")
    assert breaker_apply("restart", "n1", ["n1"])[0] == "cordon_restart"
    assert breaker_apply("retry", "n1", ["n2", "n3"])[0] == "notify"
    # Hardware faults on different nodes are independent: no change.
    assert breaker_apply("cordon_restart", "n1", ["n2"]) == ("cordon_restart", "")
    assert breaker_apply("restart", "n1", [], restarts_in_a_row=3)[0] == "notify"


def _cuda_fault_job(fleet, job_id: str, node: str, end: float) -> FailureEvent:
    fleet.run_job(job_id, end - 3600, None, nodes=(node,))
    node_events_ingest(
        fleet.node_batch(
            node,
            log_windows=[
                {
                    "job_id": job_id,
                    "ts": end - 5,
                    "path": f"/logs/{job_id}.err",
                    "first_line_no": 10,
                    "lines": [
                        f"{node}: RuntimeError: CUDA error: an illegal memory access was "
                        "encountered"
                    ],
                }
            ],
        )
    )
    fleet.run_job(job_id, end - 3600, end, nodes=(node,))
    failure = FailureEvent.objects.get(job__scheduler_id=job_id)
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    return failure


@pytest.mark.django_db
def test_circuit_breaker_same_node_twice_cordons_and_other_nodes_notify(fleet):
    now = _now()
    first = _cuda_fault_job(fleet, "500", "gpu-node-01", now - 5 * 3600)
    assert (first.cause, first.action, first.breaker) == ("cuda_fault", "restart", "")
    second = _cuda_fault_job(fleet, "501", "gpu-node-01", now - 3 * 3600)
    assert second.action == "cordon_restart"
    assert second.default_action == "restart"
    assert "gpu-node-01 twice within 24 h" in second.breaker
    third = _cuda_fault_job(fleet, "502", "gpu-node-02", now - 1 * 3600)
    assert third.action == "notify"
    assert "other nodes" in third.breaker


@pytest.mark.django_db
def test_breaker_forgets_after_24_hours(fleet):
    now = _now()
    _cuda_fault_job(fleet, "600", "gpu-node-01", now - 30 * 3600)
    later = _cuda_fault_job(fleet, "601", "gpu-node-01", now - 3600)
    assert later.action == "restart"
