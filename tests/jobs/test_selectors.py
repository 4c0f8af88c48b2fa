"""Reads of jobs that guard a trust boundary: which jobs a node may speak for."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.jobs.conftest import event
from webapp.fleet.models import Node
from webapp.jobs.selectors import jobs_allocated_on
from webapp.jobs.services import job_events_ingest


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def test_jobs_allocated_on_a_node_at_any_time_or_at_a_moment(sender, t0):
    on01 = [{"node": "gpu-node-01", "gpu_indices": [0]}]
    on02 = [{"node": "gpu-node-02", "gpu_indices": [1]}]
    job_events_ingest(
        sender.raw(
            event("ran", "started", t0, allocation=on01),
            event("ran", "ended", t0 + 100, end_ts=t0 + 100, state="COMPLETED"),
            event("runs", "started", t0 + 50, allocation=on01),
            event("elsewhere", "started", t0, allocation=on02),
            event("queued", "submitted", t0),
        )
    )
    node01 = Node.objects.get(hostname="gpu-node-01").id
    asked = ["ran", "runs", "elsewhere", "queued", "unknown"]

    assert jobs_allocated_on(node01, asked) == {"ran", "runs"}
    assert jobs_allocated_on(node01, asked, at=at(t0 + 10)) == {"ran"}
    assert jobs_allocated_on(node01, asked, at=at(t0 + 60)) == {"ran", "runs"}
    assert jobs_allocated_on(node01, asked, at=at(t0 + 100)) == {"runs"}  # ended by then
    assert jobs_allocated_on(node01, []) == set()
