"""A fixture-replaying NVML: the real pynvml wrappers run against Python "C functions".

pynvml resolves every C symbol through `pynvml._nvmlGetFunctionPointer(name)` and loads
`libnvidia-ml.so.1` only while `pynvml.nvmlLib` is None (nvidia-ml-py 13.615.71; see
docs/telemetry.md section 8). `FakeNvml.install()` sets `nvmlLib` to a dummy and swaps
the lookup for one returning the handlers below, which fill the ctypes `byref()` outputs from
a fixture and return NVML status codes. So struct layouts, argument order and the mapping of
status codes to `NVMLError_*` classes are exercised exactly as on a GPU host. These are
private names: nvidia-ml-py is pinned in pyproject.toml and tests/collectors/test_nvml.py
fails loudly if they change.

Fixture (YAML or dict), one entry per GPU in NVML index order, keyed by UUID:

    driver_version: "550.54.15"
    gpus:
      GPU-5c1e…:
        lost_at_step: 3                     # optional: every call returns 15 from step 3 on
        nvmlDeviceGetName: NVIDIA H100 80GB HBM3
        nvmlDeviceGetPowerUsage: {seq: [612000, 655000, 640000]}   # one value per step
        nvmlDeviceGetSerial: {error: 3}     # NVML_ERROR_NOT_SUPPORTED
        nvmlDeviceGetClockInfo(1): 1980     # arguments in parentheses: NVML_CLOCK_SM
        nvmlDeviceGetFieldValues(82): 45    # one key per field id
        nvmlGpmMetricsGet(2): 81.5          # one key per GPM metric id
        xid_events: [{step: 2, xid: 79}]    # optional: Xids the event set delivers at step 2
        nvmlDeviceRegisterEvents: {error: 3}  # optional: this GPU cannot register for events

A call a GPU's entry does not name answers NOT_SUPPORTED, like a feature the board lacks. A
`seq` holds its last value after it runs out. Structs are mappings of their field names, and
`nvmlDeviceGetRemappedRows` a list `[corr, unc, pending, failure]`. The step (index into
every `seq`) starts at 0 and moves only when `advance()` is called: one step per agent round.

A fixture may start with `extends: <name>` (a fixture in the same folder) and list only the
GPU entries it adds or replaces (collectors/fixtures/h100-xid79.yaml).

Event sets: every GPU registers for events unless its entry says otherwise; a scripted Xid is
queued on each set the GPU registered with (at or before its step, like NVML, which reports
only events after registration) once the step is reached, and `nvmlEventSetWait_v2` returns
the queue in order, then NVML_ERROR_TIMEOUT.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import yaml

SUCCESS = pynvml.NVML_SUCCESS
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
UNINITIALIZED = pynvml.NVML_ERROR_UNINITIALIZED

_ERROR_NAMES = {
    getattr(pynvml, n): n.removeprefix("NVML_ERROR_").replace("_", " ").capitalize()
    for n in dir(pynvml)
    if n.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, n), int)
}

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"


def load_fixture(source: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A fixture as a dict, from a dict, a YAML path, or a name in collectors/fixtures/."""
    if isinstance(source, dict):
        return source
    path = Path(source)
    if not path.exists() and not path.suffix:
        path = FIXTURES_DIR / f"{source}.yaml"
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if isinstance(data, dict) and "extends" in data:
        data = _extend(path, data)
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict) or not data["gpus"]:
        raise ValueError(f"{path}: not an NVML fixture (needs a non-empty 'gpus' mapping)")
    return data


