"""The agent reports each GPU's device minor number (/dev/nvidiaN, what Slurm's GRES index
names) beside its PCI bus id, so jobs are attributed GPUs by device; a driver that does not
answer leaves it out (the server then matches by NVML index)."""

from __future__ import annotations

from pathlib import Path

from collectors.backends.dcgm import parse_metrics
from collectors.backends.nvml import NvmlBackend


def test_each_gpu_reports_its_minor_number_in_the_drivers_order(fake_nvml, a100_fixture):
    minors = [2, 3, 0, 1, 6, 7, 4, 5]  # the device files in another order than NVML's
    for gpu, minor in zip(a100_fixture["gpus"].values(), minors, strict=True):
        gpu["nvmlDeviceGetMinorNumber"] = minor
    fake_nvml(a100_fixture)
    backend = NvmlBackend("seren", "gpu-node-01")
    (reading,) = backend.read(1_700_000_000.0)
    backend.close()
    assert [g.minor_number for g in reading.gpus] == minors
    assert [g.index for g in reading.gpus] == list(range(8))
    assert all(g.pci_bus_id for g in reading.gpus)


def test_a_driver_without_minor_numbers_reports_none(fake_nvml, a100_fixture):
    fake_nvml(a100_fixture)  # the fixture has no nvmlDeviceGetMinorNumber: not supported
    backend = NvmlBackend("seren", "gpu-node-01")
    (reading,) = backend.read(1_700_000_000.0)
    backend.close()
    assert {g.minor_number for g in reading.gpus} == {None}


def test_dcgm_exporter_device_label_gives_the_minor_number():
    page = Path(__file__).parents[2] / "collectors" / "fixtures" / "dcgm-exporter-h100.txt"
    infos, _ = parse_metrics(page.read_text(), 1_700_000_000.0)
    assert [(g.index, g.minor_number) for g in infos][:3] == [(0, 0), (1, 1), (2, 2)]
