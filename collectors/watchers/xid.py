"""Xid errors from NVML event sets: the driver's own report of each GPU error, as it happens.

At start every GPU the backend watches is registered for `nvmlEventTypeXidCriticalError` on one
event set; each round drains the set with `nvmlEventSetWait_v2` (a short wait first, then
none), so the sampling rhythm is kept. NVML only reports events that happen after
registration, and Xids arriving between two waits may collapse into one (docs/telemetry.md section
2, `xid` row): the kernel log (kernel.py) is the second, independent source. A GPU that cannot
register (consumer boards, an old driver: NOT_SUPPORTED) is skipped with one log line; if no
GPU can, the source turns itself off.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import pynvml as N

from collectors.schema import GpuErrorEventIn, GpuInfo
from collectors.watchers.nodeevents import NodeEvents

log = logging.getLogger("vigil.collector.xid")

# The driver queues events between waits, so a short wait only catches one in flight; kept
# small because the whole round should stay under 200 ms for 8 GPUs (docs/telemetry.md section 3).
FIRST_WAIT_MS = 10
MAX_EVENTS_PER_ROUND = 1000  # an Xid storm is read over several rounds, not in one


def handle_address(handle: Any) -> int | None:
    """A device handle's address: what identifies the GPU in `c_nvmlEventData_t.device`."""
    return ctypes.cast(handle, ctypes.c_void_p).value


class NvmlXidSource:
    """Xid events of one node's GPUs (NVML must already be initialised: the backend did it)."""

    def __init__(self, cluster: str, node: str, gpus: list[GpuInfo]) -> None:
        self.cluster = cluster
        self.node = node
        self._by_handle: dict[int, GpuInfo] = {}
        self._set: Any = None
        self.unregistered: list[int] = []  # GPU indices that could not register
        try:
            self._set = N.nvmlEventSetCreate()
        except N.NVMLError as exc:
            log.warning("NVML event sets unavailable (%s): no Xid events from NVML", exc)
            return
        for info in gpus:
            try:
                handle = N.nvmlDeviceGetHandleByIndex(info.index)
                N.nvmlDeviceRegisterEvents(handle, N.nvmlEventTypeXidCriticalError, self._set)
            except N.NVMLError as exc:
                log.warning(
                    "GPU %d (%s): cannot register for Xid events: %s", info.index, info.uuid, exc
                )
                self.unregistered.append(info.index)
                continue
            addr = handle_address(handle)
            if addr is not None:
                self._by_handle[addr] = info
        if not self._by_handle:
            log.warning("no GPU registered for Xid events: NVML Xid source off")
            self.close()
        else:
            log.info("Xid events from NVML on %d GPU(s)", len(self._by_handle))

    @property
    def active(self) -> bool:
        return self._set is not None

    def poll(self, ts: float) -> list[NodeEvents]:
        if self._set is None:
            return []
        events: list[GpuErrorEventIn] = []
        wait_ms = FIRST_WAIT_MS
        while len(events) < MAX_EVENTS_PER_ROUND:
            try:
                data = N.nvmlEventSetWait_v2(self._set, wait_ms)
            except N.NVMLError as exc:
                if exc.value != N.NVML_ERROR_TIMEOUT:
                    # GPU_IS_LOST and friends: the event itself is in the kernel log.
                    log.warning("nvmlEventSetWait: %s", exc)
                break
            wait_ms = 0
            if not data.eventType & N.nvmlEventTypeXidCriticalError:
                continue
            info = self._by_handle.get(handle_address(data.device) or -1)
            events.append(
                GpuErrorEventIn(
                    ts=ts,
                    kind="xid",
                    source="nvml",
                    gpu_index=info.index if info else None,
                    gpu_uuid=info.uuid if info else None,
                    pci_bus_id=info.pci_bus_id if info else None,
                    xid=min(int(data.eventData), 10_000),
                )
            )
        return [NodeEvents(self.cluster, self.node, gpu_events=events)] if events else []

    def commit(self) -> None:
        pass  # NVML forgets delivered events: nothing to persist

    def close(self) -> None:
        if self._set is not None:
            try:
                N.nvmlEventSetFree(self._set)
            except N.NVMLError as exc:
                log.debug("nvmlEventSetFree: %s", exc)
            self._set = None