def _extend(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """`extends: <fixture>`: the base fixture with these GPUs' entries added or replaced."""
    base = load_fixture(Path(path).parent / f"{data['extends']}.yaml")
    gpus = {uuid: dict(calls or {}) for uuid, calls in base["gpus"].items()}
    for uuid, calls in (data.get("gpus") or {}).items():
        if uuid not in gpus:
            raise ValueError(f"{path}: GPU {uuid} is not in the fixture it extends")
        gpus[uuid].update(calls or {})
    merged = {k: v for k, v in base.items() if k != "gpus"}
    merged.update({k: v for k, v in data.items() if k not in ("extends", "gpus")})
    merged["gpus"] = gpus
    return merged


def _val(x: Any) -> Any:
    """The Python value of a ctypes scalar passed by value (c_uint(3) -> 3)."""
    return getattr(x, "value", x)


def _out(ref: Any) -> Any:
    """The object behind a `byref()` argument (ctypes keeps it as `_obj`)."""
    return ref._obj


class _FakeGpu:
    def __init__(self, index: int, uuid: str, calls: dict[str, Any]) -> None:
        self.index = index
        self.uuid = uuid
        self.lost_at_step = calls.pop("lost_at_step", None)
        self.xid_events = [
            (int(e["step"]), int(e["xid"])) for e in calls.pop("xid_events", None) or []
        ]
        self.calls = calls
        self.struct = pynvml.struct_c_nvmlDevice_t()  # what the handle points at


class FakeNvml:
    """Install with `with FakeNvml(fixture) as fake:`; `fake.advance()` moves time one step."""

    def __init__(self, fixture: str | Path | dict[str, Any]) -> None:
        data = load_fixture(fixture)
        self.driver_version = str(data.get("driver_version", "550.54.15"))
        self.gpus = [
            _FakeGpu(i, uuid, dict(calls or {}))
            for i, (uuid, calls) in enumerate(data["gpus"].items())
        ]
        self._by_addr = {ctypes.addressof(g.struct): g for g in self.gpus}
        self.step = 0
        self.calls_made = 0
        self._samples: dict[int, tuple[Any, _FakeGpu | None, int]] = {}
        self._saved: tuple[Any, Any] | None = None
        # event set address -> (set struct, {gpu index: registration step}, delivered keys)
        self._sets: dict[int, tuple[Any, dict[int, int], set[tuple[int, int]]]] = {}
        self._symbols: dict[str, Callable[..., int]] = {
            "nvmlInitWithFlags": lambda flags: SUCCESS,
            "nvmlShutdown": lambda: SUCCESS,
            "nvmlErrorString": self._error_string,
            "nvmlSystemGetDriverVersion": self._driver_version,
            "nvmlDeviceGetCount_v2": self._count,
            "nvmlDeviceGetHandleByIndex_v2": self._handle_by_index,
            "nvmlDeviceGetUUID": self._uuid,
            "nvmlDeviceGetName": self._string("nvmlDeviceGetName"),
            "nvmlDeviceGetSerial": self._string("nvmlDeviceGetSerial"),
            "nvmlDeviceGetPciInfo_v3": self._struct("nvmlDeviceGetPciInfo_v3"),
            "nvmlDeviceGetMemoryInfo_v2": self._struct("nvmlDeviceGetMemoryInfo_v2"),
            "nvmlDeviceGetUtilizationRates": self._struct("nvmlDeviceGetUtilizationRates"),
            "nvmlDeviceGetRemappedRows": self._remapped_rows,
            "nvmlDeviceGetFieldValues": self._field_values,
            "nvmlGpmQueryDeviceSupport": self._struct("nvmlGpmQueryDeviceSupport"),
            "nvmlGpmSampleAlloc": self._gpm_alloc,
            "nvmlGpmSampleFree": self._gpm_free,
            "nvmlGpmSampleGet": self._gpm_get,
            "nvmlGpmMetricsGet": self._gpm_metrics,
            "nvmlEventSetCreate": self._event_set_create,
            "nvmlEventSetFree": self._event_set_free,
            "nvmlDeviceRegisterEvents": self._register_events,
            "nvmlEventSetWait_v2": self._event_set_wait,
        }
        for name in (
            "nvmlDeviceGetArchitecture",
            "nvmlDeviceGetMinorNumber",
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetEnforcedPowerLimit",
            "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetPcieReplayCounter",
            "nvmlDeviceGetCurrPcieLinkGeneration",
            "nvmlDeviceGetCurrPcieLinkWidth",
            "nvmlDeviceGetPerformanceState",
        ):
            self._symbols[name] = self._scalar(name)
        for name in (
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetTotalEccErrors",
        ):
            self._symbols[name] = self._scalar_with_args(name)

    # --- installation ----------------------------------------------------------------------

    def install(self) -> FakeNvml:
        if self._saved is not None:
            return self
        self._saved = (pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer)
        # A non-None nvmlLib makes _LoadNvmlLibrary skip CDLL("libnvidia-ml.so.1").
        pynvml.nvmlLib = self
        pynvml._nvmlGetFunctionPointer = self._lookup
        # Real function pointers cached by an earlier session must not leak in (or out).
        pynvml._nvmlGetFunctionPointer_cache.clear()
        return self

    def uninstall(self) -> None:
        if self._saved is None:
            return
        pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer = self._saved
        pynvml._nvmlGetFunctionPointer_cache.clear()
        self._saved = None

    def __enter__(self) -> FakeNvml:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def advance(self, steps: int = 1) -> None:
        """Move the fixture's clock: every `seq` and `lost_at_step` is read at this step."""
        self.step += steps

    def _lookup(self, name: str) -> Callable[..., int]:
        try:
            fn = self._symbols[name]
        except KeyError:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND) from None
        self.calls_made += 1
        return fn

    # --- fixture lookups -------------------------------------------------------------------

    def _gpu(self, handle: Any) -> _FakeGpu | None:
        try:
            return self._by_addr.get(ctypes.addressof(handle.contents))
        except (ValueError, AttributeError):
            return None

    def _answer(self, gpu: _FakeGpu, key: str) -> tuple[int, Any]:
        """(status, value) of `key` for `gpu` at the current step."""
        if gpu.lost_at_step is not None and self.step >= gpu.lost_at_step:
            return GPU_IS_LOST, None
        if key not in gpu.calls:
            return NOT_SUPPORTED, None
        value = gpu.calls[key]
        if isinstance(value, dict) and "seq" in value:
            seq = value["seq"]
            value = seq[min(self.step, len(seq) - 1)]
        if isinstance(value, dict) and "error" in value:
            return int(value["error"]), None
        return SUCCESS, value

    def _device_call(self, handle: Any, key: str, fill: Callable[[Any], None]) -> int:
        gpu = self._gpu(handle)
        if gpu is None:
            return INVALID_ARGUMENT
        status, value = self._answer(gpu, key)
        if status == SUCCESS:
            fill(value)
        return status

    # --- C functions -----------------------------------------------------------------------

    def _error_string(self, code: Any) -> bytes:
        code = _val(code)
        return _ERROR_NAMES.get(code, f"Unknown error {code}").encode()

    def _driver_version(self, buf: Any, size: Any) -> int:
        buf.value = self.driver_version.encode()
        return SUCCESS

    def _count(self, ref: Any) -> int:
        _out(ref).value = len(self.gpus)
        return SUCCESS

    def _handle_by_index(self, index: Any, ref: Any) -> int:
        i = _val(index)
        if not 0 <= i < len(self.gpus):
            return INVALID_ARGUMENT
        gpu = self.gpus[i]
        if gpu.lost_at_step is not None and self.step >= gpu.lost_at_step:
            return GPU_IS_LOST
        _out(ref).contents = gpu.struct
        return SUCCESS

    def _uuid(self, handle: Any, buf: Any, size: Any) -> int:
        gpu = self._gpu(handle)
        if gpu is None:
            return INVALID_ARGUMENT
        if gpu.lost_at_step is not None and self.step >= gpu.lost_at_step:
            return GPU_IS_LOST
        buf.value = gpu.uuid.encode()
        return SUCCESS

    def _string(self, key: str) -> Callable[..., int]:
        def fn(handle: Any, buf: Any, size: Any) -> int:
            def fill(v: Any) -> None:
                buf.value = str(v).encode()

            return self._device_call(handle, key, fill)

        return fn

    def _struct(self, key: str) -> Callable[..., int]:
        def fn(handle: Any, ref: Any) -> int:
            def fill(v: dict[str, Any]) -> None:
                target = _out(ref)
                for name, item in v.items():
                    setattr(target, name, item.encode() if isinstance(item, str) else item)

            return self._device_call(handle, key, fill)

        return fn

    def _scalar(self, key: str) -> Callable[..., int]:
        def fn(handle: Any, ref: Any) -> int:
            def fill(v: Any) -> None:
                _out(ref).value = v

            return self._device_call(handle, key, fill)

        return fn

    def _scalar_with_args(self, name: str) -> Callable[..., int]:
        def fn(handle: Any, *args: Any) -> int:
            *inputs, ref = args
            key = f"{name}({','.join(str(_val(a)) for a in inputs)})"

            def fill(v: Any) -> None:
                _out(ref).value = v

            return self._device_call(handle, key, fill)

        return fn

    def _remapped_rows(self, handle: Any, *refs: Any) -> int:
        def fill(v: list[int]) -> None:
            for ref, item in zip(refs, v, strict=True):
                _out(ref).value = item

        return self._device_call(handle, "nvmlDeviceGetRemappedRows", fill)

    def _field_values(self, handle: Any, count: Any, ref: Any) -> int:
        gpu = self._gpu(handle)
        if gpu is None:
            return INVALID_ARGUMENT
        if gpu.lost_at_step is not None and self.step >= gpu.lost_at_step:
            return GPU_IS_LOST
        values = _out(ref)
        # Each entry carries its own status: one unsupported field does not fail the call.
        for i in range(_val(count)):
            entry = values[i]
            status, value = self._answer(gpu, f"nvmlDeviceGetFieldValues({entry.fieldId})")
            entry.nvmlReturn = status
            if status != SUCCESS:
                continue
            if isinstance(value, float):
                entry.valueType = pynvml.NVML_VALUE_TYPE_DOUBLE
                entry.value.dVal = value
            else:
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                entry.value.ullVal = int(value)
        return SUCCESS

    def _gpm_alloc(self, ref: Any) -> int:
        sample = pynvml.struct_c_nvmlGpmSample_t()
        _out(ref).contents = sample
        self._samples[ctypes.addressof(sample)] = (sample, None, -1)
        return SUCCESS

    def _gpm_free(self, ptr: Any) -> int:
        return (
            SUCCESS if self._samples.pop(ctypes.addressof(ptr.contents), None) else INVALID_ARGUMENT
        )

    def _gpm_get(self, handle: Any, ptr: Any) -> int:
        gpu = self._gpu(handle)
        addr = ctypes.addressof(ptr.contents)
        if gpu is None or addr not in self._samples:
            return INVALID_ARGUMENT
        status, support = self._answer(gpu, "nvmlGpmQueryDeviceSupport")
        if status != SUCCESS:
            return status
        if not support.get("isSupportedDevice"):
            return NOT_SUPPORTED
        self._samples[addr] = (self._samples[addr][0], gpu, self.step)
        return SUCCESS

    def _gpm_metrics(self, ref: Any) -> int:
        mg = _out(ref)
        first = self._samples.get(ctypes.addressof(mg.sample1.contents))
        second = self._samples.get(ctypes.addressof(mg.sample2.contents))
        if first is None or second is None or first[1] is None or first[1] is not second[1]:
            return INVALID_ARGUMENT
        gpu = second[1]
        for i in range(mg.numMetrics):
            metric = mg.metrics[i]
            status, value = self._answer(gpu, f"nvmlGpmMetricsGet({metric.metricId})")
            metric.nvmlReturn = status
            if status == SUCCESS:
                metric.value = float(value)
            elif status == GPU_IS_LOST:
                return GPU_IS_LOST
        return SUCCESS

    def _event_set_create(self, ref: Any) -> int:
        es = pynvml.struct_c_nvmlEventSet_t()
        _out(ref).contents = es
        self._sets[ctypes.addressof(es)] = (es, {}, set())
        return SUCCESS

    def _event_set_free(self, es: Any) -> int:
        return SUCCESS if self._sets.pop(ctypes.addressof(es.contents), None) else INVALID_ARGUMENT

    def _register_events(self, handle: Any, types: Any, es: Any) -> int:
        gpu = self._gpu(handle)
        entry = self._sets.get(ctypes.addressof(es.contents))
        if gpu is None or entry is None:
            return INVALID_ARGUMENT
        if "nvmlDeviceRegisterEvents" in gpu.calls or (
            gpu.lost_at_step is not None and self.step >= gpu.lost_at_step
        ):
            status, _ = self._answer(gpu, "nvmlDeviceRegisterEvents")
            if status != SUCCESS:
                return status
        entry[1][gpu.index] = self.step
        return SUCCESS

    def _event_set_wait(self, es: Any, ref: Any, timeout_ms: Any) -> int:
        entry = self._sets.get(ctypes.addressof(es.contents))
        if entry is None:
            return INVALID_ARGUMENT
        _, registered, delivered = entry
        for gpu in self.gpus:
            since = registered.get(gpu.index)
            if since is None:
                continue
            for k, (step, xid) in enumerate(gpu.xid_events):
                if since <= step <= self.step and (gpu.index, k) not in delivered:
                    delivered.add((gpu.index, k))
                    data = _out(ref)
                    data.device = ctypes.pointer(gpu.struct)
                    data.eventType = pynvml.nvmlEventTypeXidCriticalError
                    data.eventData = xid
                    return SUCCESS
        return pynvml.NVML_ERROR_TIMEOUT
