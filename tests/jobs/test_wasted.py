"""Wasted GPUs: allocated GPUs idle (util below VIGIL_BUSY_UTIL_PCT) for N minutes or more."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.jobs.test_views import allocate, ingest
from webapp.jobs.models import Job
from webapp.jobs.selectors import waste_totals, wasted_gpus


@pytest.fixture
def idle_and_busy(db) -> dict[str, Job]:
    """Node w-01, samples each minute for the last 45 minutes:
    GPU 0 busy then idle (2 %) for the last 40 minutes, GPU 1 busy (90 %) throughout,
    GPU 2 idle throughout but not allocated, GPU 3 idle and held by a job that ended.
    """
    t0 = float(int(time.time() // 60) * 60 - 45 * 60)
    base = datetime.fromtimestamp(t0, UTC)

    def util(i: int, k: int) -> float:
        if i == 0:
            return 95.0 if k < 5 else 2.0
        return 90.0 if i == 1 else 0.0

    node = ingest("acme", "w-01", t0=t0, intervals=46, step_s=60, gpus=4, util=util)
    make = lambda sid, user, team: Job.objects.create(  # noqa: E731
        cluster=node.cluster,
        scheduler_id=sid,
        name=f"job-{sid}",
        user=user,
        team=team,
        job_type="sft",
        state="running",
        submit_at=base,
        start_at=base,
        gpus_requested=2,
    )
    running = make("100", "bob", "vision")
    busy = make("101", "carol", "llm")
    ended = make("102", "dave", "llm")
    allocate(running, node, [0], base, None)
    allocate(busy, node, [1], base, None)
    allocate(ended, node, [3], base, base + timedelta(minutes=40))
    return {"running": running, "busy": busy, "ended": ended}


def test_idle_allocated_gpu_is_listed_and_a_busy_one_is_not(idle_and_busy):
    rows = wasted_gpus(busy_util_pct=10, min_idle_minutes=30)
    assert [(w.job.scheduler_id, w.hostname, w.gpus) for w in rows] == [("100", "w-01", [0])]
    # Idle from minute 5 to 45: 41 rollup minutes (the minute now may or may not be in).
    assert 40 <= rows[0].idle_gpu_minutes <= 41
    assert rows[0].idle_gpu_hours == pytest.approx(rows[0].idle_gpu_minutes / 60)
    # A longer threshold than the idle streak finds nothing; a higher busy threshold finds both.
    assert wasted_gpus(busy_util_pct=10, min_idle_minutes=60) == []
    both = wasted_gpus(busy_util_pct=95, min_idle_minutes=30)
    assert {w.job.scheduler_id for w in both} == {"100", "101"}
    assert waste_totals(both, "team")[0].key in {"llm", "vision"}
    assert {t.key: t.gpus for t in waste_totals(both, "user")} == {"bob": 1, "carol": 1}


def test_wasted_page_and_csv(operator_client, idle_and_busy, settings):
    settings.VIGIL_BUSY_UTIL_PCT = 10
    response = operator_client.get("/jobs/wasted/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-job="100"' in html and 'data-job="101"' not in html
    assert [t.key for t in response.context["by_user"]] == ["bob"]
    assert [t.key for t in response.context["by_team"]] == ["vision"]

    response = operator_client.get("/api/v1/jobs/wasted.csv", {"minutes": "20", "cluster": "acme"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["scheduler_id"], r["user"], r["node"], r["idle_gpus"]) for r in rows] == [
        ("100", "bob", "w-01", "1")
    ]
    assert 0.66 <= float(rows[0]["idle_gpu_hours"]) <= 0.69

    assert operator_client.get("/jobs/wasted/", {"minutes": "90"}).context["rows"] == []
    assert operator_client.get("/jobs/wasted/", {"minutes": "zero"}).status_code == 400
    assert operator_client.get("/jobs/wasted/", {"cluster": "nope"}).status_code == 400


def test_wasted_page_query_count_does_not_grow_with_rows(
    operator_client, idle_and_busy, settings, django_assert_max_num_queries
):
    settings.VIGIL_BUSY_UTIL_PCT = 95
    with django_assert_max_num_queries(8):
        response = operator_client.get("/jobs/wasted/")
    assert len(response.context["rows"]) == 2
