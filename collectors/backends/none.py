"""No GPU source: for a controller or login host that only runs a job watcher."""

from __future__ import annotations

from collectors.backends.base import NodeReading, Source


class NoBackend:
    """Reads nothing; the agent loop still runs its job watchers every round."""

    source: Source = "nvml"  # never used: no readings, no telemetry batches

    def read(self, ts: float) -> list[NodeReading]:
        return []

    def close(self) -> None:
        pass
