"""The agent's own /metrics (--metrics-port): dcgm-exporter's names, labels and units, served
by a real HTTP server from the fake NVML's readings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.agent import Agent
from collectors.backends.base import GPU_POS
from collectors.backends.dcgm import MIB, parse_metrics
from collectors.backends.nvml import NvmlBackend
from collectors.exporter import LatestReadings, RecordingBackend, serve
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-node-token-of-enough-length"
DCGM_PAGE = ROOT / "collectors" / "fixtures" / "dcgm-exporter-h100.txt"
BUSY_UUID = "GPU-6b1d4b1e-2f0c-4a5e-9d3b-0a1f7e9c1000"  # h100-sxm5-80gb.yaml, GPU 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def series(text: str) -> dict[str, dict[str, tuple[dict, float]]]:
    """{family: {gpu index: (labels, value)}}."""
    out: dict[str, dict[str, tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "gpu" in s.labels:
                out.setdefault(s.name, {})[s.labels["gpu"]] = (s.labels, s.value)
    return out


@pytest.fixture
def exporter(fake_nvml) -> Iterator[tuple[int, LatestReadings, object]]:
    """The fake H100 node sampled through the exporter's store, one round done."""
    fake = fake_nvml("h100-sxm5-80gb")
    latest = LatestReadings()
    port = free_port()
    server, _ = serve(latest, port)
    backend = NvmlBackend("seren", "gpu-h100-001")
    agent = Agent(
        RecordingBackend(backend, latest),
        lambda c, n: TOKEN,
        lambda _i, _t: None,
        interval_s=0.01,
        on_round=fake.advance,
    )
    agent.run(1)
    yield port, latest, agent
    server.shutdown()
    server.server_close()
    backend.close()


def test_the_latest_reading_is_served_in_dcgm_exporter_names_and_units(exporter):
    port, _, _ = exporter
    m = series(scrape(port))
    labels, util = m["DCGM_FI_DEV_GPU_UTIL"]["0"]
    # dcgm-exporter's label set (tests' recorded page), for the fixture's GPU 0.
    assert labels == {
        "gpu": "0",
        "UUID": BUSY_UUID,
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "gpu-h100-001",
    }
    assert util == 100.0  # percent, as DCGM_FI_DEV_GPU_UTIL
    assert m["DCGM_FI_DEV_POWER_USAGE"]["0"][1] == pytest.approx(612.345)  # 612345 mW -> W
    assert m["DCGM_FI_DEV_GPU_TEMP"]["0"][1] == 61.0
    assert m["DCGM_FI_DEV_FB_USED"]["0"][1] == 72314.0  # 75826724864 bytes -> MiB
    assert m["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]["0"][1] == 91234567890  # mJ, unrenamed
    assert m["DCGM_FI_DEV_XID_ERRORS"]["0"][1] == 0  # no Xid yet
    assert m["DCGM_FI_DEV_GPU_UTIL"]["7"][1] == 0.0  # an idle GPU of the fixture
    assert len(m["DCGM_FI_DEV_GPU_UTIL"]) == 8


def test_vigils_own_dcgm_source_reads_the_page_back_as_the_same_row(exporter):
    """A Vigil agent with --source dcgm pointed at another agent's /metrics stores what the
    first one read: the page is dcgm-exporter's format, not a look-alike."""
    port, latest, _ = exporter
    [reading], _ = latest.snapshot()
    gpus, rows = parse_metrics(scrape(port), reading.gpu_rows[0][1])
    assert [g.uuid for g in gpus] == [g.uuid for g in reading.gpus]
    for column in ("gpu_util", "power_w", "energy_mj", "gpu_temp_c", "sm_active", "pcie_gen"):
        assert [r[GPU_POS[column]] for r in rows] == [
            r[GPU_POS[column]] for r in reading.gpu_rows
        ], column
    # DCGM gives the framebuffer in whole MiB.
    used = GPU_POS["fb_used_bytes"]
    assert [r[used] // MIB for r in rows] == [r[used] // MIB for r in reading.gpu_rows]


def test_the_last_xid_of_each_gpu_is_shown_as_dcgm_does(exporter):
    port, latest, _ = exporter
    batch = {
        "cluster": "seren",
        "node": "gpu-h100-001",
        "gpu_events": [
            {"ts": 1_700_000_001.0, "kind": "xid", "gpu_index": 3, "xid": 79},
            {"ts": 1_700_000_000.0, "kind": "xid", "gpu_index": 3, "xid": 13},
            {"ts": 1_700_000_000.0, "kind": "ecc_dbe", "gpu_index": 2},
        ],
    }
    latest.observe_node_events(json.dumps(batch))
    m = series(scrape(port))
    assert m["DCGM_FI_DEV_XID_ERRORS"]["3"][1] == 79  # the newest, whatever the order sent
    assert m["DCGM_FI_DEV_XID_ERRORS"]["2"][1] == 0


def test_agent_serves_its_metrics_while_it_runs(tmp_path):
    """`--metrics-port` as an operator runs it: the Xid NVML reports reaches the page."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "collectors", "--source", "nvml", "--fixture", "h100-xid79",
            "--cluster", "seren", "--node", "gpu-node-01", "--token", TOKEN, "--stdout",
            "--interval", "0.2", "--metrics-port", str(port),
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def xid_shown() -> float | None:
            try:
                m = series(scrape(port))
            except OSError:
                return None
            return m.get("DCGM_FI_DEV_XID_ERRORS", {}).get("3", (None, None))[1]

        assert wait_for(xid_shown, timeout=30) == 79

        def powered() -> set[str]:
            return set(series(scrape(port))["DCGM_FI_DEV_POWER_USAGE"])

        # From step 3 GPU 3 is off the bus: its series go, as dcgm-exporter's would.
        assert wait_for(lambda: "3" not in powered(), timeout=30)
        m = series(scrape(port))
        assert m["DCGM_FI_DEV_POWER_USAGE"]["0"][0]["Hostname"] == "gpu-node-01"
        assert len(m["DCGM_FI_DEV_POWER_USAGE"]) == 7
        assert m["DCGM_FI_DEV_XID_ERRORS"]["0"][1] == 0
        assert m["DCGM_FI_DEV_XID_ERRORS"]["3"][1] == 79  # still there for a later scrape
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr


def test_a_port_in_use_is_refused_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable, "-m", "collectors", "--fixture", "h100-sxm5-80gb",
                "--cluster", "seren", "--stdout", "--count", "1", "--metrics-port", str(port),
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 2
    assert f"--metrics-port {port} on 127.0.0.1:" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""  # nothing was sampled


def test_metrics_addr_needs_a_port():
    result = subprocess.run(
        [sys.executable, "-m", "collectors", "--cluster", "seren", "--stdout",
         "--metrics-addr", "0.0.0.0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--metrics-addr only applies with --metrics-port" in result.stderr
