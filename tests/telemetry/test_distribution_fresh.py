"""A fleet whose telemetry is younger than its first hourly rollup still has telemetry CDFs:
the part of the window the hourly rollup does not hold yet is read from the finer tiers, so the
characterization does not say "No telemetry in this window" beside GPUs sending samples."""

from __future__ import annotations

import json

import numpy as np
from django.core.cache import cache

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from webapp.fleet import services as fleet_services
from webapp.telemetry.services import samples_ingest

UTIL_COL = 2 + GPU_FIELD_NAMES.index("gpu_util")  # a wire row is [index, ts, *GPU_FIELDS]


def test_the_first_hours_samples_make_the_characterizations_telemetry_cdfs(operator_client, db):
    cache.clear()
    token = fleet_services.node_token_issue("fresh", "fresh-node-01")
    batch = make_batch("fresh", "fresh-node-01", token, intervals=20, step_s=15.0, gpus=4)
    for row in batch["samples"]:
        row[UTIL_COL] = 10.0 * (row[0] + 1)  # GPU i at 10 (i + 1) %
    assert samples_ingest(json.dumps(batch)).samples_stored == 80
    # No rollup has run: only the samples hold them (the first minutes of a fresh demo).

    response = operator_client.get("/jobs/characterization/?cluster=fresh")
    page = response.content.decode()
    assert "No telemetry in this window" not in page
    telemetry = response.context["telemetry"]
    assert telemetry.rows == 80
    median = dict((p, v) for v, p in telemetry.curves["gpu_util"])[0.5]
    utils = [row[UTIL_COL] for row in batch["samples"]]
    assert median == float(np.percentile(utils, 50))  # 25 %
    cache.clear()
