"""`manage.py eval_request`: an evaluation requested as the page's form does; the demo plans
one with --plan-only, which needs no evaluation program and sends nothing to the scheduler."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from tests.evaluation.conftest import fleet_make
from webapp.evaluation.models import EvaluationRun


def _request(checkpoint, *extra: str) -> str:
    out = io.StringIO()
    call_command(
        "eval_request", "--cluster", "evr", "--model", str(checkpoint), "--datasets", "12",
        "--nodes", "2", "--gpus-per-node", "8", "--model-size-gb", "14", *extra, stdout=out,
    )  # fmt: skip
    return out.getvalue()


def test_plan_only_stores_both_plans_and_sends_nothing(
    db, checkpoint, settings, django_capture_on_commit_callbacks
):
    settings.VIGIL_EVAL_PROGRAM = ""  # a site that runs no evaluations, as the demo
    fleet_make("evr", {"gpu-a": 8, "gpu-b": 8})
    with django_capture_on_commit_callbacks() as sent:
        said = _request(checkpoint, "--plan-only", "--unless-any")
    run = EvaluationRun.objects.get()
    assert run.status == "planned" and len(run.datasets) == 12 and run.model_size_gb == 14
    assert run.prediction["speedup"] > 1 and run.jobs.exists()
    assert sent == []  # nothing goes to the cluster's scheduler worker
    assert f"run {run.pk}:" in said and "planned only" in said
    # Asked again (the demo's next start): nothing more.
    assert "already" in _request(checkpoint, "--plan-only", "--unless-any")
    assert EvaluationRun.objects.count() == 1


def test_a_refused_request_names_its_field(db, checkpoint, settings):
    fleet_make("evr", {"gpu-a": 8})  # one node: two are asked for
    with pytest.raises(CommandError, match=r"^nodes: 2 nodes x 8 GPUs asked"):
        _request(checkpoint, "--plan-only")
    fleet_make("evr", {"gpu-b": 8})
    settings.VIGIL_EVAL_PROGRAM = ""
    with pytest.raises(CommandError, match=r"^program: VIGIL_EVAL_PROGRAM is not set"):
        _request(checkpoint)  # to be submitted, a request needs the program
    assert not EvaluationRun.objects.exists()
