"""Wasted GPUs: allocated GPUs idle (util below VIGIL_BUSY_UTIL_PCT) for N minutes or more."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from tests.jobs.helpers import allocate, ingest
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
    # The page's team is Vigil's (a rule maps the scheduler's account "vision" to it).
    call_command("team_create", "vision-team", "--account", "vision", stdout=io.StringIO())
    response = operator_client.get("/jobs/wasted/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-job="100"' in html and 'data-job="101"' not in html
    assert [t.key for t in response.context["by_user"]] == ["bob"]
    assert [t.key for t in response.context["by_team"]] == ["vision-team"]

    response = operator_client.get("/api/v1/jobs/wasted.csv", {"minutes": "20", "cluster": "acme"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["scheduler_id"], r["user"], r["node"], r["idle_gpus"]) for r in rows] == [
        ("100", "bob", "w-01", "1")
    ]
    assert (rows[0]["team"], rows[0]["account"]) == ("vision-team", "vision")
    assert 0.66 <= float(rows[0]["idle_gpu_hours"]) <= 0.69

    assert operator_client.get("/jobs/wasted/", {"minutes": "90"}).context["rows"] == []
    assert operator_client.get("/jobs/wasted/", {"minutes": "zero"}).status_code == 400
    assert operator_client.get("/jobs/wasted/", {"cluster": "nope"}).status_code == 400


def test_wasted_page_query_count_does_not_grow_with_rows(
    operator_client, idle_and_busy, settings, django_assert_max_num_queries
):
    settings.VIGIL_BUSY_UTIL_PCT = 95
    # ... and two for the jobs' teams (the rules, the teams' names), whatever the rows.
    with django_assert_max_num_queries(10):
        response = operator_client.get("/jobs/wasted/")
    assert len(response.context["rows"]) == 2


def _hourly_util(gpu_id: int, hour: datetime, util_max: float, samples: int = 60) -> None:
    """One hourly rollup cell of gpu_util (as rollup_hourly.py folds it from the minutes)."""
    from django.db import connection

    from webapp.telemetry.partitions import partition_ensure

    partition_ensure("telemetry_gpurollup1h", hour.date())
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO telemetry_gpurollup1h (gpu_id, hour, n, gpu_util_min, gpu_util_max, "
            "gpu_util_sum, gpu_util_cnt) VALUES (%s, %s, %s, 0, %s, %s, %s)",
            [gpu_id, hour, samples, util_max, util_max / 2 * samples, samples],
        )


def test_idle_older_than_the_minute_rollup_counts_from_the_hourly_rollup(db, settings):
    """An allocation idle since before the 1-minute rollup's retention: the hours before it
    count too, from the hourly rollup; an hour whose highest sample reached the threshold
    ends the streak there."""
    settings.VIGIL_ROLLUP_RETENTION_DAYS = 2
    t0 = float(int(time.time() // 60) * 60 - 45 * 60)
    node = ingest("acme", "w-07", t0=t0, intervals=46, step_s=60, gpus=2, util=lambda i, k: 2.0)
    now = datetime.now(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC)
    start = midnight - timedelta(days=4) + timedelta(minutes=30)  # four days ago, 00:30
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id="700",
        user="erin",
        team="llm",
        job_type="pretrain",
        state="running",
        submit_at=start,
        start_at=start,
        gpus_requested=2,
    )
    allocate(job, node, [0, 1], start, None)
    gpus = {g.index: g.id for g in node.gpus.all()}
    # Hours 00:00-04:00 of four days ago, before the 1-minute rollup's first kept day: GPU 0
    # idle throughout; GPU 1 reached 90 % in its first hour, idle after.
    for h in range(5):
        hour = midnight - timedelta(days=4) + timedelta(hours=h)
        _hourly_util(gpus[0], hour, 3.0)
        _hourly_util(gpus[1], hour, 90.0 if h == 0 else 3.0)

    [row] = wasted_gpus(busy_util_pct=10, min_idle_minutes=30)
    assert row.gpus == [0, 1]
    live = 45  # the recent minutes, about (the minute now may or may not be in)
    # GPU 0: 30 minutes of the start hour and four whole hours; GPU 1: the four idle hours.
    old = (30 + 4 * 60) + 4 * 60
    assert old + 2 * (live - 1) <= row.idle_gpu_minutes <= old + 2 * (live + 1)
    assert row.idle_since == start
    # Had the 1-minute rollup kept those days, only its minutes would count.
    settings.VIGIL_ROLLUP_RETENTION_DAYS = 35
    [row] = wasted_gpus(busy_util_pct=10, min_idle_minutes=30)
    assert row.idle_gpu_minutes <= 2 * (live + 1)
