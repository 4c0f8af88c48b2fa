"""The job page opens with a verdict on the job's efficiency and follows its incident: runs,
failures, diagnoses, GPU errors and recovery actions in one timeline, each linking its page,
and every table on the page has its CSV."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from tests.jobs.helpers import allocate, ingest
from tests.jobs.incident import incident_job
from webapp.jobs.job_page import job_verdict
from webapp.jobs.models import Job
from webapp.jobs.selectors import AllocationRow


def _rows(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_job_page_timeline_shows_failure_diagnosis_actions_and_the_run_after_the_requeue(
    operator_client, db
):
    incident = incident_job()
    response = operator_client.get(f"/jobs/{incident.job.id}/")
    assert response.status_code == 200
    titles = [(t.kind, t.title) for t in response.context["timeline"]]
    # In time order: the first run, the GPU error, the job's end and failure, the diagnoses,
    # the drain, the requeue and the run after it.
    assert titles.index(("run", "First run started")) < titles.index(
        ("gpu_error", "GPU error Xid 79 on gpu-i-01 GPU 2 (0000:1A:00.0)")
    )
    assert ("failure", "Job failure") in titles
    assert ("diagnosis", "Diagnosed: gpu_off_bus on gpu-i-01 GPU 2 (0000:1A:00.0)") in titles
    kinds = [k for k, _ in titles]
    assert kinds.index("action") < titles.index(("run", "Requeued"))
    assert titles[-1] == ("run", "Running again (run 2)")
    page = response.content.decode()
    for url in (
        reverse("failures:detail", args=[incident.job_failure.pk]),
        reverse("failures:detail", args=[incident.gpu_failure.pk]),
        reverse("recovery:action", args=[incident.drain.pk]),
        reverse("recovery:action", args=[incident.requeue.pk]),
        reverse("telemetry:gpu", args=[incident.blamed_gpu.pk]),
    ):
        assert f'href="{url}"' in page, url


def test_job_page_tables_have_their_csv(operator_client, db):
    incident = incident_job()
    page = operator_client.get(f"/jobs/{incident.job.id}/").content.decode()
    for name in ("timeline", "allocations"):
        url = f"/api/v1/jobs/{incident.job.id}/{name}.csv"
        assert f'href="{url}"' in page
        response = operator_client.get(url)
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    timeline = _rows(operator_client.get(f"/api/v1/jobs/{incident.job.id}/timeline.csv"))
    assert [r["title"] for r in timeline][-1] == "Running again (run 2)"
    assert {r["step"] for r in timeline} == {
        "Run",
        "Failure",
        "Diagnosis",
        "GPU error",
        "Recovery action",
    }
    allocations = _rows(operator_client.get(f"/api/v1/jobs/{incident.job.id}/allocations.csv"))
    assert sorted((r["node"], r["gpu_index"]) for r in allocations) == sorted(
        (h, str(i)) for h in ("gpu-i-01", "gpu-i-02") for i in range(4)
    )
    missing = operator_client.get(f"/api/v1/jobs/{incident.job.id}/nothing.csv")
    assert missing.status_code == 404 and b"timeline, allocations" in missing.content


def test_failure_page_links_back_to_the_job_of_a_gpu_error_that_requeued_it(operator_client, db):
    incident = incident_job()
    page = operator_client.get(f"/failures/{incident.gpu_failure.pk}/").content.decode()
    assert f'href="/jobs/{incident.job.id}/"' in page


def test_verdict_names_the_gpu_held_at_zero_for_its_whole_life(operator_client, db):
    t0 = float(int(time.time()) - 20 * 60)
    base = datetime.fromtimestamp(t0, UTC)
    node = ingest(
        "acme",
        "gpu-v-01",
        t0=t0,
        intervals=16,
        step_s=60,
        gpus=4,
        util=lambda i, k: 0.0 if i == 3 else 80.0,
    )
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id="idle-1",
        state="completed",
        submit_at=base,
        start_at=base,
        end_at=base + timedelta(minutes=15),
        gpus_requested=4,
    )
    allocate(job, node, [0, 1, 2, 3], base, base + timedelta(minutes=15))
    response = operator_client.get(f"/jobs/{job.id}/")
    verdict = response.context["verdict"]
    assert verdict.level == "idle"
    assert verdict.headline == (
        "This job held 1 GPU at 0% utilization for its whole allocation: gpu-v-01 GPU 3."
    )
    # Independently: three GPUs at 80 %, one at 0 %; samples carry 40 of 80 GiB and 300 W.
    assert "Mean GPU utilization 60% over 4 GPUs." in verdict.lines
    assert "Mean GPU memory used 40.0 GiB of 80 GiB (50%)." in verdict.lines
    assert 'id="verdict-headline"' in response.content.decode()


def _alloc(i: int, *, running: bool = False) -> AllocationRow:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return AllocationRow(i, 1, "n1", i, i, now, None if running else now + timedelta(hours=1))


def test_verdict_reads_power_against_the_limit_and_calls_low_utilization_low():
    means = {i: {"gpu_util": 30.0, "sm_active": 0.2, "power_w": 350.0} for i in range(2)}
    verdict = job_verdict(
        means,
        [_alloc(0), _alloc(1)],
        power_limit_w=700.0,
        memory_total_bytes=None,
        busy_util_pct=10.0,
    )
    assert verdict.level == "low"
    assert "Mean power 350 W against a 700 W limit (50%)." in verdict.lines
    assert "Mean SM activity 20% (the share of SMs busy)." in verdict.lines


def test_no_telemetry_no_verdict():
    verdict = job_verdict({}, [], power_limit_w=None, memory_total_bytes=None, busy_util_pct=10)
    assert verdict.level == "none" and verdict.lines == []


@pytest.mark.parametrize("held", [1, 2])
def test_every_gpu_idle_says_all(held):
    means = {i: {"gpu_util": 0.0} for i in range(held)}
    verdict = job_verdict(
        means,
        [_alloc(i) for i in range(held)],
        power_limit_w=None,
        memory_total_bytes=None,
        busy_util_pct=10,
    )
    assert (
        verdict.headline
        == {
            1: "This job held its 1 GPU at 0% utilization for its whole allocation.",
            2: "This job held all its 2 GPUs at 0% utilization for their whole allocation.",
        }[held]
    )


def test_verdict_of_a_requeued_job_names_the_run_its_gpus_idled_in():
    # Run 1 on n1's 4 GPUs at 80%; requeued, run 2 on GPUs 2-3 of n1 and 0-1 of n2, all at
    # 0% so far: the headline is about run 2, not about the job's whole life.
    t1, t2 = datetime(2026, 1, 1, 7, 43, tzinfo=UTC), datetime(2026, 1, 1, 8, 46, tzinfo=UTC)
    run1 = [AllocationRow(i, 1, "n1", i, i, t1, t2) for i in range(4)]
    run2 = [
        AllocationRow(4 + k, node, host, 10 + k, gpu, t2, None)
        for k, (node, host, gpu) in enumerate(
            [(1, "n1", 2), (1, "n1", 3), (2, "n2", 0), (2, "n2", 1)]
        )
    ]
    means = {a.id: {"gpu_util": 80.0 if a in run1 else 0.0} for a in run1 + run2}
    verdict = job_verdict(
        means, run1 + run2, power_limit_w=None, memory_total_bytes=None, busy_util_pct=10
    )
    assert verdict.level == "idle"
    assert verdict.headline == (
        "In its run 2 (since 08:46 UTC), all its 4 GPUs have sat at 0% utilization so far."
    )
    assert "Mean GPU utilization 40% over 4 GPUs, 2 runs." in verdict.lines

    # Idle GPUs in an ended run are named with that run's span.
    means = {a.id: {"gpu_util": 0.0 if a.id == 3 else 80.0} for a in run1 + run2}
    verdict = job_verdict(
        means, run1 + run2, power_limit_w=None, memory_total_bytes=None, busy_util_pct=10
    )
    assert verdict.headline == (
        "In its run 1 (07:43-08:46 UTC), 1 of its 4 GPUs sat at 0% utilization: n1 GPU 3."
    )


def test_verdict_of_a_running_job_says_so_far():
    # A job still running has not had its whole allocation yet (it may be loading).
    verdict = job_verdict(
        {i: {"gpu_util": 0.0} for i in range(2)},
        [_alloc(i, running=True) for i in range(2)],
        power_limit_w=None,
        memory_total_bytes=None,
        busy_util_pct=10,
    )
    assert verdict.headline == "This job has held all its 2 GPUs at 0% utilization so far."
