"""A real Alertmanager (Debian's `prometheus-alertmanager`; the binary is not called
`alertmanager`) started the way reference/real-parts.md says: its own config and data folder,
127.0.0.1 on a private port, no gossip cluster. With helpers for its v2 API, so the alerts
app can check what Vigil posted. Skipped with the reason where the package is missing,
required where VIGIL_REQUIRE_REAL_PARTS names `alertmanager` (tests/realparts.py)."""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.prometheus import Daemon, binary
from tests.realparts import missing

# A route with one receiver that sends nothing: Alertmanager holds, groups and lists alerts;
# the tests read them back from its API.
MINIMAL_CONFIG = {
    "route": {"receiver": "vigil-tests", "group_wait": "1s", "group_interval": "1s"},
    "receivers": [{"name": "vigil-tests"}],
}


class Alertmanager(Daemon):
    name = "alertmanager"

    def __init__(self, directory: Path, config: dict | None = None) -> None:
        super().__init__(directory)
        (directory / "am.yml").write_text(yaml.safe_dump(config or MINIMAL_CONFIG))

    def start(self) -> None:
        path = binary("prometheus-alertmanager")
        if path is None:
            missing(
                "alertmanager",
                "prometheus-alertmanager not found: install Debian's prometheus-alertmanager "
                "(make test-deps)",
            )
        self.launch(
            [
                path,
                f"--config.file={self.dir / 'am.yml'}",
                f"--storage.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
            ]
        )

    def post_alerts(self, alerts: list[dict]) -> int:
        """POST /api/v2/alerts: a list of {labels, annotations, startsAt, endsAt}; the status."""
        request = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status

    def alerts(self, *, active: bool = True, **filters: str) -> list[dict]:
        """GET /api/v2/alerts, each with its labels, fingerprint and status.state; `filters`
        are label matchers (alertname="VigilGpuLost"). `active=False` lists silenced,
        inhibited and unprocessed ones too."""
        params: list[tuple[str, str]] = [("filter", f'{k}="{v}"') for k, v in filters.items()]
        if not active:
            params += [("silenced", "true"), ("inhibited", "true"), ("unprocessed", "true")]
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts{query}", timeout=10) as response:
            return json.load(response)


@pytest.fixture
def alertmanager() -> Iterator[Alertmanager]:
    """A running Alertmanager of this test alone (MINIMAL_CONFIG)."""
    directory = Path(tempfile.mkdtemp(prefix="vigil-am-"))
    server = Alertmanager(directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
