"""dcgm-exporter source: scrape its Prometheus `/metrics` text and map it to wire rows.

For sites that already run NVIDIA's dcgm-exporter (Kubernetes GPU operator, Slurm with
`--hpc-job-mapping-dir`): it has profiling metrics (SM / tensor / DRAM activity) on Ampere too,
which NVML alone cannot give. Parsing is prometheus_client's. What this module adds
(docs/telemetry.md sections 2, 4, 7):
- DCGM field names, old and new (`POWER_USAGE` / `BOARD_POWER_WATTS`, ...), to our columns,
  with units converted (MiB -> bytes);
- DCGM's "blank" sentinels (int64 >= DCGM_INT64_BLANK, double >= DCGM_FP64_BLANK) -> null;
- series duplicated per job (`hpc_job`) or per pod collapse to one value per GPU; job labels
  are dropped (jobs are joined through the allocation table, never copied into samples);
- MIG instance series (`GPU_I_ID`) are skipped: the wire row is per physical GPU.
"""

from __future__ import annotations

import logging
import math
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from collectors.backends.base import GPU_POS, NodeReading, Source, empty_gpu_row
from collectors.nodestats import NodeSampler
from collectors.schema import DCGM_INT64_BLANK, GpuInfo, clean_value

log = logging.getLogger("vigil.collector.dcgm")

DEFAULT_URL = "http://localhost:9400/metrics"  # dcgm-exporter's default listen address :9400
# dcgm_structs.h: DCGM_FP64_BLANK 140737488355328.0 (2^47); values at or above it are blanks.
DCGM_FP64_BLANK = 140737488355328.0
MIB = 1 << 20  # DCGM reports framebuffer sizes in MiB (DCGM field reference, 250-253)

# kind: how to convert. pct 0-100, ratio 0-1, mib -> bytes, f float as is, i integer as is.
_FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", "pct"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_copy_util", "pct"),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", "ratio"),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", "ratio"),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", "ratio"),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", "ratio"),
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", "mib"),
    "DCGM_FI_DEV_FB_TOTAL": ("fb_total_bytes", "mib"),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", "f"),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("power_w", "f"),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", "f"),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", "f"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", "i"),
    "DCGM_FI_DEV_GPU_TEMP": ("gpu_temp_c", "f"),
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": ("gpu_temp_c", "f"),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temp_c", "f"),
    "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": ("mem_temp_c", "f"),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", "f"),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", "f"),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clocks_event_reasons", "i"),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clocks_event_reasons", "i"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_vol", "i"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_vol", "i"),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_sbe_agg", "i"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_dbe_agg", "i"),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remap_corr", "i"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remap_unc", "i"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("remap_pending", "i"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remap_failure", "i"),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("nvlink_crc_flit", "i"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("nvlink_crc_data", "i"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("nvlink_replay", "i"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("nvlink_recovery", "i"),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_s", "f"),  # 1009: bytes per second
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_s", "f"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay", "i"),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_gen", "i"),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_width", "i"),
    "DCGM_FI_DEV_PSTATE": ("pstate", "i"),
}
# Used only to work out fb_total when the exporter is not configured to send FB_TOTAL.
_FB_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")


def convert(kind: str, value: float) -> float | int | None:
    """One exporter value in our unit, or None for a DCGM blank or an impossible value."""
    if not math.isfinite(value):
        return None
    if kind in ("i", "mib"):
        number = clean_value(int(value))  # exporter prints int64 blanks as e.g. 9223…794
        if number is None or number < 0:
            return None
        return number * MIB if kind == "mib" else number
    if value >= DCGM_FP64_BLANK or value >= DCGM_INT64_BLANK:
        return None
    if kind == "pct" and not 0 <= value <= 100:
        return None
    if kind == "ratio" and not 0 <= value <= 1:
        return None
    return float(value)


