"""A real Prometheus (Debian's `prometheus` package) and its promtool, for the tests of
deploy/prometheus/ (reference/real-parts.md): a private port on 127.0.0.1, its own config and
data folder, stopped after the test. Skipped with the reason where the package is missing,
required where VIGIL_REQUIRE_REAL_PARTS names `prometheus` (tests/realparts.py)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, wait_for
from tests.realparts import missing

DEPLOY = ROOT / "deploy" / "prometheus"


def binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/local/bin/{name}") if Path(p).exists()), None
    )


def require(name: str = "prometheus") -> str:
    """The path of `name` (prometheus, promtool); skip or fail (realparts) without it."""
    path = binary(name)
    if path is None:
        missing("prometheus", f"{name} not found: install Debian's prometheus (make test-deps)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [require("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def deploy_copy(directory: Path, key: str = "a-scrape-key-of-enough-length") -> Path:
    """deploy/prometheus/ as an operator installs it: copied, with the key file it names."""
    target = directory / "prometheus"
    shutil.copytree(DEPLOY, target)
    (target / "vigil-metrics.key").write_text(key + "\n")
    return target


class Daemon:
    """A server process of one test on 127.0.0.1:<free port>, ready when GET /-/ready answers
    200 (Prometheus and Alertmanager both have it); its output goes to a log file in its
    folder, quoted when it fails to start."""

    name = "daemon"

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / f"{self.name}.log"
        self._proc: subprocess.Popen | None = None

    def launch(self, argv: list[str]) -> None:
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(argv, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(self._ready, timeout=60)
        except AssertionError:
            self.stop()
            raise AssertionError(
                f"{self.name} did not start:\n{self.log.read_text()[-3000:]}"
            ) from None

    def _ready(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)


class Prometheus(Daemon):
    """Prometheus reading `config` (a dict) from its folder, its data in the same folder."""

    name = "prometheus"

    def __init__(self, directory: Path, config: dict) -> None:
        super().__init__(directory)
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> None:
        self.launch(
            [
                require("prometheus"),
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ]
        )

    def api(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's vector: [{"metric": {...}, "value": [ts, "text"]}, ...]."""
        return self.api("query", query=expr)["result"]

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]


@pytest.fixture
def prometheus_dir() -> Iterator[Path]:
    require("prometheus")
    directory = Path(tempfile.mkdtemp(prefix="vigil-prom-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)
