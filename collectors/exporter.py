"""The agent's own `/metrics` (`--metrics-port`): the latest reading in dcgm-exporter's names.

A site that already runs Prometheus can point it straight at the nodes and keep the
dashboards and rules it has for NVIDIA's dcgm-exporter: the series are named as dcgm-exporter
names them (DCGM field names, the old spelling its default CSV and our recorded page use:
`DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_GPU_TEMP`, `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`), in
its units (percent, MiB, mJ, W, °C, ratios for the profiling fields), with its labels
(`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, copied from
collectors/fixtures/dcgm-exporter-h100.txt). Fields Vigil does not read are left out, never
sent as zeros.

dcgm-exporter types its counters (energy, ECC, NVLink, PCIe replays) `counter` but names them
without `_total`; prometheus_client would rename such a family `<name>_total`. They are sent
untyped instead, so the names stay dcgm-exporter's (Prometheus stores untyped samples as
they are, and rate() works on them).

`DCGM_FI_DEV_XID_ERRORS` is, as in DCGM (field 230), the last Xid code each GPU reported (0
until one is), taken from the node-event batches the agent sends. Vigil itself keeps every
Xid as an event (docs/telemetry.md section 4).

Served by prometheus_client's own HTTP server in a thread, from a custom collector over the
agent's latest reading, so a scrape never touches the GPU or waits on the sampling loop.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector

from collectors.backends.base import GPU_POS, Backend, NodeReading
from collectors.backends.dcgm import MIB

log = logging.getLogger("vigil.collector.exporter")

# dcgm-exporter's labels, in its order.
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]

# (DCGM field name, our column, divisor from our unit to DCGM's, counter?, help). Units:
# docs/telemetry.md section 2; the framebuffer in whole MiB, as DCGM's int64 fields give
# it; help in dcgm-exporter's words where its page has them.
FIELDS: tuple[tuple[str, str, int, bool, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", 1, False, "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz", 1, False, "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "mem_temp_c", 1, False, "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gpu_temp_c", 1, False, "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", 1, False, "Power draw (in W)."),
    (
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "power_limit_w",
        1,
        False,
        "Effective power limit (in W).",
    ),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "energy_mj",
        1,
        True,
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay", 1, True, "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gpu_util", 1, False, "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_copy_util", 1, False, "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "fb_used_bytes", MIB, False, "Framebuffer memory used (in MiB)."),
    (
        "DCGM_FI_DEV_FB_TOTAL",
        "fb_total_bytes",
        MIB,
        False,
        "Framebuffer memory total (in MiB).",
    ),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "clocks_event_reasons",
        1,
        False,
        "Current clock throttle reasons.",
    ),
    ("DCGM_FI_DEV_PSTATE", "pstate", 1, False, "Performance state (P-State) 0-15. 0=highest"),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie_gen", 1, False, "PCIe link generation."),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "pcie_width", 1, False, "PCIe link width."),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "ecc_sbe_vol",
        1,
        True,
        "Total number of single-bit volatile ECC errors.",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "ecc_dbe_vol",
        1,
        True,
        "Total number of double-bit volatile ECC errors.",
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "ecc_sbe_agg",
        1,
        True,
        "Total number of single-bit persistent ECC errors.",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "ecc_dbe_agg",
        1,
        True,
        "Total number of double-bit persistent ECC errors.",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "remap_corr",
        1,
        True,
        "Number of remapped rows for correctable errors",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "remap_unc",
        1,
        True,
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "remap_pending",
        1,
        False,
        "Whether remapping of rows is pending (waits for a GPU reset)",
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "remap_failure",
        1,
        False,
        "Whether remapping of rows has failed",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "nvlink_crc_flit",
        1,
        True,
        "Total number of NVLink flow-control CRC errors.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "nvlink_crc_data",
        1,
        True,
        "Total number of NVLink data CRC errors.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "nvlink_replay",
        1,
        True,
        "Total number of NVLink retries.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "nvlink_recovery",
        1,
        True,
        "Total number of NVLink recovery errors.",
    ),
    (
        "DCGM_FI_PROF_SM_ACTIVE",
        "sm_active",
        1,
        False,
        "Ratio of cycles an SM has at least 1 warp assigned (0-1).",
    ),
    (
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "sm_occupancy",
        1,
        False,
        "Ratio of warps resident on an SM to the maximum (0-1).",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "tensor_active",
        1,
        False,
        "Ratio of cycles a tensor pipe is active (0-1).",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "dram_active",
        1,
        False,
        "Ratio of cycles the device memory interface is active (0-1).",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "pcie_tx_bytes_s",
        1,
        False,
        "PCIe bytes transmitted per second.",
    ),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_bytes_s", 1, False, "PCIe bytes received per second."),
)
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


class LatestReadings:
    """The newest reading of every node the agent watches, and each GPU's last Xid.

    Written by the sampling loop, read by the HTTP server's thread: each update swaps whole
    entries under a lock, so a scrape sees one round of a node, never half of one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: dict[tuple[str, str], NodeReading] = {}
        self._xids: dict[tuple[str, str, int], int] = {}

    def observe(self, readings: list[NodeReading]) -> None:
        with self._lock:
            for reading in readings:
                self._readings[reading.cluster, reading.node] = reading

    def observe_node_events(self, text: str) -> None:
        """Remember the last Xid of each GPU from a node-event batch the agent sends."""
        try:
            batch = json.loads(text)
            key = (batch["cluster"], batch["node"])
            xids = [
                (e["ts"], e["gpu_index"], e["xid"])
                for e in batch.get("gpu_events", ())
                if e.get("kind") == "xid" and e.get("gpu_index") is not None
            ]
        except (ValueError, KeyError, TypeError) as exc:  # the agent built it: a bug, not data
            log.warning("node-event batch not read for the exporter: %s", exc)
            return
        with self._lock:
            for _, index, xid in sorted(xids):
                self._xids[(*key, index)] = xid

    def snapshot(self) -> tuple[list[NodeReading], dict[tuple[str, str, int], int]]:
        with self._lock:
            return list(self._readings.values()), dict(self._xids)


