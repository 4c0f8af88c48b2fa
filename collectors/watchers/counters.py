"""GPU error events from counter increases in the samples the backend already read.

No extra NVML call: the agent hands each round's wire rows to `observe()`, and an increase of
an error counter since the GPU's previous row becomes one event with its `delta`:

- `ecc_dbe_vol` -> ecc_dbe (uncorrectable: DCGM health FAIL, docs/telemetry.md section 6);
- `ecc_sbe_vol` -> ecc_sbe (corrected: kept for the trend, Xid 92 is the driver's own alarm);
- `remap_pending` / `remap_failure` flags going 0 -> 1 -> remap / remap_failure (a reset is
  due / RMA candidate, docs/telemetry.md section 5 "RMA rule");
- `nvlink_replay` + `nvlink_recovery` increases -> nvlink; CRC flit/data counters only at
  >= 100 errors/s (DCGM's NVLink health threshold, docs/telemetry.md section 6: a few CRC errors
  are normal link noise);
- a GPU that had rows and has none now (the backend marks it lost) -> gpu_lost.

A counter that goes down was reset (GPU reset clears volatile ECC counts, docs/telemetry.md section
4): it becomes the new baseline, no event. The first row of a GPU is only a baseline, so a
restarted agent does not report old errors again.
"""

from __future__ import annotations

from typing import Any

from collectors.backends.base import GPU_POS, NodeReading
from collectors.schema import GpuErrorEventIn, GpuInfo
from collectors.watchers.nodeevents import NodeEvents

NVLINK_CRC_PER_S = 100.0  # DCGM health: NVLink CRC counts matter only at >= 100/s

COUNTERS = (
    ("ecc_dbe_vol", "ecc_dbe"),
    ("ecc_sbe_vol", "ecc_sbe"),
    ("remap_pending", "remap"),
    ("remap_failure", "remap_failure"),
)
NVLINK_HARD = ("nvlink_replay", "nvlink_recovery")
NVLINK_CRC = ("nvlink_crc_flit", "nvlink_crc_data")
_ALL = tuple(c for c, _ in COUNTERS) + NVLINK_HARD + NVLINK_CRC


class CounterEventSource:
    """Turns counter increases of the observed rows into GPU error events."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str, int], tuple[float, dict[str, int]]] = {}
        self._seen: dict[tuple[str, str], set[int]] = {}
        self._found: dict[tuple[str, str], NodeEvents] = {}

    def observe(self, readings: list[NodeReading]) -> None:
        for r in readings:
            infos = {g.index: g for g in r.gpus}
            present = set()
            for row in r.gpu_rows:
                index, ts = int(row[0]), float(row[1])
                present.add(index)
                self._row(r, infos.get(index), index, ts, row)
            before = self._seen.get((r.cluster, r.node), set())
            for index in sorted(before - present):
                info = infos.get(index)
                ts = max((float(row[1]) for row in r.gpu_rows), default=None)
                if ts is None and r.node_row is not None:
                    ts = float(r.node_row[0])
                if ts is not None:
                    self._add(
                        r,
                        GpuErrorEventIn(
                            ts=ts,
                            kind="gpu_lost",
                            source="counter",
                            **_ident(info, index),
                            message="GPU stopped answering NVML",
                        ),
                    )
                self._last.pop((r.cluster, r.node, index), None)
            self._seen[(r.cluster, r.node)] = present

    def _row(
        self, r: NodeReading, info: GpuInfo | None, index: int, ts: float, row: list[Any]
    ) -> None:
        now = {c: int(row[GPU_POS[c]]) for c in _ALL if row[GPU_POS[c]] is not None}
        key = (r.cluster, r.node, index)
        prev = self._last.get(key)
        self._last[key] = (ts, now)
        if prev is None:
            return
        t0, before = prev
        for counter, kind in COUNTERS:
            if counter in now and counter in before and now[counter] > before[counter]:
                self._add(
                    r,
                    GpuErrorEventIn(
                        ts=ts,
                        kind=kind,
                        source="counter",
                        **_ident(info, index),  # type: ignore[arg-type]
                        delta=now[counter] - before[counter],
                        message=f"{counter} {before[counter]} -> {now[counter]}",
                    ),
                )
        delta = sum(
            now[c] - before[c]
            for c in NVLINK_HARD
            if c in now and c in before and now[c] > before[c]
        )
        dt = ts - t0
        crc = sum(
            now[c] - before[c]
            for c in NVLINK_CRC
            if c in now and c in before and now[c] > before[c]
        )
        if dt > 0 and crc / dt >= NVLINK_CRC_PER_S:
            delta += crc
        if delta:
            changed = ", ".join(
                f"{c} {before[c]} -> {now[c]}"
                for c in NVLINK_HARD + NVLINK_CRC
                if c in now and c in before and now[c] > before[c]
            )
            self._add(
                r,
                GpuErrorEventIn(
                    ts=ts,
                    kind="nvlink",
                    source="counter",
                    **_ident(info, index),
                    delta=delta,
                    message=changed,
                ),
            )

    def _add(self, r: NodeReading, ev: GpuErrorEventIn) -> None:
        self._found.setdefault(
            (r.cluster, r.node), NodeEvents(r.cluster, r.node)
        ).gpu_events.append(ev)

    def poll(self, ts: float) -> list[NodeEvents]:
        found, self._found = list(self._found.values()), {}
        return found

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


def _ident(info: GpuInfo | None, index: int) -> dict[str, Any]:
    return {
        "gpu_index": index,
        "gpu_uuid": info.uuid if info else None,
        "pci_bus_id": info.pci_bus_id if info else None,
    }
