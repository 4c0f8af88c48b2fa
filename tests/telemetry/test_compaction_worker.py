"""Compaction with real parts: a Celery worker subprocess runs the beat task while late and
redelivered batches of the hours it packs arrive through the broker."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from tests.helpers import make_batch, wait_for
from tests.telemetry.helpers import publish
from webapp.celery import app
from webapp.telemetry.models import CompactDirty
from webapp.telemetry.samples import samples_relation
from webapp.telemetry.services import samples_ingest

pytestmark = pytest.mark.integration

HOUR = 3600


def _count(table: str) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        return cur.fetchone()[0]


def _all_samples() -> tuple[int, int]:
    """(samples, distinct (gpu, ts)) over raw and packed."""
    lo, hi = datetime(2000, 1, 1, tzinfo=UTC), datetime.now(UTC) + timedelta(hours=1)
    with connection.cursor() as cur:
        cur.execute("SELECT array_agg(id) FROM fleet_gpu")
        gpus = cur.fetchone()[0] or []
    with samples_relation(gpus, lo, hi) as rel, connection.cursor() as cur:
        cur.execute(f"SELECT count(*), count(DISTINCT (gpu_id, ts)) FROM {rel} s")
        return cur.fetchone()


def test_the_worker_packs_while_late_and_redelivered_batches_arrive(
    committed_node_token, worker_factory, broker
):
    cluster, node, token = committed_node_token
    now = time.time()
    start = now - now % HOUR - 10 * HOUR  # past the 6 h horizon
    first = make_batch(cluster, node, token, t0=start + 10, intervals=24, step_s=300)
    assert samples_ingest(json.dumps(first)).samples_stored == 8 * 24
    worker_factory()

    app.send_task("vigil.telemetry.compact_samples")
    wait_for(lambda: _count("telemetry_gpusample") == 0, timeout=60)
    assert _count("telemetry_gpusamplepacked") == 16

    # A spool replays the packed hours: the same batch again and samples in between.
    late = make_batch(cluster, node, token, t0=start + 160, intervals=24, step_s=300)
    publish(first)
    publish(late)
    app.send_task("vigil.telemetry.compact_samples")
    wait_for(lambda: broker.llen("ingest") == 0 and broker.hlen("unacked") == 0, timeout=60)
    app.send_task("vigil.telemetry.compact_samples")
    wait_for(
        lambda: _count("telemetry_gpusample") == 0 and not CompactDirty.objects.exists(),
        timeout=60,
    )
    assert _all_samples() == (8 * 48, 8 * 48)  # each sample once, none lost
