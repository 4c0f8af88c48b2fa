"""Watchers: what the agent reports besides samples, polled once per round.

Scheduler watchers (slurm.py, the simulator's) turn what a scheduler says about jobs into
`JobEventBatch` JSON texts, which the agent hands to the transport for
`schema.JOB_EVENTS_TASK`. Node-event watchers (nodeevents.py, with the sources xid.py,
kernel.py, counters.py and joblogs.py) follow the same protocol and produce `NodeEventBatch`
texts for `schema.NODE_EVENTS_TASK`.
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
