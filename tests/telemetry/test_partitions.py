"""Day partitions: made ahead by the beat task, dropped whole after retention."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from django.db import connection

from tests.helpers import make_batch
from webapp.telemetry.models import GpuLatest
from webapp.telemetry.partitions import (
    PARTITION_DROPS_PER_RUN,
    partition_name,
    partitions_maintain,
)
from webapp.telemetry.services import samples_ingest
from webapp.telemetry.tasks import maintain_partitions


def _partitions(table: str) -> set[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
            [table],
        )
        return {r[0] for r in cur.fetchall()}


def test_beat_task_creates_partitions_ahead(db, settings):
    settings.VIGIL_PARTITIONS_AHEAD_DAYS = 3
    maintain_partitions()
    today = datetime.now(UTC).date()
    for table in ("telemetry_gpusample", "telemetry_nodesample", "telemetry_gpurollup1m"):
        names = _partitions(table)
        for offset in range(-1, 4):
            assert partition_name(table, today + timedelta(days=offset)) in names


def test_old_partitions_are_dropped_with_their_samples(db, settings, node_token):
    settings.VIGIL_RETENTION_DAYS = 5
    cluster, node, token = node_token
    old_day = datetime.now(UTC) - timedelta(days=4)
    samples_ingest(json.dumps(make_batch(cluster, node, token, t0=old_day.timestamp())))
    assert partition_name("telemetry_gpusample", old_day.date()) in _partitions(
        "telemetry_gpusample"
    )

    # Six days later that day is past retention: its partition goes, today's stays.
    later = old_day.date() + timedelta(days=6)
    report = partitions_maintain(today=later)

    gone = partition_name("telemetry_gpusample", old_day.date())
    assert gone in report["telemetry_gpusample"]["dropped"]
    assert gone not in _partitions("telemetry_gpusample")
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM telemetry_gpusample WHERE ts < %s", [later - timedelta(days=5)]
        )
        assert cur.fetchone()[0] == 0
    # Rollups are kept longer than raw samples.
    assert partition_name("telemetry_gpurollup1m", old_day.date()) in _partitions(
        "telemetry_gpurollup1m"
    )


def test_ingest_creates_a_missing_partition_for_older_samples(db, node_token):
    cluster, node, token = node_token
    day = date.today() - timedelta(days=9)
    t0 = datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp()
    result = samples_ingest(json.dumps(make_batch(cluster, node, token, t0=t0)))
    assert result.samples_stored == 8
    assert partition_name("telemetry_gpusample", day) in _partitions("telemetry_gpusample")


def test_retention_drops_a_bounded_number_of_partitions_per_run(db, settings, node_token):
    settings.VIGIL_RETENTION_DAYS = 30
    cluster, node, token = node_token
    today = datetime.now(UTC).date()
    old_days = [today - timedelta(days=20 + k) for k in range(PARTITION_DROPS_PER_RUN + 2)]
    for day in old_days:
        t0 = datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp()
        samples_ingest(json.dumps(make_batch(cluster, node, token, t0=t0)))
    # Retention shortened to 10 days: every one of those days is due, oldest first, a few a run.
    settings.VIGIL_RETENTION_DAYS = 10
    names = [partition_name("telemetry_gpusample", day) for day in sorted(old_days)]
    first = partitions_maintain()["telemetry_gpusample"]
    assert first["dropped"] == names[:PARTITION_DROPS_PER_RUN]
    assert first["left"] == names[PARTITION_DROPS_PER_RUN:]
    assert set(names[PARTITION_DROPS_PER_RUN:]) <= _partitions("telemetry_gpusample")
    second = partitions_maintain()["telemetry_gpusample"]
    assert second["dropped"] == names[PARTITION_DROPS_PER_RUN:] and second["left"] == []
    assert not set(names) & _partitions("telemetry_gpusample")
    # The GPUs' latest rows were of those days: they went with them.
    assert not GpuLatest.objects.exists()
