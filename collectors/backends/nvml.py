"""NVML source: the real pynvml wrappers, one wide row per GPU per round.

Ground rules from docs/telemetry.md sections 1-4:
- every call is probed once per GPU at start; what answers NOT_SUPPORTED (or is missing from
  the driver, or needs a permission we lack) is dropped from that GPU's capability mask and
  its columns stay null, never 0;
- SM activity, occupancy, tensor and DRAM activity come from GPM, which exists on Hopper and
  newer only; one retained GPM sample per GPU bridges consecutive rounds;
- a GPU that falls off the bus (GPU_IS_LOST and friends) stops producing rows, the node row's
  gpu_count drops and a warning is logged once; the agent keeps running for the others.

Each call is described once in `CALLS` as (fixture key, reader, writer). The reader returns a
plain value in the fake-NVML fixture format, which is what lets `collectors.record` dump a real
node's answers into a fixture that `collectors.testing.fake_nvml` replays.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml as N

from collectors.backends.base import GPU_POS, BackendError, NodeReading, Source, empty_gpu_row
from collectors.nodestats import NodeSampler
from collectors.schema import GpuInfo

log = logging.getLogger("vigil.collector.nvml")

# The GPU is gone until a reset or reboot (docs/telemetry.md section 4).
LOST_CODES = frozenset(
    {N.NVML_ERROR_GPU_IS_LOST, N.NVML_ERROR_RESET_REQUIRED, N.NVML_ERROR_GPU_NOT_FOUND}
)
# The call will never answer on this GPU with this driver and these privileges.
UNSUPPORTED_CODES = frozenset(
    {N.NVML_ERROR_NOT_SUPPORTED, N.NVML_ERROR_FUNCTION_NOT_FOUND, N.NVML_ERROR_NO_PERMISSION}
)

# nvmlInit failures that mean "no usable driver here", with the line an operator should read.
_INIT_MESSAGES = {
    N.NVML_ERROR_LIBRARY_NOT_FOUND: "no NVIDIA driver (libnvidia-ml.so.1 not found)",
    N.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    N.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVML library and kernel driver versions differ (driver upgraded without a reboot?)"
    ),
    N.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA device files",
}

Hook = Callable[[str, str, Any], None]
"""Called as hook(gpu_uuid, fixture_key, value) for every answer; value is an NVMLError on error."""


class NvmlUnavailable(BackendError):
    """NVML cannot start on this host; the message is the one line to show."""


@dataclass(frozen=True)
class Call:
    key: str  # fixture key: the C symbol, with its non-handle arguments in parentheses
    read: Callable[[Any], Any]  # handle -> plain value (fixture format)
    store: Callable[[list[Any], Any], None]  # writes that value into a wire row


def _put(field: str, divisor: int | None = None, cast: type = float) -> Callable[..., None]:
    pos = GPU_POS[field]
    if divisor is None:

        def store(row: list[Any], value: Any) -> None:
            row[pos] = cast(value)

    else:

        def store(row: list[Any], value: Any) -> None:
            row[pos] = value / divisor

    return store


def _read_util(h: Any) -> dict[str, int]:
    u = N.nvmlDeviceGetUtilizationRates(h)
    return {"gpu": u.gpu, "memory": u.memory}


def _store_util(row: list[Any], v: dict[str, int]) -> None:
    row[GPU_POS["gpu_util"]] = float(v["gpu"])
    row[GPU_POS["mem_copy_util"]] = float(v["memory"])


def _read_memory(h: Any) -> dict[str, int]:
    m = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    return {"total": m.total, "reserved": m.reserved, "free": m.free, "used": m.used}


def _store_memory(row: list[Any], v: dict[str, int]) -> None:
    row[GPU_POS["fb_used_bytes"]] = int(v["used"])
    row[GPU_POS["fb_total_bytes"]] = int(v["total"])


def _read_remap(h: Any) -> list[int]:
    return list(N.nvmlDeviceGetRemappedRows(h))


def _store_remap(row: list[Any], v: list[int]) -> None:
    corr, unc, pending, failure = v
    row[GPU_POS["remap_corr"]] = int(corr)
    row[GPU_POS["remap_unc"]] = int(unc)
    row[GPU_POS["remap_pending"]] = int(pending)
    row[GPU_POS["remap_failure"]] = int(failure)


def _store_pstate(row: list[Any], v: int) -> None:
    # NVML_PSTATE_UNKNOWN (32) is "no answer", not a performance state.
    row[GPU_POS["pstate"]] = None if v == N.NVML_PSTATE_UNKNOWN else int(v)


def _ecc(error_type: int, counter: int, field: str) -> Call:
    return Call(
        f"nvmlDeviceGetTotalEccErrors({error_type},{counter})",
        lambda h: N.nvmlDeviceGetTotalEccErrors(h, error_type, counter),
        _put(field, cast=int),
    )


MILLI = 1000  # NVML reports power and limits in mW (NVML API reference, nvmlDeviceGetPowerUsage)

CALLS: tuple[Call, ...] = (
    Call("nvmlDeviceGetUtilizationRates", _read_util, _store_util),
    Call("nvmlDeviceGetMemoryInfo_v2", _read_memory, _store_memory),
    Call("nvmlDeviceGetPowerUsage", N.nvmlDeviceGetPowerUsage, _put("power_w", MILLI)),
    Call(
        "nvmlDeviceGetEnforcedPowerLimit",
        N.nvmlDeviceGetEnforcedPowerLimit,
        _put("power_limit_w", MILLI),
    ),
    Call(
        "nvmlDeviceGetTotalEnergyConsumption",
        N.nvmlDeviceGetTotalEnergyConsumption,
        _put("energy_mj", cast=int),
    ),
    Call(
        f"nvmlDeviceGetTemperature({N.NVML_TEMPERATURE_GPU})",
        lambda h: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
        _put("gpu_temp_c"),
    ),
    Call(
        f"nvmlDeviceGetClockInfo({N.NVML_CLOCK_SM})",
        lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM),
        _put("sm_clock_mhz"),
    ),
    Call(
        f"nvmlDeviceGetClockInfo({N.NVML_CLOCK_MEM})",
        lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM),
        _put("mem_clock_mhz"),
    ),
    Call(
        "nvmlDeviceGetCurrentClocksEventReasons",
        N.nvmlDeviceGetCurrentClocksEventReasons,
        _put("clocks_event_reasons", cast=int),
    ),
    _ecc(N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC, "ecc_sbe_vol"),
    _ecc(N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC, "ecc_dbe_vol"),
    _ecc(N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_AGGREGATE_ECC, "ecc_sbe_agg"),
    _ecc(N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_AGGREGATE_ECC, "ecc_dbe_agg"),
    Call("nvmlDeviceGetRemappedRows", _read_remap, _store_remap),
    Call(
        "nvmlDeviceGetPcieReplayCounter",
        N.nvmlDeviceGetPcieReplayCounter,
        _put("pcie_replay", cast=int),
    ),
    Call(
        "nvmlDeviceGetCurrPcieLinkGeneration",
        N.nvmlDeviceGetCurrPcieLinkGeneration,
        _put("pcie_gen", cast=int),
    ),
    Call(
        "nvmlDeviceGetCurrPcieLinkWidth",
        N.nvmlDeviceGetCurrPcieLinkWidth,
        _put("pcie_width", cast=int),
    ),
    Call("nvmlDeviceGetPerformanceState", N.nvmlDeviceGetPerformanceState, _store_pstate),
)

# Read together with one nvmlDeviceGetFieldValues call; each entry has its own status.
FIELD_MEM_TEMP = N.NVML_FI_DEV_MEMORY_TEMP  # 82, HBM boards only
FIELD_PCIE_TX = N.NVML_FI_DEV_PCIE_COUNT_TX_BYTES  # 197, byte counter
FIELD_PCIE_RX = N.NVML_FI_DEV_PCIE_COUNT_RX_BYTES  # 198
_FIELD_COLUMNS = {
    N.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: "nvlink_crc_flit",  # 38
    N.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: "nvlink_crc_data",  # 45
    N.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: "nvlink_replay",  # 52
    N.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: "nvlink_recovery",  # 59
}
FIELD_IDS: tuple[int, ...] = (FIELD_MEM_TEMP, *_FIELD_COLUMNS, FIELD_PCIE_TX, FIELD_PCIE_RX)
# PCIe throughput comes from the byte counters above, differenced between rounds, instead of
# nvmlDeviceGetPcieThroughput, which blocks ~20 ms per call to sample (NVML API reference):
# 2 calls x 8 GPUs would make one round take 320 ms against a 200 ms target (docs/telemetry.md §3).

# GPM metric id -> column; GPM reports 0-100, the wire wants a 0-1 ratio (DCGM convention).
GPM_METRICS: dict[int, str] = {
    N.NVML_GPM_METRIC_SM_UTIL: "sm_active",  # 2
    N.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",  # 3
    N.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",  # 5
    N.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_active",  # 10
}


def field_value(entry: Any) -> int | float:
    """The number in one nvmlFieldValue_t, according to its valueType."""
    vt = entry.valueType
    if vt == N.NVML_VALUE_TYPE_DOUBLE:
        return float(entry.value.dVal)
    if vt == N.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(entry.value.uiVal)
    if vt == N.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return int(entry.value.ulVal)
    if vt == N.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(entry.value.sllVal)
    if vt == N.NVML_VALUE_TYPE_SIGNED_INT:
        return int(entry.value.siVal)
    if vt == N.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return int(entry.value.usVal)
    return int(entry.value.ullVal)


class _Gpm:
    """Two GPM samples per GPU: the retained one from last round and the one taken now."""

    def __init__(self, handle: Any, metric_ids: list[int]) -> None:
        self.handle = handle
        self.prev = N.nvmlGpmSampleAlloc()
        self.cur = N.nvmlGpmSampleAlloc()
        # One request struct per GPU, reused: it holds 477 metric slots (~19 KB).
        self.request = N.c_nvmlGpmMetricsGet_t()
        self.set_metrics(metric_ids)
        N.nvmlGpmSampleGet(handle, self.prev)

    def set_metrics(self, metric_ids: list[int]) -> None:
        self.metric_ids = metric_ids
        self.request.version = N.NVML_GPM_METRICS_GET_VERSION
        self.request.numMetrics = len(metric_ids)
        for i, mid in enumerate(metric_ids):
            self.request.metrics[i].metricId = mid

    def read(self) -> dict[int, float | N.NVMLError]:
        """Metrics over the time since the previous read (or since start)."""
        N.nvmlGpmSampleGet(self.handle, self.cur)
        req = self.request
        req.sample1 = self.prev
        req.sample2 = self.cur
        N.nvmlGpmMetricsGet(req)
        self.prev, self.cur = self.cur, self.prev
        out: dict[int, float | N.NVMLError] = {}
        for i, mid in enumerate(self.metric_ids):
            m = req.metrics[i]
            out[mid] = m.value if m.nvmlReturn == N.NVML_SUCCESS else N.NVMLError(m.nvmlReturn)
        return out

    def free(self) -> None:
        for sample in (self.prev, self.cur):
            with contextlib.suppress(N.NVMLError):
                N.nvmlGpmSampleFree(sample)


class _Gpu:
    def __init__(self, index: int, handle: Any, info: GpuInfo) -> None:
        self.index = index
        self.handle = handle
        self.uuid = info.uuid
        self.info = info
        self.calls: list[Call] = []
        self.field_ids: list[int] = []
        self.gpm: _Gpm | None = None
        self.lost = False
        self.pcie_prev: tuple[float, int | None, int | None] | None = None


class NvmlBackend:
    """One node read through NVML."""

    source: Source = "nvml"

    def __init__(
        self,
        cluster: str,
        node: str,
        *,
        hook: Hook | None = None,
        node_sampler: NodeSampler | None = None,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self._hook = hook
        try:
            N.nvmlInit()
        except N.NVMLError as exc:
            why = _INIT_MESSAGES.get(exc.value, f"nvmlInit failed: {exc}")
            raise NvmlUnavailable(f"collector disabled: {why}") from None
        self._open = True
        self.driver_version = self._note(
            "", "nvmlSystemGetDriverVersion", N.nvmlSystemGetDriverVersion
        )
        count = N.nvmlDeviceGetCount()
        self._gpus: list[_Gpu] = []
        for index in range(count):
            gpu = self._probe(index)
            if gpu is not None:
                self._gpus.append(gpu)
        self._node_sampler = node_sampler or NodeSampler()
        log.info(
            "NVML %s: %d of %d GPUs usable (%s), GPM on %d",
            self.driver_version,
            len(self._gpus),
            count,
            ", ".join(sorted({g.info.name for g in self._gpus})),
            sum(1 for g in self._gpus if g.gpm is not None),
        )

    # --- start: identify and probe ---------------------------------------------------------

    def _note(self, uuid: str, key: str, fn: Callable[[], Any]) -> Any:
        """Call fn, tell the hook (recorder) what it answered, and return the answer."""
        try:
            value = fn()
        except N.NVMLError as exc:
            if self._hook is not None:
                self._hook(uuid, key, exc)
            raise
        if self._hook is not None:
            self._hook(uuid, key, value)
        return value

    def _optional(self, uuid: str, key: str, fn: Callable[[], Any]) -> Any:
        try:
            return self._note(uuid, key, fn)
        except N.NVMLError as exc:
            if exc.value in LOST_CODES:
                raise
            return None

    def _probe(self, index: int) -> _Gpu | None:
        try:
            handle = N.nvmlDeviceGetHandleByIndex(index)
            uuid = N.nvmlDeviceGetUUID(handle)
        except N.NVMLError as exc:
            log.warning("GPU %d: not usable at start (%s); skipping it", index, exc)
            return None
        try:
            name = self._optional(uuid, "nvmlDeviceGetName", lambda: N.nvmlDeviceGetName(handle))
            serial = self._optional(
                uuid, "nvmlDeviceGetSerial", lambda: N.nvmlDeviceGetSerial(handle)
            )
            pci = self._optional(
                uuid,
                "nvmlDeviceGetPciInfo_v3",
                lambda: {"busId": _text(N.nvmlDeviceGetPciInfo_v3(handle).busId)},
            )
            arch = self._optional(
                uuid, "nvmlDeviceGetArchitecture", lambda: N.nvmlDeviceGetArchitecture(handle)
            )
            minor = self._optional(
                uuid, "nvmlDeviceGetMinorNumber", lambda: N.nvmlDeviceGetMinorNumber(handle)
            )
            memory = self._optional(
                uuid, "nvmlDeviceGetMemoryInfo_v2", lambda: _read_memory(handle)
            )
            info = GpuInfo(
                index=index,
                uuid=uuid,
                name=(name or "")[:96],
                memory_total_bytes=memory["total"] if memory else None,
                pci_bus_id=pci["busId"][:32] if pci else None,
                serial=serial[:64] if serial else None,
                minor_number=minor if isinstance(minor, int) and 0 <= minor < 1024 else None,
            )
            gpu = _Gpu(index, handle, info)
            for call in CALLS:
                if self._probe_call(gpu, call.key, lambda c=call: c.read(handle)):
                    gpu.calls.append(call)
            fields = self._read_fields(gpu, list(FIELD_IDS))
            gpu.field_ids = [
                fid
                for fid, v in fields.items()
                if not (isinstance(v, N.NVMLError) and v.value in UNSUPPORTED_CODES)
            ]
            gpu.gpm = self._probe_gpm(gpu, arch)
        except N.NVMLError as exc:
            log.warning("GPU %d (%s): lost while probing (%s); skipping it", index, uuid, exc)
            return None
        return gpu

    def _probe_call(self, gpu: _Gpu, key: str, fn: Callable[[], Any]) -> bool:
        try:
            self._note(gpu.uuid, key, fn)
        except N.NVMLError as exc:
            if exc.value in LOST_CODES:
                raise
            if exc.value in UNSUPPORTED_CODES:
                log.debug("GPU %s: %s not supported (%s)", gpu.uuid, key, exc)
                return False
            # Transient (NO_DATA, NOT_READY, ...): keep asking every round.
        return True

    def _probe_gpm(self, gpu: _Gpu, arch: int | None) -> _Gpm | None:
        # GPM exists on Hopper and newer only (NVML API reference, GPM functions); asking an
        # Ampere board is harmless but answers NOT_SUPPORTED, so do not even try.
        if arch is None or arch < N.NVML_DEVICE_ARCH_HOPPER or arch == N.NVML_DEVICE_ARCH_UNKNOWN:
            return None
        support = self._optional(
            gpu.uuid,
            "nvmlGpmQueryDeviceSupport",
            lambda: {
                "isSupportedDevice": N.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice
            },
        )
        if not support or not support["isSupportedDevice"]:
            return None
        try:
            gpm = _Gpm(gpu.handle, list(GPM_METRICS))
            first = gpm.read()
        except N.NVMLError as exc:
            if exc.value in LOST_CODES:
                raise
            log.info("GPU %s: GPM unavailable (%s)", gpu.uuid, exc)
            return None
        self._tell_gpm(gpu, first)
        usable = [
            mid
            for mid, v in first.items()
            if not (isinstance(v, N.NVMLError) and v.value in UNSUPPORTED_CODES)
        ]
        if not usable:
            gpm.free()
            return None
        gpm.set_metrics(usable)
        return gpm

    def _tell_gpm(self, gpu: _Gpu, values: dict[int, Any]) -> None:
        if self._hook is not None:
            for mid, v in values.items():
                self._hook(gpu.uuid, f"nvmlGpmMetricsGet({mid})", v)

    def _read_fields(self, gpu: _Gpu, ids: list[int]) -> dict[int, int | float | N.NVMLError]:
        if not ids:
            return {}
        entries = N.nvmlDeviceGetFieldValues(gpu.handle, ids)
        out: dict[int, int | float | N.NVMLError] = {}
        for entry in entries:
            ret = entry.nvmlReturn
            out[entry.fieldId] = field_value(entry) if ret == N.NVML_SUCCESS else N.NVMLError(ret)
        if self._hook is not None:
            for fid, v in out.items():
                self._hook(gpu.uuid, f"nvmlDeviceGetFieldValues({fid})", v)
        return out

    # --- every round -------------------------------------------------------------------------

    @property
    def gpus(self) -> list[GpuInfo]:
        return [g.info for g in self._gpus]

    def read(self, ts: float) -> list[NodeReading]:
        rows = []
        for gpu in self._gpus:
            if gpu.lost:
                continue
            try:
                rows.append(self._sample(gpu, ts))
            except N.NVMLError as exc:
                if exc.value not in LOST_CODES:
                    raise
                gpu.lost = True
                log.warning(
                    "GPU %d (%s) lost: %s; its samples stop until the collector restarts",
                    gpu.index,
                    gpu.uuid,
                    exc,
                )
        node_row = self._node_sampler.read(ts, gpu_count=len(rows))
        return [NodeReading(self.cluster, self.node, self.gpus, rows, node_row)]

    def _sample(self, gpu: _Gpu, ts: float) -> list[Any]:
        row = empty_gpu_row(gpu.index, ts)
        handle = gpu.handle
        hook = self._hook
        dropped: list[Call] = []
        for call in gpu.calls:
            try:
                value = call.read(handle)
            except N.NVMLError as exc:
                if hook is not None:
                    hook(gpu.uuid, call.key, exc)
                if exc.value in LOST_CODES:
                    raise
                if exc.value in UNSUPPORTED_CODES:
                    dropped.append(call)
                continue
            if hook is not None:
                hook(gpu.uuid, call.key, value)
            call.store(row, value)
        if dropped:
            gpu.calls = [c for c in gpu.calls if c not in dropped]
        if gpu.field_ids:
            self._store_fields(gpu, row, ts)
        if gpu.gpm is not None:
            values = gpu.gpm.read()
            self._tell_gpm(gpu, values)
            for mid, v in values.items():
                if isinstance(v, N.NVMLError):
                    if v.value in LOST_CODES:
                        raise v
                    continue
                row[GPU_POS[GPM_METRICS[mid]]] = min(max(v / 100.0, 0.0), 1.0)
        return row

    def _store_fields(self, gpu: _Gpu, row: list[Any], ts: float) -> None:
        fields = self._read_fields(gpu, gpu.field_ids)
        good = {fid: v for fid, v in fields.items() if not isinstance(v, N.NVMLError)}
        if FIELD_MEM_TEMP in good:
            row[GPU_POS["mem_temp_c"]] = float(good[FIELD_MEM_TEMP])
        for fid, column in _FIELD_COLUMNS.items():
            if fid in good:
                row[GPU_POS[column]] = int(good[fid])
        tx, rx = good.get(FIELD_PCIE_TX), good.get(FIELD_PCIE_RX)
        if tx is not None or rx is not None:
            if gpu.pcie_prev is not None:
                t0, tx0, rx0 = gpu.pcie_prev
                dt = ts - t0
                if dt > 0:
                    row[GPU_POS["pcie_tx_bytes_s"]] = _rate(tx0, tx, dt)
                    row[GPU_POS["pcie_rx_bytes_s"]] = _rate(rx0, rx, dt)
            gpu.pcie_prev = (ts, tx, rx)

    def close(self) -> None:
        if not self._open:
            return
        for gpu in self._gpus:
            if gpu.gpm is not None:
                gpu.gpm.free()
        self._open = False
        try:
            N.nvmlShutdown()
        except N.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)


def _rate(before: Any, after: Any, dt: float) -> float | None:
    if before is None or after is None or after < before:
        return None  # counter reset (GPU reset, driver reload) or not read: no rate this round
    return (after - before) / dt


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
