"""The job list and its CSV say of a pending requeued job what its page says: the exit code
it keeps is its previous run's, not its own (it has not ended)."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

from django.utils import timezone

from tests.factory import cluster_make
from webapp.fleet.models import Cluster
from webapp.jobs.models import Job


def _jobs(cluster: Cluster) -> tuple[Job, Job]:
    now = timezone.now()
    common = dict(cluster=cluster, job_type="pretrain", gpus_requested=1, nodes_requested=1)
    waiting = Job.objects.create(
        scheduler_id="7101",
        name="requeued",
        state="pending",
        submit_at=now - timedelta(minutes=5),
        exit_code=-6,
        **common,
    )
    failed = Job.objects.create(
        scheduler_id="7102",
        name="failed",
        state="failed",
        submit_at=now - timedelta(hours=2),
        start_at=now - timedelta(hours=1),
        end_at=now - timedelta(minutes=30),
        exit_code=1,
        **common,
    )
    return waiting, failed


def test_the_list_and_csv_give_a_pending_jobs_kept_exit_code_as_the_previous_runs(
    operator_client, db
):
    cluster_make("acme", {"gpu-q-01": 1})
    _jobs(Cluster.objects.get(name="acme"))

    rows = list(
        csv.DictReader(io.StringIO(operator_client.get("/api/v1/jobs.csv").content.decode()))
    )
    by_id = {r["scheduler_id"]: r for r in rows}
    # A script summing failures by exit code must not count a job still waiting to run.
    assert by_id["7101"]["exit_code"] == ""
    assert by_id["7101"]["previous_run_exit_code"] == "-6"
    assert by_id["7102"]["exit_code"] == "1"
    assert by_id["7102"]["previous_run_exit_code"] == ""

    html = operator_client.get("/jobs/").content.decode()
    row = re.search(r"<tr>(?:(?!</tr>).)*>7101</a>(.*?)</tr>", html, re.S)
    assert row, "the requeued job is not listed"
    text = " ".join(re.sub(r"<[^>]+>", " ", row.group(1)).split())
    assert "Pending (previous run: -6)" in text
