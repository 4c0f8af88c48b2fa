"""Helpers shared by the tests of this package (imported, never defined, by test modules)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from django.conf import settings

from collectors.transport import Transport


def publish(batch: dict) -> None:
    """Publish as the collector does (its transport: outbox copy, then the task by name)."""
    url = settings.CELERY_BROKER_URL
    transport = _transports.get(url)
    if transport is None:
        transport = _transports[url] = Transport(url, Path(tempfile.mkdtemp()) / "spool")
    assert transport.send(json.dumps(batch), batch["batch_id"])


# A GPU model the database refuses (a CHECK the tests add on fleet_gpu): the schema lets the
# batch through, and storing it fails while registering the GPU, as a value out of range for
# its column would. (A NUL byte, the natural example, is refused by the schema already.)
REFUSED_MODEL = "NVIDIA H100 refused by the database"

REFUSE_MODEL_SQL = (
    f"ALTER TABLE fleet_gpu ADD CONSTRAINT test_refused_model CHECK (model <> '{REFUSED_MODEL}')"
)


ALLOW_MODEL_SQL = "ALTER TABLE fleet_gpu DROP CONSTRAINT IF EXISTS test_refused_model"


def poisoned(batch: dict) -> dict:
    """The batch with a GPU swapped in whose model the database refuses (REFUSE_MODEL_SQL)."""
    gpus = [dict(g) for g in batch["gpus"]]
    gpus[0].update(uuid="GPU-swapped-in", name=REFUSED_MODEL)
    return dict(batch, gpus=gpus)


_transports: dict[str, Transport] = {}
