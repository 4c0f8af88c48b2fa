"""Server side of the outbox with the real Redis: size limits hold before any parsing."""

from __future__ import annotations

import tracemalloc

import pytest
from django.db import connection

from collectors import outbox
from collectors.schema import MAX_BATCH_BYTES, OversizedBatch
from webapp.core import outbox as server_outbox
from webapp.core.ingest import batch_run
from webapp.core.models import RejectedBatch


def _zstd_bomb(size_bytes: int) -> bytes:
    """`size_bytes` of zeros, Zstandard-compressed in chunks (never held whole)."""
    compressor = outbox.zstd.ZstdCompressor(level=3)
    chunk = bytes(2**20)
    parts = [compressor.compress(chunk) for _ in range(size_bytes // len(chunk))]
    return b"".join([*parts, compressor.flush()])


class _Task:
    name = "vigil.test.bomb"


def test_a_zstd_bomb_in_the_outbox_is_refused_as_too_large_within_bounded_memory(db, broker):
    batch_id = "3f2c3f0e-6a57-4a43-9d6c-2f9f3a0b8a11"
    bomb = _zstd_bomb(2**30)  # 1 GiB of zeros in about 32 KB
    broker.hset(outbox.OUTBOX_KEY, batch_id, bomb)

    tracemalloc.start()
    try:
        [text] = server_outbox.batch_texts([outbox.reference(batch_id)])
        result = batch_run(_Task(), outbox.reference(batch_id), lambda raw: {"stored": raw})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert isinstance(text, OversizedBatch)
    assert peak < 3 * MAX_BATCH_BYTES  # not the gigabyte the entry holds
    # The ingest function never saw it: its parse would have refused; this one stores all.
    assert result == {"stored": text}


def test_samples_ingest_refuses_an_oversized_batch_and_writes_nothing(db):
    from webapp.telemetry.services import samples_ingest

    oversized = OversizedBatch("batch decompresses past 10 bytes", 11)
    result = batch_run(_Task(), oversized, samples_ingest)
    assert result == {"rejected": "too_large"}
    assert RejectedBatch.objects.get().reason == "too_large"
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        assert cur.fetchone()[0] == 0


def test_kombu_decompresses_an_inline_message_only_up_to_the_limit():
    import kombu.compression

    bomb = _zstd_bomb(2**30)
    tracemalloc.start()
    try:
        with pytest.raises(server_outbox.MessageTooLarge):
            kombu.compression.decompress(bomb, "application/zstd")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_BATCH_BYTES


def test_redelivery_publishes_only_batch_tasks_whatever_the_index_names(db, broker):
    """Nodes write the outbox index: a member naming another task (say the diagnosis) must not
    make the beat task publish it."""
    from collectors.schema import INGEST_TASK

    outbox.outbox_put(broker, "11111111-1111-4111-8111-111111111111", INGEST_TASK, "{}")
    outbox.outbox_put(
        broker, "22222222-2222-4222-8222-222222222222", "vigil.failures.diagnose", "{}"
    )

    assert server_outbox.outbox_redeliver(older_than_s=0) == 1
    published = [m for m in broker.lrange("ingest", 0, -1)]
    assert len(published) == 1 and INGEST_TASK.encode() in published[0]
    assert not any(b"vigil.failures.diagnose" in m for m in published)
