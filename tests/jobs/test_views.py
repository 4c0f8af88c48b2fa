"""The jobs pages: login, job list (filters, pages, CSV, query counts), job page (allocations,
telemetry, energy from counter deltas), characterization page and its CSV exports."""

from __future__ import annotations

import csv
import io
import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse

from tests.jobs.helpers import (
    SLOW_GPU,
    SLOW_NODE,
    allocate,
    big_job,
    ingest,
    make_jobs,
)
from webapp.fleet.models import Cluster
from webapp.jobs.models import Job, JobEvent


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The characterization is cached per process; one test's result must not serve another."""
    cache.clear()
    yield
    cache.clear()


# --- Login ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/jobs/",
        "/api/v1/jobs.csv",
        "/jobs/1/",
        "/jobs/characterization/",
        "/api/v1/jobs/characterization/types.csv",
        "/jobs/wasted/",
        "/api/v1/jobs/wasted.csv",
    ],
)
def test_anonymous_visitor_is_sent_to_login(client, db, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


# --- Job list ------------------------------------------------------------------------------------


@pytest.fixture
def many_jobs(db) -> list[Job]:
    acme = Cluster.objects.create(name="acme")
    other = Cluster.objects.create(name="other")
    return make_jobs(acme, 120) + make_jobs(other, 30, seed=9)


def test_job_list_filters_and_pages(operator_client, many_jobs, django_assert_max_num_queries):
    with django_assert_max_num_queries(6):
        response = operator_client.get("/jobs/", {"cluster": "acme", "type": "eval"})
    assert response.status_code == 200
    evals = [j for j in many_jobs if j.cluster.name == "acme" and j.job_type == "eval"]
    page = response.context["page"]
    assert page.paginator.count == len(evals)
    assert {j.job_type for j in page} == {"eval"}
    assert f'href="/jobs/{page[0].id}/"' in response.content.decode()

    # Page 2 of everything, same number of queries as page 1 (no per-row query).
    with django_assert_max_num_queries(6):
        response = operator_client.get("/jobs/", {"page": 2})
    assert len(response.context["page"]) == 50
    response = operator_client.get("/jobs/", {"user": "u3", "state": "failed"})
    assert all(j.user == "u3" and j.state == "failed" for j in response.context["page"])


def test_job_list_csv_has_the_filtered_jobs(operator_client, many_jobs):
    response = operator_client.get("/api/v1/jobs.csv", {"cluster": "other"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 30 and {r["cluster"] for r in rows} == {"other"}
    job = Job.objects.get(cluster__name="other", scheduler_id=rows[0]["scheduler_id"])
    assert rows[0]["gpus"] == str(job.gpus_requested)


# --- Job page ------------------------------------------------------------------------------------


@pytest.fixture
def job_on_gpus(db) -> Job:
    """A 20-minute job on GPUs 0-3 of one node; samples every 60 s; GPU 1's counter resets.

    GPU i gains (i + 1) * 1e6 mJ per minute. GPU 1's counter restarts from 0 at minute 10
    and reads 5e5 there, so its energy is 9 * 2e6 + 5e5 + 10 * 2e6 mJ (not max - min).
    """
    t0 = float(int(time.time()) - 25 * 60)  # whole seconds: the allocation ends on a sample
    base = datetime.fromtimestamp(t0, UTC)

    def energy(i: int, k: int) -> int:
        if i == 1 and k >= 10:
            return 500_000 + (k - 10) * 2_000_000
        return 10**9 + k * (i + 1) * 1_000_000

    node = ingest(
        "acme",
        "gpu-j-01",
        t0=t0,
        intervals=21,
        step_s=60,
        gpus=8,
        util=lambda i, k: 80.0 + i,
        energy_mj=energy,
    )
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id="4242",
        name="llama-7b-pretrain",
        user="alice",
        team="llm",
        job_type="pretrain",
        state="completed",
        exit_code=0,
        submit_at=base - timedelta(seconds=30),
        start_at=base,
        end_at=base + timedelta(minutes=20),
        gpus_requested=4,
        nodes_requested=1,
    )
    allocate(job, node, [0, 1, 2, 3], base, base + timedelta(minutes=20))
    JobEvent.objects.create(job=job, kind="started", ts=base, state="running")
    JobEvent.objects.create(
        job=job, kind="ended", ts=base + timedelta(minutes=20), state="completed", exit_code=0
    )
    return job


def test_job_page_shows_identity_allocations_telemetry_and_energy(operator_client, job_on_gpus):
    response = operator_client.get(f"/jobs/{job_on_gpus.id}/")
    assert response.status_code == 200
    html = response.content.decode()
    for text in ("4242", "llama-7b-pretrain", "alice", "llm", "Pretraining", "Completed"):
        assert text in html
    # The job links to its failures page, which exists.
    assert response.context["failures_url"] == f"/failures/job/{job_on_gpus.id}/"
    assert operator_client.get(response.context["failures_url"], follow=True).status_code == 200

    allocations = response.context["allocations"]
    assert [(a.hostname, a.gpu_index) for a in allocations] == [("gpu-j-01", i) for i in range(4)]
    assert all(a.gpu_id is not None for a in allocations)  # resolved from (node, index) too

    telemetry = response.context["telemetry"]
    assert telemetry.source == "raw samples"
    assert len(telemetry.series) == 4
    gpu2 = telemetry.series["gpu-j-01 GPU 2"]
    assert len(gpu2.ts) == 21 and set(gpu2.values["gpu_util"]) == {82.0}  # 21 minutes incl. ends
    figures = response.context["figures"]
    assert len(figures["allocations"]["data"][0]["y"]) == 4
    assert len(figures["series"]["data"]) == 4 * 5  # 4 GPUs x 5 panels

    energy = {e.allocation.gpu_index: e for e in response.context["energy"].per_gpu}
    assert energy[0].energy_mj == 20 * 1_000_000
    assert energy[2].energy_mj == 20 * 3_000_000
    assert energy[1].energy_mj == 9 * 2_000_000 + 500_000 + 10 * 2_000_000
    assert energy[1].resets == 1 and energy[0].resets == 0
    total_kwh = (20e6 + 38.5e6 + 60e6 + 80e6) / 3.6e9
    assert response.context["energy"].kwh == pytest.approx(total_kwh)
    assert f"{total_kwh:.3f} kWh" in html
    assert "energy-counter deltas" in html and "counter reset" in html
    assert "Ended" in html and "Started" in html  # events


def test_job_page_of_a_job_without_allocations(operator_client, many_jobs):
    job = many_jobs[0]
    response = operator_client.get(f"/jobs/{job.id}/")
    assert response.status_code == 200
    assert "No allocation recorded for this job." in response.content.decode()
    assert operator_client.get("/jobs/999999/").status_code == 404


# --- Characterization page -----------------------------------------------------------------------


def test_characterization_page_draws_every_figure(operator_client, many_jobs):
    response = operator_client.get("/jobs/characterization/", {"cluster": "acme"})
    assert response.status_code == 200
    figures = response.context["figures"]
    assert set(figures) == {"types", "duration", "queue", "gpus", "states", "telemetry"}
    for name, fig in figures.items():
        assert fig["data"], name
    assert figures["duration"]["layout"]["xaxis"]["type"] == "log"
    # Acme, Philly and PAI reference curves are overlaid on GPU utilization.
    names = {t["name"] for t in figures["telemetry"]["data"]}
    assert {"Seren (Acme paper)", "Kalos (Acme paper)", "Philly", "PAI", "acme"} <= names
    html = response.content.decode()
    for source in ("Seren", "Kalos", "Philly", "Helios", "PAI"):
        assert f">{source}</th>" in html  # summary table columns
    assert response.context["result"].total.jobs == 120


def test_characterization_page_refuses_bad_parameters(operator_client, many_jobs):
    response = operator_client.get("/jobs/characterization/", {"cluster": "nope"})
    assert response.status_code == 400
    assert "unknown cluster" in response.content.decode()
    response = operator_client.get("/jobs/characterization/", {"since": "March"})
    assert response.status_code == 400 and "since: &#x27;March&#x27;" in response.content.decode()


def _csv(response) -> list[dict]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_characterization_csv_exports(operator_client, many_jobs):
    q = {"cluster": "acme", "since": "2026-03-01", "until": "2026-05-01"}
    url = lambda name: reverse("jobs_api:characterization_csv", args=[name])  # noqa: E731
    types = _csv(operator_client.get(url("types"), q))
    total = next(r for r in types if r["job_type"] == "all")
    assert int(total["jobs"]) == 120
    assert sum(float(r["share_of_gpu_jobs"]) for r in types if r["job_type"] != "all") == (
        pytest.approx(1.0)
    )
    states = _csv(operator_client.get(url("states"), q))
    assert [r["final_state"] for r in states] == ["completed", "cancelled", "failed"]
    duration = _csv(operator_client.get(url("duration"), q))
    assert duration[-1]["share_of_gpu_jobs"] == "1.0"
    assert _csv(operator_client.get(url("queue"), q)) and _csv(operator_client.get(url("gpus"), q))
    summary = _csv(operator_client.get(url("summary"), q))
    assert [r["id"] for r in summary] == ["acme", "Seren", "Kalos", "Philly", "Helios", "PAI"]
    assert summary[0]["job_num"] == "120"
    telemetry = _csv(operator_client.get(url("telemetry"), q))
    assert {r["cluster"] for r in telemetry} >= {"Seren", "Kalos", "Philly", "PAI"}
    assert operator_client.get(url("nothing"), q).status_code == 404


def test_long_job_reads_the_rollup_for_series_and_energy(operator_client, db):
    """A 4-hour job: series and energy come from the 1-minute rollup, not raw samples.

    One GPU, a sample every 60 s gaining 3e6 mJ, the counter restarting from 0 (reading 1e6)
    at minute 100: 99 * 3e6 + 1e6 + 140 * 3e6 mJ over 240 minutes.
    """
    t0 = float(int(time.time() // 60) * 60 - 245 * 60)
    base = datetime.fromtimestamp(t0, UTC)
    node = ingest(
        "acme",
        "gpu-l-01",
        t0=t0,
        intervals=241,
        step_s=60,
        gpus=1,
        util=lambda i, k: 70.0,
        energy_mj=lambda i, k: (
            5 * 10**9 + k * 3_000_000 if k < 100 else 1_000_000 + (k - 100) * 3_000_000
        ),
    )
    job = Job.objects.create(
        cluster=node.cluster,
        scheduler_id="long-1",
        job_type="pretrain",
        state="completed",
        submit_at=base,
        start_at=base,
        end_at=base + timedelta(minutes=240),
        gpus_requested=1,
    )
    allocate(job, node, [0], base, base + timedelta(minutes=240))
    response = operator_client.get(f"/jobs/{job.id}/")
    telemetry = response.context["telemetry"]
    assert telemetry.source.startswith("1-minute rollup")
    series = telemetry.series["gpu-l-01 GPU 0"]
    assert 200 <= len(series.ts) <= 241 and set(series.values["gpu_util"]) == {70.0}
    energy = response.context["energy"]
    assert "1-minute rollup" in energy.method
    assert energy.per_gpu[0].resets == 1
    assert energy.per_gpu[0].energy_mj == 99 * 3_000_000 + 1_000_000 + 140 * 3_000_000


def test_an_outsider_sees_every_jobs_metadata_as_squeue_does(outsider_client, job_on_gpus):
    """The job pages hold no log lines: a user in no team sees another user's job whole."""
    page = outsider_client.get(f"/jobs/{job_on_gpus.id}/")
    assert page.status_code == 200
    assert "llama-7b-pretrain" in page.content.decode()
    listed = _csv(outsider_client.get("/api/v1/jobs.csv"))
    assert [(r["scheduler_id"], r["user"]) for r in listed] == [("4242", "alice")]


# --- A 2,048-GPU job ---------------------------------------------------------------------------


def test_a_2048_gpu_job_page_is_bands_outliers_and_nodes_not_gpus_squared(
    operator_client, db, django_assert_max_num_queries
):
    job = big_job()
    # session, user, job, allocations, energy, bands + means, outlier lines, events, the
    # timeline's failures and recovery actions, the verdict's power limit, the team rules.
    with django_assert_max_num_queries(14):
        response = operator_client.get(f"/jobs/{job.id}/")
    assert response.status_code == 200
    html = response.content.decode()
    # The page grows with nodes, not with GPUs x GPUs: well under what one row per GPU needs.
    assert len(html) < 600_000, len(html)
    assert "Allocation: 2048 GPUs on 256 nodes" in html

    figures = response.context["figures"]
    heatmap = figures["allocations"]["data"][0]
    assert len(heatmap["y"]) == 256 and all(max(row) == 8 for row in heatmap["z"])
    # Bands: per metric lowest, highest and median across the GPUs, plus the outlier's line.
    series = figures["series"]["data"]
    names = {t["name"] for t in series}
    assert {"lowest GPU", "lowest to highest GPU", "median GPU"} <= names
    slow = f"{SLOW_NODE} GPU {SLOW_GPU}"
    assert slow in names
    median = next(t for t in series if t["name"] == "median GPU" and t["yaxis"] == "y")
    lowest = next(t for t in series if t["name"] == "lowest GPU" and t["yaxis"] == "y")
    assert set(median["y"]) == {90.0} and set(lowest["y"]) == {20.0}
    # The outlier is named, with its mean beside the job's median, and links its GPU page.
    outliers = response.context["outliers"]
    assert [(o.allocation.label, metric) for o, metric, _, _ in outliers] == [
        (slow, "GPU util (%)")
    ]
    assert f">{slow}</a>" in html and "20.0" in html
    # Energy per node (8 GPUs x 600 W x 1/3 h = 1.6 kWh), per GPU folded away.
    assert len(figures["energy"]["data"][0]["x"]) == 256
    assert set(figures["energy"]["data"][0]["y"]) == {1.6}
    assert '<details id="energy-detail">' in html
    # Events in words, not a Python dict.
    assert "Reported by slurm via big-000; 2,048 GPUs on 256 nodes: big-000 (GPU 0-7)" in html
    assert "and 252 more nodes" in html and "{&#x27;" not in html


def test_characterization_per_type_gpu_hours_read_back_against_the_jobs(operator_client, many_jobs):
    """The "GPU-h" column says GPU-hours: each type's figure on the page is its GPU jobs'
    GPUs x (end - start) summed from the jobs table, in hours (it once showed GPU-seconds)."""
    html = operator_client.get("/jobs/characterization/", {"cluster": "acme"}).content.decode()
    rows = re.findall(
        r'<tr data-type="(\w+)"><td>[^<]*</td><td class="num">\d+</td>\s*'
        r'<td class="num">([\d,.]+)</td>',
        html,
    )
    assert rows
    expected: dict[str, float] = {}
    for j in many_jobs:
        if j.cluster.name == "acme" and j.gpus_requested and j.start_at and j.end_at:
            seconds = (j.end_at - j.start_at).total_seconds() * j.gpus_requested
            expected[j.job_type] = expected.get(j.job_type, 0.0) + seconds
    for job_type, shown in rows:
        assert float(shown.replace(",", "")) == pytest.approx(
            expected.get(job_type, 0.0) / 3600, abs=0.05
        ), job_type


def test_a_slurm_job_id_finds_its_job(operator_client, many_jobs):
    job = next(j for j in many_jobs if j.cluster.name == "acme")
    response = operator_client.get("/jobs/", {"id": job.scheduler_id})
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.id}/"
    # The URL an admin builds from squeue's JOBID leads to the same page.
    response = operator_client.get(f"/jobs/id/{job.scheduler_id}/", follow=True)
    assert response.redirect_chain[-1][0] == f"/jobs/{job.id}/"
    assert response.status_code == 200
    # An id no job has lists nothing, and says so.
    response = operator_client.get("/jobs/", {"id": "424242"})
    assert response.status_code == 200 and response.context["page"].paginator.count == 0
    assert "No job matches." in response.content.decode()


def test_job_list_filters_by_submission_date_and_sorts(operator_client, many_jobs):
    acme = [j for j in many_jobs if j.cluster.name == "acme"]
    day = sorted(j.submit_at for j in acme)[len(acme) // 2].date()
    response = operator_client.get(
        "/jobs/", {"cluster": "acme", "since": day.isoformat(), "until": day.isoformat()}
    )
    assert response.status_code == 200
    expected = {j.id for j in acme if j.submit_at.date() == day}
    assert expected and {j.id for j in response.context["page"]} == expected
    response = operator_client.get("/jobs/", {"cluster": "acme", "sort": "gpus"})
    gpus = [j.gpus_requested for j in response.context["page"]]
    assert gpus == sorted(gpus, reverse=True) and gpus[0] == max(j.gpus_requested for j in acme)
    response = operator_client.get("/jobs/", {"cluster": "acme", "sort": "oldest"})
    assert response.context["page"][0].submit_at == min(j.submit_at for j in acme)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"type": "bogus"}, "type: unknown value"),
        ({"state": "exploded"}, "state: unknown value"),
        ({"cluster": "nope"}, "cluster: unknown cluster"),
        ({"since": "March"}, "since: Enter a valid date"),
        ({"since": "2026-03-02", "until": "2026-03-01"}, "until: before since"),
        ({"sort": "random"}, "sort: Select a valid choice"),
    ],
)
def test_job_list_refuses_a_filter_no_job_can_match(operator_client, many_jobs, params, message):
    response = operator_client.get("/jobs/", params)
    assert response.status_code == 400
    assert message in response.content.decode()
    csv_response = operator_client.get("/api/v1/jobs.csv", params)
    assert csv_response.status_code == 400 and message in csv_response.content.decode()


