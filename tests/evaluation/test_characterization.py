"""Evaluation GPU time by phase on the characterization page, inferred from the telemetry of
the jobs the jobs app types as evaluation (webapp/evaluation/phases.py, eval_phases)."""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache

from collectors.schema import GPU_FIELD_NAMES
from tests.helpers import make_batch
from webapp.core.units import GIB
from webapp.core.windows import Window
from webapp.evaluation.phases import eval_phase_split, eval_phases
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Gpu, Node
from webapp.jobs.models import Job, JobAllocation
from webapp.telemetry.services import samples_ingest

CLUSTER = "evch"
STEP_S = 10.0


def _col(name: str) -> int:
    return 2 + GPU_FIELD_NAMES.index(name)  # a wire row is [index, ts, *GPU_FIELDS]


def _profile(i: int, k: int) -> tuple[float, int]:
    """(SM activity, memory used) of GPU i at sample k (every 10 s).
    GPU 0, an evaluation: loading 0-60 s (memory rising, SMs idle), inference 60-180 s,
    metrics 180-240 s (held, idle). GPU 1, an evaluation that never computed. GPU 2, an SFT
    job with the same shape (not an evaluation: left out)."""
    if i == 1:
        return 0.0, 2 * GIB
    if k < 6:
        return 0.0, k * 4 * GIB
    if k < 18:
        return 0.6, 24 * GIB
    return 0.0, 24 * GIB


@pytest.fixture
def telemetry(db):
    cache.clear()
    t0 = float(int(time.time() // 60) * 60 - 3600)
    token = fleet_services.node_token_issue(CLUSTER, "ev-01")
    batch = make_batch(CLUSTER, "ev-01", token, t0=t0, intervals=30, step_s=STEP_S, gpus=3)
    for row in batch["samples"]:
        i, k = row[0], round((row[1] - t0) / STEP_S)
        row[_col("sm_active")], row[_col("fb_used_bytes")] = _profile(i, k)
    samples_ingest(json.dumps(batch))
    node = Node.objects.get(cluster__name=CLUSTER, hostname="ev-01")
    start = datetime.fromtimestamp(t0, UTC)
    for i, (sid, kind) in enumerate((("1", "eval"), ("2", "eval"), ("3", "sft"))):
        job = Job.objects.create(
            cluster=node.cluster, scheduler_id=sid, name=f"job-{sid}", job_type=kind,
            state="completed", submit_at=start, start_at=start,
            end_at=start + timedelta(seconds=240), gpus_requested=1,
        )  # fmt: skip
        JobAllocation.objects.create(
            job=job, node=node, gpu=Gpu.objects.get(node=node, index=i), gpu_index=i,
            start=start, end=start + timedelta(seconds=240),
        )  # fmt: skip
    yield node
    cache.clear()


def test_split_of_one_allocation():
    rise = 10 * GIB
    assert eval_phase_split(240, 60, 110, 70, rise) == {
        "load": 60, "infer": 110, "metrics": 70, "idle": 0.0,
    }  # fmt: skip
    # No memory rise before inference: the wait is idle, not loading.
    assert eval_phase_split(240, 60, 110, 70, 0)["idle"] == 60
    # Never busy: all of it idle.
    assert eval_phase_split(240, None, None, None, 0) == {
        "load": 0.0, "infer": 0.0, "metrics": 0.0, "idle": 240,
    }  # fmt: skip


def test_phases_are_inferred_from_the_evaluation_jobs_telemetry(telemetry):
    e = eval_phases(Window(telemetry.cluster))
    assert (e.jobs, e.allocations) == (2, 2)  # the SFT job is not an evaluation
    # GPU 0: busy samples from 60 s to 170 s; GPU 1 held 240 s and never busy.
    assert e.gpu_s["load"] == pytest.approx(60)
    assert e.gpu_s["infer"] == pytest.approx(110)
    assert e.gpu_s["metrics"] == pytest.approx(70)
    assert e.gpu_s["idle"] == pytest.approx(240)
    assert e.share["load"] == pytest.approx(60 / 480)


def test_the_characterization_page_shows_them_beside_the_paper(operator_client, telemetry):
    response = operator_client.get(f"/jobs/characterization/?cluster={CLUSTER}")
    html = response.content.decode()
    assert response.status_code == 200 and 'id="eval-phase-table"' in html
    assert "29.5%" in html and "19.0%" in html
    row = html[html.index('data-phase="metrics"') :].split("</tr>")[0]
    assert "15%" in row  # 70 of 480 GPU-seconds
    rows = list(csv.reader(io.StringIO(operator_client.get(
        f"/api/v1/evaluation/characterization.csv?cluster={CLUSTER}"
    ).content.decode())))  # fmt: skip
    assert rows[0] == ["phase", "gpu_s", "share", "paper_share", "jobs", "allocations"]
    assert {r[0]: float(r[1]) for r in rows[1:]}["infer"] == pytest.approx(110)
    assert (
        operator_client.get("/api/v1/evaluation/characterization.csv?cluster=nope").status_code
        == 400
    )
