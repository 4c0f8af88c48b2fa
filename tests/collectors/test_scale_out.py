"""Scale-out on one machine: 4 ingest workers and 4 collector processes at once, every
sample stored exactly once (README "Running at scale")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.helpers import WorkerProcess, database_url, wait_for
from webapp.core.models import RejectedBatch
from webapp.fleet import services as fleet_services

ROOT = Path(__file__).resolve().parents[2]
WORKERS = COLLECTORS = 4
NODES, GPUS, ROUNDS = 4, 8, 6  # per collector: 4 nodes x 8 GPUs, 6 rounds of one batch each


@pytest.fixture
def four_workers(transactional_db, broker, tmp_path):
    """Four real `celery worker` processes on the ingest queue, started side by side."""
    workers = [WorkerProcess(database_url(), tmp_path / f"worker{i}.log") for i in range(WORKERS)]
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(WorkerProcess.start, workers))
        yield workers
    finally:
        for w in workers:
            w.stop()


@pytest.mark.integration
def test_four_collectors_into_four_workers_store_every_sample_once(four_workers, tmp_path):
    clusters = [f"scale{i}" for i in range(COLLECTORS)]
    tokens = {
        f"{c}/{c}-node-{n:03d}": fleet_services.node_token_issue(c, f"{c}-node-{n:03d}")
        for c in clusters
        for n in range(1, NODES + 1)
    }
    token_file = tmp_path / "tokens.json"
    token_file.write_text(json.dumps(tokens))
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "collectors",
                "--source",
                "simulated",
                "--clusters",
                c,
                "--nodes-per-cluster",
                str(NODES),
                "--gpus-per-node",
                str(GPUS),
                "--jobs",
                "none",
                "--no-sim-failures",
                "--seed",
                str(i),
                "--count",
                str(ROUNDS),
                "--interval",
                "15",
                "--token-file",
                str(token_file),
                "--broker",
                settings.CELERY_BROKER_URL,
                "--spool-dir",
                str(tmp_path / f"spool{i}"),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for i, c in enumerate(clusters)
    ]
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode(errors="replace")

    expected = COLLECTORS * NODES * GPUS * ROUNDS

    def stored() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM telemetry_gpusample")
            return cur.fetchone()[0]

    assert wait_for(lambda: stored() >= expected, timeout=90, interval=0.2)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*), count(DISTINCT (gpu_id, ts)), count(DISTINCT gpu_id) "
            "FROM telemetry_gpusample"
        )
        total, distinct, gpus = cur.fetchone()
        # Every GPU has each of its collector's rounds once: none lost, none twice.
        cur.execute(
            "SELECT count(*) FROM (SELECT gpu_id FROM telemetry_gpusample GROUP BY gpu_id "
            "HAVING count(*) <> %s OR count(DISTINCT ts) <> %s) AS wrong",
            [ROUNDS, ROUNDS],
        )
        wrong_gpus = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM telemetry_nodesample")
        node_rows = cur.fetchone()[0]
    assert (total, distinct, gpus) == (expected, expected, COLLECTORS * NODES * GPUS)
    assert wrong_gpus == 0
    assert node_rows == COLLECTORS * NODES * ROUNDS
    assert not RejectedBatch.objects.exists()
    # All four consumed the one ingest queue side by side, and none of them fell over.
    assert all(w.proc is not None and w.proc.poll() is None for w in four_workers)