def test_job_list_shows_durations_as_hms_and_running_jobs_elapsed(operator_client, db):
    acme = Cluster.objects.create(name="acme")
    now = datetime.now(UTC)
    Job.objects.create(
        cluster=acme,
        scheduler_id="1",
        state="completed",
        gpus_requested=1,
        submit_at=now - timedelta(hours=30),
        start_at=now - timedelta(hours=27, seconds=5),
        end_at=now,
    )
    Job.objects.create(
        cluster=acme,
        scheduler_id="2",
        state="running",
        gpus_requested=1,
        submit_at=now - timedelta(hours=3),
        start_at=now - timedelta(hours=2),
    )
    html = operator_client.get("/jobs/", {"cluster": "acme"}).content.decode()
    assert '<td class="num">27:00:05</td>' in html  # a finished job's duration
    assert '<td class="num">2:59:55</td>' in html  # its queue time
    assert re.search(r'title="running">2:00:0\d</span>', html)  # a running job's elapsed


def test_a_missing_job_is_a_branded_page_that_offers_the_scheduler_id_search(
    operator_client, many_jobs
):
    response = operator_client.get("/jobs/999999/")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'id="not-found"' in html and "Vigil has no job 999999" in html
    assert 'href="/jobs/?id=999999"' in html  # what a Slurm admin likely meant


def test_an_address_that_matches_no_page_gets_the_branded_page(operator_client, settings):
    settings.DEBUG = False
    response = operator_client.get("/no-such-page/")
    assert response.status_code == 404
    assert 'id="not-found"' in response.content.decode()
