"""Evaluation requests: a good one stores the run, both predictions and its plan's jobs; a bad
one is refused with a message naming the problem and stores nothing."""

from __future__ import annotations

import pytest

from tests.evaluation.conftest import fleet_make
from webapp.evaluation.models import EvaluationJob, EvaluationRun
from webapp.evaluation.services import EvaluationError, evaluation_request

CLUSTER = "evc"


@pytest.fixture
def fleet(db):
    fleet_make(CLUSTER, {"gpu-a": 8, "gpu-b": 8, "gpu-c": 4})


def _request(checkpoint, **kw):
    args = {
        "cluster_name": CLUSTER,
        "model_path": str(checkpoint),
        "datasets": ["mmlu", "gsm8k", "humaneval"],
        "nodes": 2,
        "gpus_per_node": 8,
        "user": "alice",
    }
    args.update(kw)
    return evaluation_request(**args)


def test_a_request_stores_the_run_its_predictions_and_jobs(
    fleet, checkpoint, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as sent:
        run = _request(checkpoint)
    assert len(sent) == 1  # the submission goes to the cluster's worker after the commit
    assert run.status == "planned" and run.plan == "decoupled"
    assert run.model_size_gb == pytest.approx(4096 / 1e9)
    assert run.prediction["speedup"] > 1
    assert run.predicted_makespan_s == run.prediction["decoupled"]["makespan_s"]
    kinds = list(run.jobs.values_list("kind", flat=True))
    assert kinds.count("load") == 2 and "infer" in kinds and "metrics" in kinds
    infer = run.jobs.filter(kind="infer").first()
    assert infer.depends_on == [f"load-{infer.node_index}"]
    assert {e["source"] for e in run.prediction["estimates"]} == {"default"}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"datasets": []}, "datasets", "none given"),
        ({"datasets": ["mmlu", "gsm8k", "mmlu"]}, "datasets", "'mmlu' is listed twice"),
        ({"datasets": ["mmlu; rm -rf /"]}, "datasets", "is not a dataset name"),
        ({"model_path": "/nonexistent/ckpt"}, "model", "is not under a model root"),
        ({"nodes": 3}, "nodes", "3 nodes x 8 GPUs asked; cluster evc has 2 nodes"),
        ({"gpus_per_node": 16, "nodes": 1}, "nodes", "1 nodes x 16 GPUs asked"),
        ({"cluster_name": "nope"}, "cluster", "no cluster 'nope'"),
        ({"plan": "fastest"}, "plan", "is not one of"),
    ],
)
def test_bad_requests_are_refused_and_create_nothing(fleet, checkpoint, change, field, message):
    with pytest.raises(EvaluationError, match=message) as caught:
        _request(checkpoint, **change)
    assert caught.value.field == field
    assert EvaluationRun.objects.count() == 0 and EvaluationJob.objects.count() == 0


def test_an_unknown_model_path_under_the_root_is_refused(fleet, checkpoint):
    with pytest.raises(EvaluationError, match="no checkpoint at"):
        _request(checkpoint, model_path=str(checkpoint.parent / "step-2000"))
    (checkpoint.parent / "empty").mkdir()
    with pytest.raises(EvaluationError, match="is empty"):
        _request(checkpoint, model_path=str(checkpoint.parent / "empty"))
    assert EvaluationRun.objects.count() == 0


def test_no_program_configured_is_refused(fleet, checkpoint, settings):
    settings.VIGIL_EVAL_PROGRAM = ""
    with pytest.raises(EvaluationError, match="VIGIL_EVAL_PROGRAM is not set"):
        _request(checkpoint)
    assert EvaluationRun.objects.count() == 0


def test_jobs_nothing_reports_are_reported_failed_not_waited_for(
    fleet, checkpoint, settings, tmp_path
):
    """No Slurm watcher feeds the jobs app: after UNSEEN_AFTER the run ends, saying why."""
    settings.VIGIL_SLURM_BIN_DIR = str(tmp_path / "no-slurm-here")  # its scancel cancels nothing
    from datetime import timedelta

    from django.utils import timezone

    from webapp.evaluation.execution import UNSEEN_AFTER, run_track

    run = _request(checkpoint, datasets=["mmlu"], nodes=1)
    long_ago = timezone.now() - UNSEEN_AFTER - timedelta(seconds=1)
    EvaluationRun.objects.filter(pk=run.pk).update(
        status="running", submitted_at=long_ago, node_names=["gpu-a"]
    )
    run.jobs.update(status="submitted", submitted_at=long_ago, attempts=1)
    for i, job in enumerate(run.jobs.order_by("order")):
        job.scheduler_id = str(9000 + i)
        job.save(update_fields=["scheduler_id"])
    assert run_track(run.pk) is None  # finished: nothing left to wait for
    run.refresh_from_db()
    assert run.status == "partial"
    statuses = dict(run.jobs.values_list("kind", "status").distinct())
    assert statuses["load"] == "failed" and "Slurm watcher" in run.jobs.get(kind="load").error
    assert set(run.jobs.exclude(kind="load").values_list("status", flat=True)) <= {
        "failed",
        "cancelled",
    }
