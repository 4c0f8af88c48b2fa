"""Node events: GPU errors and job log windows, sent as one `NodeEventBatch` per node per round.

Event sources (collectors/watchers: xid.py, kernel.py, counters.py, joblogs.py, and the
simulator's failure injection) each return what they saw since the last poll as `NodeEvents`
(one node's GPU error events and log windows). `NodeEventWatcher` merges the sources of a
round, coalesces identical GPU events and builds one batch per node that has something to
send; the agent hands the batches to the transport for `schema.NODE_EVENTS_TASK`, then calls
`commit()`, which lets each source persist how far it has read (a kernel log offset, a job log
offset): what was reported before a crash is at worst sent again, never lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from collectors.backends.base import NodeReading
from collectors.schema import (
    MAX_NODE_EVENTS_PER_BATCH,
    SCHEMA_VERSION,
    GpuErrorEventIn,
    LogWindowIn,
    NodeEventBatch,
    new_batch_id,
)

log = logging.getLogger("vigil.collector.events")

# docs/failure-taxonomy.md "Ordering" step 2 and schema.GpuErrorEventIn: identical events within
# 5 s are one event with a count.
COALESCE_S = 5.0


@dataclass
class NodeEvents:
    """What one source saw on one node since its last poll."""

    cluster: str
    node: str
    gpu_events: list[GpuErrorEventIn] = field(default_factory=list)
    log_windows: list[LogWindowIn] = field(default_factory=list)


class EventSource(Protocol):
    def poll(self, ts: float) -> list[NodeEvents]:
        """Events seen since the last poll (stamped with their own time, else `ts`)."""
        ...

    def commit(self) -> None:
        """The last poll's events are with the transport: persist the read position."""
        ...

    def close(self) -> None: ...


def coalesce(
    events: Iterable[GpuErrorEventIn], window_s: float = COALESCE_S
) -> list[GpuErrorEventIn]:
    """Merge identical events (kind, GPU, Xid, source) less than `window_s` after the first.

    The source is part of the key on purpose: one Xid is usually reported twice, by NVML and
    by the kernel log, and merging those into `count=2` would count one fault twice. The
    merged event keeps the first one's time and text and adds up counts and counter deltas.
    """
    out: list[GpuErrorEventIn] = []
    open_: dict[tuple[object, ...], int] = {}
    for ev in sorted(events, key=lambda e: e.ts):
        key = (ev.kind, ev.gpu_index, ev.gpu_uuid, ev.pci_bus_id, ev.xid, ev.source)
        at = open_.get(key)
        if at is not None and ev.ts - out[at].ts < window_s:
            first = out[at]
            update: dict[str, object] = {"count": min(first.count + ev.count, 1_000_000)}
            if first.delta is not None or ev.delta is not None:
                update["delta"] = (first.delta or 0) + (ev.delta or 0)
            out[at] = first.model_copy(update=update)
            continue
        open_[key] = len(out)
        out.append(ev)
    return out


class NodeEventWatcher:
    """Polls event sources once per agent round; one NodeEventBatch per node with news."""

    def __init__(
        self,
        sources: list[EventSource],
        tokens: Callable[[str, str], str],
        *,
        coalesce_s: float = COALESCE_S,
    ) -> None:
        self.sources = list(sources)
        self.tokens = tokens
        self.coalesce_s = coalesce_s
        self._polled: list[EventSource] = []

    def observe(self, readings: list[NodeReading]) -> None:
        """Hand this round's samples to the sources that derive events from them."""
        for source in self.sources:
            observe = getattr(source, "observe", None)
            if observe is not None:
                observe(readings)

    def poll(self, ts: float) -> list[tuple[str, str]]:
        merged: dict[tuple[str, str], NodeEvents] = {}
        self._polled = []
        for source in self.sources:
            try:
                found = source.poll(ts)
            except Exception as exc:  # noqa: BLE001 (one broken source must not stop the others)
                log.error("%s failed: %s: %s", type(source).__name__, type(exc).__name__, exc)
                continue
            self._polled.append(source)
            for item in found:
                into = merged.setdefault(
                    (item.cluster, item.node), NodeEvents(item.cluster, item.node)
                )
                into.gpu_events.extend(item.gpu_events)
                into.log_windows.extend(item.log_windows)
        return self._batches(merged)

    def finish(self) -> list[tuple[str, str]]:
        """End of the run: windows still open are sent as they are."""
        merged: dict[tuple[str, str], NodeEvents] = {}
        for source in self.sources:
            finish = getattr(source, "finish", None)
            if finish is None:
                continue
            for item in finish():
                into = merged.setdefault(
                    (item.cluster, item.node), NodeEvents(item.cluster, item.node)
                )
                into.gpu_events.extend(item.gpu_events)
                into.log_windows.extend(item.log_windows)
        self._polled = list(self.sources)
        return self._batches(merged)

    def _batches(self, merged: dict[tuple[str, str], NodeEvents]) -> list[tuple[str, str]]:
        out = []
        for (cluster, node), item in merged.items():
            events = coalesce(item.gpu_events, self.coalesce_s)
            windows = item.log_windows
            if not events and not windows:
                continue
            for i in range(0, max(len(events), len(windows)), MAX_NODE_EVENTS_PER_BATCH):
                batch = NodeEventBatch(
                    v=SCHEMA_VERSION,
                    batch_id=new_batch_id(),
                    cluster=cluster,
                    node=node,
                    token=self.tokens(cluster, node),
                    sent_at=time.time(),
                    gpu_events=events[i : i + MAX_NODE_EVENTS_PER_BATCH],
                    log_windows=windows[i : i + MAX_NODE_EVENTS_PER_BATCH],
                )
                out.append((str(batch.batch_id), batch.model_dump_json(exclude_none=True)))
        return out

    def commit(self) -> None:
        for source in self._polled:
            source.commit()
        self._polled = []

    def close(self) -> None:
        for source in self.sources:
            try:
                source.close()
            except Exception as exc:  # noqa: BLE001 (best effort at shutdown)
                log.debug("closing %s: %s", type(source).__name__, exc)
