"""The dcgm source: recorded-style dcgm-exporter text, served over real HTTP."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.agent import Agent
from collectors.backends.base import GPU_POS, NODE_POS
from collectors.backends.dcgm import DcgmBackend, parse_metrics
from collectors.schema import parse_batch

FIXTURE = Path(__file__).resolve().parents[2] / "collectors" / "fixtures" / "dcgm-exporter-h100.txt"
TS = 1_700_000_000.0


def col(row: list, name: str):
    return row[GPU_POS[name]]


@pytest.fixture
def exporter() -> Iterator[dict]:
    """A real HTTP server answering /metrics with whatever `state["body"]` holds."""
    state = {"body": FIXTURE.read_bytes(), "status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(state["status"])
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(state["body"])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    yield state
    server.shutdown()
    server.server_close()


def test_exporter_page_becomes_one_row_per_gpu_in_our_units():
    gpus, rows = parse_metrics(FIXTURE.read_text(), TS)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[0].uuid == "GPU-9a0c33e4-52d1-8b7e-4f10-6a2c1e8d0000"
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].pci_bus_id == "00000000:18:00.0"
    # Series duplicated per Slurm job (GPU 2 runs two jobs) still give one row per GPU.
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    row = rows[0]
    assert col(row, "fb_used_bytes") == 72314 * 2**20  # MiB -> bytes
    assert col(row, "fb_total_bytes") == (72314 + 8704 + 541) * 2**20  # used + free + reserved
    assert gpus[0].memory_total_bytes == col(row, "fb_total_bytes")
    assert col(row, "power_w") == pytest.approx(612.345)
    assert col(row, "energy_mj") == 91234567890  # a counter: the parser calls it ..._total
    assert col(row, "sm_active") == pytest.approx(0.785012)
    assert col(row, "clocks_event_reasons") == 4  # old name CLOCK_THROTTLE_REASONS
    assert col(rows[2], "ecc_sbe_agg") == 16
    assert col(rows[2], "pcie_replay") == 3


def test_dcgm_blank_sentinels_become_null_not_huge_numbers():
    _, rows = parse_metrics(FIXTURE.read_text(), TS)
    idle = rows[3]
    assert col(idle, "mem_temp_c") is None  # int64 9223372036854775794 (NOT_SUPPORTED)
    assert col(idle, "tensor_active") is None  # double 140737488355328.0 (FP64 blank)
    assert col(idle, "gpu_temp_c") == 31.0
    assert col(idle, "remap_pending") is None  # not exported at all: null, never 0


def test_new_dcgm_field_names_map_like_the_old_ones():
    text = (
        "# TYPE DCGM_FI_DEV_BOARD_POWER_WATTS gauge\n"
        'DCGM_FI_DEV_BOARD_POWER_WATTS{gpu="0",UUID="GPU-new-0",modelName="NVIDIA B200"} 812.5\n'
        "# TYPE DCGM_FI_DEV_GPU_TEMP_CELSIUS gauge\n"
        'DCGM_FI_DEV_GPU_TEMP_CELSIUS{gpu="0",UUID="GPU-new-0",modelName="NVIDIA B200"} 54\n'
        "# TYPE DCGM_FI_DEV_CLOCKS_EVENT_REASONS gauge\n"
        'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="0",UUID="GPU-new-0",modelName="NVIDIA B200"} 1\n'
        "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-new-0",GPU_I_ID="1",GPU_I_PROFILE="1g.23gb"} 0.5\n'
    )
    gpus, rows = parse_metrics(text, TS)
    assert gpus[0].uuid == "GPU-new-0"
    assert col(rows[0], "power_w") == 812.5
    assert col(rows[0], "gpu_temp_c") == 54.0
    assert col(rows[0], "clocks_event_reasons") == 1
    assert col(rows[0], "sm_active") is None  # MIG instance series are not the GPU's value


def test_agent_scrapes_a_live_exporter_and_sends_valid_batches(exporter):
    sent: list[str] = []
    backend = DcgmBackend("kalos", "gpu-h100-017", exporter["url"])
    Agent(backend, lambda c, n: "k" * 24, lambda _i, t: sent.append(t), interval_s=0.01).run(2)
    batches = [parse_batch(t) for t in sent]
    assert len(batches) == 2
    assert all(b.source == "dcgm" and len(b.samples) == 4 for b in batches)
    assert batches[0].node_samples[0][NODE_POS["gpu_count"]] == 4


def test_exporter_down_gives_node_rows_without_gpus_and_recovers(exporter, caplog):
    backend = DcgmBackend("kalos", "gpu-h100-017", exporter["url"], timeout_s=2)
    (ok,) = backend.read(TS)
    exporter["status"] = 503
    (down,) = backend.read(TS + 10)
    exporter["status"] = 200
    (back,) = backend.read(TS + 20)
    assert len(ok.gpu_rows) == 4
    assert down.gpu_rows == [] and down.node_row[NODE_POS["gpu_count"]] is None
    assert len(back.gpu_rows) == 4
    assert any("not readable" in r.getMessage() for r in caplog.records)
