"""The recorder: what it writes from a (fake) GPU replays into the same rows."""

from __future__ import annotations

import pytest

from collectors import record
from collectors.backends.nvml import NvmlBackend
from collectors.testing.fake_nvml import FakeNvml, load_fixture

TIMES = [1_700_000_000.0 + 10 * k for k in range(6)]


def replay_rows(fixture) -> list[list[list]]:
    """GPU rows of each round when the agent's nvml backend reads `fixture`."""
    out = []
    with FakeNvml(fixture) as fake:
        backend = NvmlBackend("seren", "gpu-node-01")
        for ts in TIMES:
            (reading,) = backend.read(ts)
            out.append(reading.gpu_rows)
            fake.advance()
        backend.close()
    return out


@pytest.mark.parametrize("name", ["a100-sxm4-80gb", "h100-sxm5-80gb"])
def test_recording_replays_into_the_same_rows(name, tmp_path):
    clock = iter(TIMES)
    with FakeNvml(name) as fake:
        recorded = record.record(
            len(TIMES), 0.0, on_round=fake.advance, clock=lambda: next(clock), sleep=lambda s: None
        )
    path = tmp_path / "recorded.yaml"
    record.dump(recorded, path, len(TIMES), 0.0)
    assert replay_rows(load_fixture(path)) == replay_rows(name)


def test_recording_marks_the_lost_gpu_and_unsupported_calls(tmp_path):
    out = tmp_path / "node.yaml"
    assert record.main(["--out", str(out), "--samples", "5", "--interval", "0",
                        "--fixture", "a100-sxm4-80gb"]) == 0  # fmt: skip
    fixture = load_fixture(out)
    gpus = list(fixture["gpus"].values())
    assert fixture["driver_version"] == "535.129.03"
    assert gpus[7]["lost_at_step"] == 3
    assert gpus[0]["nvmlDeviceGetFieldValues(197)"] == {"error": 3}
    assert gpus[6]["nvmlDeviceGetSerial"] == {"error": 3}
    assert gpus[0]["nvmlDeviceGetPowerUsage"]["seq"][:2] == [352100, 371480]


def test_recording_without_a_driver_fails_with_one_line(tmp_path, capsys):
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this host has an NVIDIA driver")
    assert record.main(["--out", str(tmp_path / "x.yaml")]) == 3
    assert "collector disabled: no NVIDIA driver" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()
