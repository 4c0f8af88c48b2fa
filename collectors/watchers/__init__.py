"""Scheduler watchers: turn what a scheduler says about jobs into job-event batches.

A watcher is polled by the agent loop (`poll(ts)`) and returns finished `JobEventBatch` JSON
texts, which the agent hands to the transport for `schema.JOB_EVENTS_TASK`.
"""

from __future__ import annotations

from typing import Protocol


class JobWatcher(Protocol):
    def poll(self, ts: float) -> list[tuple[str, str]]:
        """(batch_id, JobEventBatch JSON text) for the job changes seen since the last poll."""
        ...

    def commit(self) -> None:
        """The batches of the last poll are with the transport: persist what was reported."""
        ...
