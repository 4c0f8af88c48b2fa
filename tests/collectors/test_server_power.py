"""Measured server power: recorded ipmitool DCMI and Redfish answers parsed, the readers against
a real subprocess and a real HTTP server, and the agent's node row carrying the value."""

from __future__ import annotations

import base64
import json
import logging
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from collectors.backends.base import NODE_POS
from collectors.nodestats import NodeSampler
from collectors.schema import parse_batch
from collectors.serverpower import (
    IpmiReader,
    RedfishReader,
    parse_ipmitool_dcmi,
    parse_redfish_power,
    server_power_reader,
)
from tests.collectors.helpers import TOKEN, collector

DATA = Path(__file__).resolve().parents[1] / "data" / "serverpower"
ACTIVE = (DATA / "ipmitool-dcmi-activated.txt").read_text()
INACTIVE = (DATA / "ipmitool-dcmi-deactivated.txt").read_text()
DMTF = json.loads((DATA / "redfish-power-dmtf-1u.json").read_text())
USER, PASSWORD = "vigil-reader", "bmc-secret-from-env"
PATH = "/redfish/v1/Chassis/1U/Power"


def test_recorded_ipmitool_answers():
    assert parse_ipmitool_dcmi(ACTIVE) == 50.0
    # A deactivated reading repeats placeholder numbers (235 W, timestamp 1970): not a reading.
    assert parse_ipmitool_dcmi(INACTIVE) is None
    assert parse_ipmitool_dcmi("Invalid command\n") is None
    # Some BMCs advertise DCMI and answer 0: a missing value, not an idle server.
    assert parse_ipmitool_dcmi(ACTIVE.replace(" 50 Watts", " 0 Watts")) is None


def test_recorded_redfish_answer():
    assert parse_redfish_power(DMTF) == 344.0
    broken = json.loads(json.dumps(DMTF))
    broken["PowerControl"][0]["PowerConsumedWatts"] = None
    assert parse_redfish_power(broken) is None
    broken["PowerControl"][0]["PowerConsumedWatts"] = 344
    broken["PowerControl"][0]["Status"]["State"] = "Absent"
    assert parse_redfish_power(broken) is None
    assert parse_redfish_power({"PowerControl": []}) is None
    assert parse_redfish_power({"Name": "Power"}) is None
    assert parse_redfish_power(["not", "a", "resource"]) is None


def replay(tmp_path: Path, text: str, exit_code: int = 0) -> list[str]:
    """A command that prints a recorded ipmitool answer (the BMC is the fake, not the code)."""
    out = tmp_path / "answer.txt"
    out.write_text(text)
    code = f"import sys; sys.stdout.write(open({str(out)!r}).read()); sys.exit({exit_code})"
    return [sys.executable, "-c", code]


def test_ipmi_reader_runs_the_command_and_logs_a_failure_once(tmp_path, caplog):
    assert IpmiReader(replay(tmp_path, ACTIVE)).read_w() == 50.0
    failing = IpmiReader(replay(tmp_path, "Could not open device at /dev/ipmi0\n", exit_code=1))
    with caplog.at_level(logging.WARNING, logger="vigil.collector.serverpower"):
        assert [failing.read_w() for _ in range(3)] == [None, None, None]
    assert len([r for r in caplog.records if "not readable" in r.message]) == 1
    assert IpmiReader(["/nonexistent/ipmitool"]).read_w() is None


class _Bmc(BaseHTTPRequestHandler):
    doc: dict = DMTF

    def do_GET(self):  # noqa: N802 (http.server's name)
        want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != want:
            self.send_response(401)
            self.end_headers()
            return
        if self.path != PATH:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps(self.doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def bmc() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Bmc)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_redfish_reader_with_credentials_from_the_environment(bmc):
    env = {"VIGIL_REDFISH_USER": USER, "VIGIL_REDFISH_PASSWORD": PASSWORD}
    assert server_power_reader(f"redfish:{bmc}{PATH}", env).read_w() == 344.0
    wrong = {"VIGIL_REDFISH_USER": USER, "VIGIL_REDFISH_PASSWORD": "guess"}
    assert server_power_reader(f"redfish:{bmc}{PATH}", wrong).read_w() is None
    assert RedfishReader(f"{bmc}/redfish/v1/Chassis/2U/Power", USER, PASSWORD).read_w() is None


def test_reader_spec_is_checked():
    assert server_power_reader("none") is None
    with pytest.raises(ValueError, match="expected ipmi, redfish:URL, auto or none"):
        server_power_reader("bmc")
    with pytest.raises(ValueError, match="must start with http"):
        server_power_reader("redfish:bmc-01/redfish/v1/Chassis/1/Power")


def test_node_row_carries_the_reading_or_null(tmp_path):
    row = NodeSampler(server_power=IpmiReader(replay(tmp_path, ACTIVE))).read(1.7e9, 8)
    assert row[NODE_POS["server_power_w"]] == 50.0
    assert NodeSampler().read(1.7e9, 8)[NODE_POS["server_power_w"]] is None


def test_agent_sends_redfish_power_in_its_node_rows(bmc):
    result = collector(
        "--source", "nvml", "--fixture", "a100-sxm4-80gb", "--cluster", "seren",
        "--node", "gpu-node-01", "--token", TOKEN, "--stdout", "--count", "2",
        "--interval", "0.05", "--server-power", f"redfish:{bmc}{PATH}",
        env={"VIGIL_REDFISH_USER": USER, "VIGIL_REDFISH_PASSWORD": PASSWORD},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    batches = [parse_batch(line) for line in result.stdout.splitlines() if '"samples":' in line]
    rows = [r for b in batches for r in b.node_samples]
    assert len(rows) == 2
    assert [r[NODE_POS["server_power_w"]] for r in rows] == [344.0, 344.0]
    # Credentials never appear in what the agent prints.
    assert PASSWORD not in result.stdout + result.stderr


def test_a_bad_server_power_flag_is_one_line_and_exit_2():
    result = collector("--stdout", "--cluster", "c", "--server-power", "bmc")
    assert result.returncode == 2
    assert "--server-power 'bmc': expected ipmi, redfish:URL, auto or none" in result.stderr
    assert "Traceback" not in result.stderr
