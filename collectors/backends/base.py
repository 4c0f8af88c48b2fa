"""The interface between the agent loop and a telemetry source.

A backend answers one question per round: "what do the node(s) you watch look like at `ts`?"
It returns plain wire rows (lists in `schema.GPU_FIELDS` / `schema.NODE_FIELDS` order) so the
agent never re-shapes data; building dataclasses per GPU per second would cost more CPU than
the sampling itself (see bench/collector.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from collectors.schema import GPU_FIELD_NAMES, NODE_FIELD_NAMES, GpuInfo

Source = Literal["nvml", "dcgm", "simulated", "replay"]

# Position of each field in a wire row: GPU rows start with (index, ts), node rows with (ts).
GPU_POS: dict[str, int] = {name: i + 2 for i, name in enumerate(GPU_FIELD_NAMES)}
NODE_POS: dict[str, int] = {name: i + 1 for i, name in enumerate(NODE_FIELD_NAMES)}


def empty_gpu_row(index: int, ts: float) -> list[Any]:
    """A wire GPU row with every metric null ("not supported / not read")."""
    return [index, ts, *([None] * len(GPU_FIELD_NAMES))]


def empty_node_row(ts: float) -> list[Any]:
    return [ts, *([None] * len(NODE_FIELD_NAMES))]


@dataclass
class NodeReading:
    """One node at one timestamp: its GPUs (as registered) and the wire rows read now."""

    cluster: str
    node: str
    gpus: list[GpuInfo]
    gpu_rows: list[list[Any]] = field(default_factory=list)
    node_row: list[Any] | None = None


class BackendError(RuntimeError):
    """The source cannot run at all (no driver, exporter unreachable at start...)."""


class Backend(Protocol):
    """A telemetry source watching one node (nvml, dcgm) or many (simulated)."""

    source: Source

    def read(self, ts: float) -> list[NodeReading]:
        """Sample every watched node now, stamping rows with `ts` (epoch seconds)."""
        ...

    def close(self) -> None:
        """Release the library / sockets; the backend is unusable afterwards."""
        ...
