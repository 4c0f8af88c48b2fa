"""Celery tasks of the evaluation app: thin wrappers over execution.py, on the cluster's
scheduler worker (queue `recovery.<cluster>`, the host with the Slurm CLI)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from webapp.core.ingest import DURABLE_TASK
from webapp.core.scheduler import scheduler_queue
from webapp.core.workrows import task_outcome
from webapp.evaluation.choices import RunStatus
from webapp.evaluation.execution import run_submit, run_track

SUBMIT_TASK = "vigil.evaluation.submit"
TRACK_TASK = "vigil.evaluation.track"


def submit_send(run_id: int, cluster_name: str) -> None:
    submit.apply_async((run_id,), queue=scheduler_queue(cluster_name))


@shared_task(name=SUBMIT_TASK, **DURABLE_TASK)
def submit(self, run_id: int) -> dict:
    """Submit a run's jobs to Slurm, then follow them; come back while another worker holds
    the run (it may have died submitting it)."""
    outcome = run_submit(run_id, worker=self.request.hostname or "worker")
    submitted = outcome.status == RunStatus.RUNNING
    if submitted:
        track.apply_async(
            (run_id,),
            countdown=settings.VIGIL_EVAL_TRACK_S,
            queue=self.request.delivery_info.get("routing_key"),
        )
    return task_outcome(self, outcome, run=run_id, submitted=submitted)


@shared_task(name=TRACK_TASK, **DURABLE_TASK)
def track(self, run_id: int) -> dict:
    """Look at a run's jobs again; come back until every one is final."""
    delay = run_track(run_id)
    if delay is not None:
        raise self.retry(countdown=delay, max_retries=None)
    return {"run": run_id, "finished": True}
