"""A job page's cost is bounded whatever the job's length: a job whose span x GPUs
exceeds a tier's budget is drawn from the next coarser tier (selectors.job_tiers), and the page
says so; one whose hourly rollup is not folded yet still draws, from the 1-minute rollup.

The budgets are lowered here so that a 24-GPU job of 4 hours stands for a 2,048-GPU one of a day.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.jobs.helpers import allocate, ingest
from webapp.jobs import selectors
from webapp.jobs.models import Job
from webapp.telemetry.rollup_hourly import _refresh

GPUS = 24  # a band job (more than SERIES_GPUS_MAX)
MINUTES = 240


@pytest.fixture
def long_job(db, monkeypatch) -> Job:
    monkeypatch.setattr(selectors, "RAW_GPU_HOURS_MAX", 1.0)
    monkeypatch.setattr(selectors, "MINUTE_GPU_HOURS_MAX", GPUS * 2.0)  # 2 h of the job
    t0 = float(int(time.time() // 3600) * 3600 - 5 * 3600)  # on the hour, 5 h ago
    base = datetime.fromtimestamp(t0, UTC)
    node = ingest(
        "acme",
        "gpu-b-01",
        t0=t0,
        intervals=MINUTES + 1,
        step_s=60,
        gpus=GPUS,
        util=lambda i, k: 15.0 if i == GPUS - 1 else 80.0,
        energy_mj=lambda i, k: 10**9 + k * 6_000_000,
    )
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id="budget-1",
        job_type="pretrain",
        state="completed",
        submit_at=base,
        start_at=base,
        end_at=base + timedelta(minutes=MINUTES),
        gpus_requested=GPUS,
    )
    allocate(job, node, list(range(GPUS)), base, base + timedelta(minutes=MINUTES))
    return job


def test_a_job_over_the_minute_budget_is_drawn_from_the_hourly_rollup(operator_client, long_job):
    start = long_job.start_at
    _refresh(start, start + timedelta(minutes=MINUTES + 60))  # as the hourly beat folded it
    response = operator_client.get(f"/jobs/{long_job.id}/")
    assert response.status_code == 200
    bands = response.context["bands"]
    assert bands.source == "hourly rollup" and bands.bucket_s == 3600
    # Hours 0-3 and the hour of the job's last minute; every GPU in each.
    assert len(bands.ts) == 5 and bands.gpus == [GPUS] * 5
    util = bands.bands["gpu_util"]
    assert util.median == [80.0] * 5 and util.lo == [15.0] * 5
    assert [(o.metric, o.allocation.gpu_index) for o in bands.outliers] == [("gpu_util", GPUS - 1)]
    assert "hourly rollup" in response.content.decode()
    # Energy from the hourly cells: every GPU's 240 minutes x 6e6 mJ (hours on the hour).
    energy = response.context["energy"]
    assert "hourly rollup" in energy.method
    assert {e.energy_mj for e in energy.per_gpu} == {MINUTES * 6_000_000}


def test_a_job_whose_hourly_rollup_is_not_folded_yet_draws_from_the_minute_rollup(
    operator_client, long_job
):
    response = operator_client.get(f"/jobs/{long_job.id}/")
    bands = response.context["bands"]
    assert bands.source.startswith("1-minute rollup") and bands.has_samples
    assert set(bands.bands["gpu_util"].median) == {80.0}
    assert [(o.metric, o.allocation.gpu_index) for o in bands.outliers] == [("gpu_util", GPUS - 1)]
    energy = response.context["energy"]
    assert "1-minute rollup" in energy.method
    assert {e.energy_mj for e in energy.per_gpu} == {MINUTES * 6_000_000}