class RecordingBackend:
    """A backend that hands every round's readings to `latest` as well as to the agent."""

    def __init__(self, backend: Backend, latest: LatestReadings) -> None:
        self._backend = backend
        self._latest = latest
        self.source = backend.source

    def read(self, ts: float) -> list[NodeReading]:
        readings = self._backend.read(ts)
        self._latest.observe(readings)
        return readings

    def close(self) -> None:
        self._backend.close()

    def __getattr__(self, name: str) -> Any:  # the rest (jobs, nodes...) is the backend's
        return getattr(self._backend, name)


class DcgmStyleCollector(Collector):
    """The latest readings as dcgm-exporter families (see the module docstring)."""

    def __init__(self, latest: LatestReadings) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        readings, xids = self._latest.snapshot()
        families: list[tuple[Metric, int, int]] = [
            (
                (UnknownMetricFamily if counter else GaugeMetricFamily)(name, text, labels=LABELS),
                GPU_POS[column],
                divisor,
            )
            for name, column, divisor, counter, text in FIELDS
        ]
        xid = GaugeMetricFamily(
            XID_FIELD, "Value of the last XID error encountered.", labels=LABELS
        )
        for reading in readings:
            # A reading may hold several rounds (backfill); the newest row of each GPU wins.
            newest: dict[int, list[Any]] = {}
            for row in reading.gpu_rows:
                if row[0] not in newest or row[1] >= newest[row[0]][1]:
                    newest[row[0]] = row
            for info in sorted(reading.gpus, key=lambda g: g.index):
                labels = [
                    str(info.index),
                    info.uuid,
                    info.pci_bus_id or "",
                    f"nvidia{info.index}",
                    info.name,
                    reading.node,
                ]
                # The last Xid stays while the GPU is registered, even once it stops answering
                # (Xid 79: it fell off the bus), so a scrape after the loss still sees it.
                xid.add_metric(labels, xids.get((reading.cluster, reading.node, info.index), 0))
                row = newest.get(info.index)
                if row is None:
                    continue
                for family, pos, divisor in families:
                    value = row[pos]
                    if value is not None:
                        family.add_metric(labels, value if divisor == 1 else value // divisor)
        for family, _, _ in families:
            yield family
        yield xid


def serve(latest: LatestReadings, port: int, addr: str = "127.0.0.1") -> tuple[Any, Any]:
    """Serve `/metrics` on addr:port in a daemon thread; (server, thread), as
    prometheus_client's start_http_server returns them. Raises OSError if the port is taken."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DcgmStyleCollector(latest))
    return start_http_server(port, addr=addr, registry=registry)
