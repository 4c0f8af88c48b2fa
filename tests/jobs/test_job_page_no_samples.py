"""A job page whose GPUs sent no samples says so instead of drawing an empty chart (Plotly's
default axes, -1 to 6, read as a scale with nothing on it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests import factory
from webapp.jobs.models import JobState

CLUSTER = "quiet"


@pytest.fixture
def quiet_cluster(db):
    # 20 GPUs on one node: one job of 1 GPU (per-GPU lines) and one of 20 (bands).
    return factory.cluster_make(CLUSTER, nodes=["quiet-01"], gpus=20)


def _page(client, job) -> tuple[str, dict]:
    response = client.get(f"/jobs/{job.id}/")
    assert response.status_code == 200
    return response.content.decode(), response.context["figures"]


@pytest.mark.parametrize("gpus", [1, 20])
def test_a_job_without_samples_states_it_and_draws_no_empty_chart(
    operator_client, quiet_cluster, gpus
):
    start = datetime.now(UTC) - timedelta(hours=2)
    job = factory.job_make(
        CLUSTER,
        f"q{gpus}",
        [("quiet-01", i) for i in range(gpus)],
        start,
        start + timedelta(hours=1),
    )
    html, figs = _page(operator_client, job)
    assert "series" not in figs
    assert 'id="fig-series"' not in html
    assert "No samples from the job's GPUs during its allocation" in html


def test_a_pending_job_says_it_has_no_telemetry_yet(operator_client, quiet_cluster):
    job = factory.job_make(
        CLUSTER, "q-pending", [], datetime.now(UTC), state=JobState.PENDING, start_at=None
    )
    html, figs = _page(operator_client, job)
    assert "series" not in figs
    assert 'id="fig-series"' not in html
    assert "No telemetry yet: the job holds no GPUs" in html
    # A job waiting in the queue is not "running" (a requeued one waits with no start).
    assert "<dt>Duration</dt><dd>pending, not started</dd>" in html
