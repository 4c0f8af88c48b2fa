"""The characterization counts the GPU time a job consumed in every run, a run that failed and
was requeued included (the paper's GPU time is the time consumed), not only its last run."""

from __future__ import annotations

import re

from django.core.cache import cache

from tests.jobs.conftest import CLUSTER, event
from webapp.jobs.models import JobAllocation
from webapp.jobs.services import job_events_ingest


def _page_gpu_hours(client, job_type: str) -> float:
    page = client.get(f"/jobs/characterization/?cluster={CLUSTER}").content.decode()
    row = re.search(rf'<tr data-type="{job_type}">(.*?)</tr>', page, re.S)
    assert row, f"no {job_type} row on the page"
    cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
    return float(cells[1].replace(",", ""))  # GPU jobs, then GPU-h


def test_a_requeued_jobs_first_run_counts_in_its_types_gpu_hours(sender, t0, operator_client):
    cache.clear()
    alloc = [{"node": "gpu-node-01", "gpu_indices": list(range(8))}]
    start = t0 - 7200
    common = {"job_type": "pretrain", "gpus_requested": 8}
    job_events_ingest(
        sender.raw(
            event("9001", "submitted", start, submit_ts=start, **common),
            event("9001", "started", start, submit_ts=start, start_ts=start, allocation=alloc),
        )
    )
    # One hour in, a GPU fails and the job is requeued (Slurm moves its submit time).
    job_events_ingest(sender.raw(event("9001", "requeued", start + 3600, submit_ts=start + 3600)))
    # Waiting to run again: its first hour on 8 GPUs still counts (the demo read 0.0).
    assert _page_gpu_hours(operator_client, "pretrain") == 8.0
    job_events_ingest(
        sender.raw(
            event("9001", "started", start + 3660, submit_ts=start + 3600,
                  start_ts=start + 3660, allocation=alloc),
            event("9001", "ended", start + 5460, state="COMPLETED", exit_code=0,
                  end_ts=start + 5460),
        )
    )  # fmt: skip

    # Independently: every GPU interval the job held, summed.
    held_s = sum((a.end - a.start).total_seconds() for a in JobAllocation.objects.all())
    assert held_s / 3600 == 12.0
    assert _page_gpu_hours(operator_client, "pretrain") == 12.0
    cache.clear()
