"""The nvml backend against the real pynvml wrappers, with the GPU replayed from fixtures."""

from __future__ import annotations

import ctypes.util
import logging
from importlib import metadata

import pynvml
import pytest

from collectors.agent import Agent
from collectors.backends.base import GPU_POS, NODE_POS
from collectors.backends.nvml import NvmlBackend, NvmlUnavailable
from collectors.schema import parse_batch

TOKEN = "t" * 32


def col(row: list, name: str):
    return row[GPU_POS[name]]


def test_pynvml_private_names_the_fake_relies_on_still_exist(fake_nvml, a100_fixture):
    """If this fails, nvidia-ml-py changed what collectors/testing/fake_nvml.py patches."""
    assert metadata.version("nvidia-ml-py") == "13.615.71", "pinned in pyproject.toml"
    for name in ("nvmlLib", "_nvmlGetFunctionPointer", "_nvmlGetFunctionPointer_cache"):
        assert hasattr(pynvml, name), f"pynvml.{name} is gone"
    next(iter(a100_fixture["gpus"].values()))["nvmlDeviceGetPowerUsage"] = {"error": 3}
    fake = fake_nvml(a100_fixture)
    pynvml.nvmlInit()  # must not try to load libnvidia-ml.so.1
    assert pynvml.nvmlDeviceGetCount() == 8
    assert fake.calls_made >= 2, "pynvml no longer resolves symbols via _nvmlGetFunctionPointer"
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 100  # struct filled via byref
    with pytest.raises(pynvml.NVMLError_NotSupported, match="Not Supported"):
        pynvml.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetFanSpeed_v2(handle, 0)


def test_h100_rows_carry_nvml_and_gpm_values_in_wire_units(fake_nvml):
    fake = fake_nvml("h100-sxm5-80gb")
    backend = NvmlBackend("seren", "gpu-node-01")
    (first,) = backend.read(1_700_000_000.0)
    fake.advance()
    (second,) = backend.read(1_700_000_010.0)
    backend.close()

    assert [g.name for g in first.gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    assert first.gpus[0].pci_bus_id == "00000000:18:00.0"
    assert first.gpus[0].memory_total_bytes == 85520809984
    row = first.gpu_rows[0]
    assert col(row, "gpu_util") == 100.0
    assert col(row, "power_w") == pytest.approx(612.345)  # mW -> W
    assert col(row, "power_limit_w") == 700.0
    assert col(row, "energy_mj") == 91234567890
    assert col(row, "fb_used_bytes") == 75826724864
    assert col(row, "sm_active") == pytest.approx(0.785)  # GPM 78.5 % -> ratio
    assert col(row, "tensor_active") == pytest.approx(0.5225)
    assert col(row, "mem_temp_c") == 58.0  # field value 82
    assert col(row, "pcie_gen") == 5
    # PCIe rates need two counter readings: null first, bytes/s after.
    assert col(row, "pcie_tx_bytes_s") is None
    assert col(second.gpu_rows[0], "pcie_tx_bytes_s") == pytest.approx(250_000_000 / 10)
    assert col(second.gpu_rows[0], "power_w") == pytest.approx(655.12)
    assert col(second.gpu_rows[3], "ecc_sbe_vol") == 0
    assert second.node_row[NODE_POS["gpu_count"]] == 8
    idle = first.gpu_rows[7]
    assert col(idle, "gpu_util") == 0.0 and col(idle, "sm_active") == 0.0


def test_ampere_has_no_gpm_so_profiling_columns_are_null_not_zero(fake_nvml):
    fake_nvml("a100-sxm4-80gb")
    backend = NvmlBackend("seren", "gpu-node-01")
    (reading,) = backend.read(1_700_000_000.0)
    backend.close()
    for row in reading.gpu_rows:
        for name in ("sm_active", "sm_occupancy", "tensor_active", "dram_active"):
            assert col(row, name) is None
        # PCIe byte counters answer NOT_SUPPORTED on this driver: null, never 0.
        assert col(row, "pcie_tx_bytes_s") is None
        assert col(row, "gpu_util") is not None
    assert reading.gpus[6].serial is None  # serial NOT_SUPPORTED on that board


def test_a_lost_gpu_stops_its_rows_and_the_node_reports_one_gpu_fewer(fake_nvml, caplog):
    fake = fake_nvml("a100-sxm4-80gb")  # GPU 7 falls off the bus at step 3
    backend = NvmlBackend("seren", "gpu-node-01")
    counts, indices = [], []
    with caplog.at_level(logging.WARNING, logger="vigil.collector.nvml"):
        for step in range(6):
            (reading,) = backend.read(1_700_000_000.0 + 10 * step)
            counts.append(reading.node_row[NODE_POS["gpu_count"]])
            indices.append([r[0] for r in reading.gpu_rows])
            fake.advance()
    backend.close()
    assert counts == [8, 8, 8, 7, 7, 7]
    assert indices[2] == list(range(8)) and indices[3] == list(range(7))
    lost = [r for r in caplog.records if "lost" in r.getMessage()]
    assert len(lost) == 1 and "GPU-1f3e5c7a-8b9d-4e2f-a1c3-5d7e9f0b2007" in lost[0].getMessage()


def test_a_call_that_stops_being_supported_becomes_null_and_is_not_retried(fake_nvml, a100_fixture):
    gpu0 = next(iter(a100_fixture["gpus"].values()))
    gpu0["nvmlDeviceGetPcieReplayCounter"] = {"seq": [0, {"error": 3}, 0]}
    fake = fake_nvml(a100_fixture)
    backend = NvmlBackend("seren", "gpu-node-01")
    values = []
    for step in range(3):
        (reading,) = backend.read(1_700_000_000.0 + step)
        values.append(col(reading.gpu_rows[0], "pcie_replay"))
        fake.advance()
    backend.close()
    assert values == [0, None, None]


def test_batches_built_from_nvml_rows_pass_the_wire_schema(fake_nvml):
    fake = fake_nvml("a100-sxm4-80gb")
    sent: list[str] = []
    backend = NvmlBackend("seren", "gpu-node-01")
    agent = Agent(
        backend,
        lambda c, n: TOKEN,
        lambda _id, text: sent.append(text),
        interval_s=0.001,
        intervals_per_batch=2,
        on_round=fake.advance,
    )
    agent.run(5)
    backend.close()
    assert len(sent) == 3  # 2 + 2 + the partial last one
    batches = [parse_batch(text) for text in sent]
    assert [len(b.node_samples) for b in batches] == [2, 2, 1]
    assert [len(b.samples) for b in batches] == [16, 15, 7]  # GPU 7 lost from step 3
    assert all(b.source == "nvml" for b in batches)


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver"
)
def test_without_a_driver_the_backend_says_collector_disabled():
    assert pynvml.nvmlLib is None, "a fake NVML leaked from another test"
    with pytest.raises(NvmlUnavailable, match="collector disabled: no NVIDIA driver"):
        NvmlBackend("seren", "gpu-node-01")