def parse_metrics(text: str, ts: float) -> tuple[list[GpuInfo], list[list[Any]]]:
    """GPUs and wire rows (stamped `ts`) from one dcgm-exporter `/metrics` page."""
    gpus: dict[int, dict[str, Any]] = {}
    values: dict[int, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        # The parser renames counter samples to `<name>_total`; the family keeps DCGM's name.
        name = family.name
        if name not in _FIELDS and name not in _FB_PARTS:
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_created"):
                continue
            if "GPU_I_ID" in labels or "gpu" not in labels:
                continue  # MIG instance, or not a per-GPU series
            try:
                index = int(labels["gpu"])
            except ValueError:
                continue
            if index not in gpus:
                gpus[index] = {
                    "index": index,
                    "uuid": labels.get("UUID") or labels.get("uuid") or f"dcgm-gpu-{index}",
                    "name": labels.get("modelName", "")[:96],
                    "pci_bus_id": (labels.get("pci_bus_id") or None),
                    # dcgm-exporter's `device` label is the device file's name, `nvidia<minor>`.
                    "minor_number": _minor(labels.get("device", "")),
                }
            # Series repeated per hpc_job / pod carry the same GPU value: keep the first.
            values.setdefault(index, {}).setdefault(name, sample.value)
    infos: list[GpuInfo] = []
    rows: list[list[Any]] = []
    for index in sorted(gpus):
        got = values.get(index, {})
        row = empty_gpu_row(index, ts)
        for name, raw in got.items():
            if name in _FIELDS:
                column, kind = _FIELDS[name]
                converted = convert(kind, raw)
                if converted is not None or row[GPU_POS[column]] is None:
                    row[GPU_POS[column]] = converted
        total = row[GPU_POS["fb_total_bytes"]]
        if total is None:
            parts = [convert("mib", got[p]) for p in _FB_PARTS if p in got]
            if len(parts) >= 2 and None not in parts:
                total = sum(p for p in parts if p is not None)
                row[GPU_POS["fb_total_bytes"]] = total
        info = gpus[index]
        info["memory_total_bytes"] = total
        infos.append(GpuInfo(**info))
        rows.append(row)
    return infos, rows


class DcgmBackend:
    """One node read from its local dcgm-exporter."""

    source: Source = "dcgm"

    def __init__(
        self,
        cluster: str,
        node: str,
        url: str = DEFAULT_URL,
        *,
        timeout_s: float = 5.0,
        node_sampler: NodeSampler | None = None,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.url = url
        self.timeout_s = timeout_s
        self._node_sampler = node_sampler or NodeSampler()
        self._gpus: list[GpuInfo] = []
        self._failing = False

    def fetch(self) -> str:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:  # noqa: S310
            return resp.read().decode("utf-8", errors="replace")

    def read(self, ts: float) -> list[NodeReading]:
        try:
            gpus, rows = parse_metrics(self.fetch(), ts)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            # Exporter restarting or briefly down: the node row still goes out, without GPUs.
            if not self._failing:
                log.warning("dcgm-exporter at %s not readable: %s", self.url, exc)
            self._failing = True
            return [NodeReading(self.cluster, self.node, self._gpus, [], self._node_row(ts, None))]
        if self._failing:
            log.warning("dcgm-exporter at %s answers again", self.url)
            self._failing = False
        self._gpus = gpus
        return [NodeReading(self.cluster, self.node, gpus, rows, self._node_row(ts, len(rows)))]

    def _node_row(self, ts: float, gpu_count: int | None) -> list[Any]:
        return self._node_sampler.read(ts, gpu_count)

    def close(self) -> None:
        pass


def _minor(device: str) -> int | None:
    """The minor number in dcgm-exporter's `device` label (`nvidia3` -> 3), else None."""
    digits = device.removeprefix("nvidia")
    return (
        int(digits)
        if device.startswith("nvidia") and digits.isdigit() and int(digits) < 1024
        else None
    )
