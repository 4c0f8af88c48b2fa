"""The whole path, every part real except the GPU: the collector agent (fake NVML replaying
the H100 fixture) -> Redis -> a Celery worker -> PostgreSQL -> the overview's JSON endpoint.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from tests.helpers import ROOT, wait_for
from webapp.core import embedded
from webapp.core.models import RejectedBatch
from webapp.telemetry.models import RollupDirty

pytestmark = pytest.mark.integration

FIXTURE_UUID = "GPU-6b1d4b1e-2f0c-4a5e-9d3b-0a1f7e9c1{:03d}"


def collector(cluster: str, node: str, token: str, *args: str, spool=None) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable, "-m", "collectors", "--source", "nvml", "--fixture", "h100-sxm5-80gb",
            "--cluster", cluster, "--node", node, "--token", token,
            "--broker", settings.CELERY_BROKER_URL, "--spool-dir", str(spool), *args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def stored_samples() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(DISTINCT (gpu_id, ts)) FROM telemetry_gpusample")
        return cur.fetchone()[0]


def test_a_gpu_sample_travels_from_the_collector_to_the_overview(
    committed_node_token, worker_factory, operator_client, tmp_path
):
    cluster, node, token = committed_node_token
    worker_factory()
    agent = collector(cluster, node, token, "--count", "1", spool=tmp_path / "spool")
    assert agent.wait(60) == 0, agent.stderr.read()

    wait_for(lambda: stored_samples() == 8)
    payload = operator_client.get("/api/v1/overview.json?gpus=1").json()

    gpus = {g["uuid"]: g for g in payload["gpus"]}
    busy, idle = gpus[FIXTURE_UUID.format(0)], gpus[FIXTURE_UUID.format(6)]
    # The fixture's first reading: GPU 0 at 100 % and 612.345 W, 61 °C; GPU 6 idle at 69.871 W.
    assert busy["node"] == node and busy["status"] == "busy"
    assert busy["gpu_util"] == 100
    assert busy["power_w"] == pytest.approx(612.345, abs=0.01)
    assert busy["gpu_temp_c"] == 61
    assert idle["gpu_util"] == 0 and idle["status"] == "idle"
    assert idle["power_w"] == pytest.approx(69.871, abs=0.01)
    (summary,) = [c for c in payload["clusters"] if c["name"] == cluster]
    assert (summary["gpus"], summary["busy"], summary["idle"]) == (8, 6, 2)
    heatmap_cells = [v for v in summary["grid"]["util"] if v is not None]
    assert len(heatmap_cells) == 8


@pytest.mark.skipif(
    not settings.VIGIL_EMBEDDED_REDIS,
    reason="restarts the embedded Redis; CELERY_BROKER_URL points at a server tests do not own",
)
def test_redis_restart_while_the_collector_runs_loses_nothing(
    committed_node_token, worker_factory, tmp_path
):
    cluster, node, token = committed_node_token
    worker_factory()
    spool = tmp_path / "spool"
    rounds = 24
    agent = collector(
        cluster, node, token, "--count", str(rounds), "--interval", "0.5", spool=spool
    )
    wait_for(lambda: stored_samples() > 0, timeout=60)

    embedded.redis_stop()
    try:
        wait_for(lambda: spool.exists() and any(spool.iterdir()), timeout=30)  # spooling now
        time.sleep(2)
    finally:
        embedded.redis_start()

    assert agent.wait(120) == 0, agent.stderr.read()
    log = agent.stderr.read()
    assert "spooling" in log
    wait_for(lambda: stored_samples() == rounds * 8, timeout=120, interval=0.5)
    assert not any(spool.iterdir())  # every spooled batch was sent
    # Nothing doubled where no key would stop it: a batch re-sent after the restart stores
    # no GPU row and so marks no rollup minute; nothing was refused.
    assert RollupDirty.objects.count() == rounds
    assert RejectedBatch.objects.count() == 0
