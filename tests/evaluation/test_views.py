"""The evaluation page and its CSV exports, through Django's test client: everyone logged in
reads; only operators request; a bad request is refused with its reason and stores nothing."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from tests.evaluation.conftest import fleet_make
from webapp.evaluation.models import EvaluationRun
from webapp.evaluation.services import evaluation_request

CLUSTER = "evv"


@pytest.fixture
def run(db, checkpoint):
    fleet_make(CLUSTER, {"gpu-a": 8, "gpu-b": 8})
    return evaluation_request(
        cluster_name=CLUSTER,
        model_path=str(checkpoint),
        datasets=["mmlu", "gsm8k", "humaneval", "mbpp"],
        nodes=2,
        gpus_per_node=8,
        user="op",
    )


def _figures(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="figures-data" type="application/json">') + len(
        '<script id="figures-data" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def test_page_shows_both_plans_and_the_history(operator_client, run):
    response = operator_client.get(f"/evaluation/?cluster={CLUSTER}")
    assert response.status_code == 200
    figures = _figures(response)
    assert {"gantt-baseline", "gantt-decoupled", "makespan", "gpu-time"} <= set(figures)
    # The decoupled chart has a loader lane per node and CPU lanes for the metric jobs.
    lanes = {y for trace in figures["gantt-decoupled"]["data"] for y in trace["y"]}
    assert {"n0 loader", "n1 loader"} <= lanes and any("cpu" in lane for lane in lanes)
    baseline_phases = {trace["name"] for trace in figures["gantt-baseline"]["data"]}
    assert baseline_phases == {"loading", "inference", "metrics"}
    html = response.content.decode()
    assert f"{run.prediction['speedup']:.2f}x" in html
    assert 'id="request"' in html  # an operator may request


def test_a_cluster_added_later_is_offered_on_the_next_page(operator_client, run):
    assert "ev-new</option>" not in operator_client.get("/evaluation/").content.decode()
    fleet_make("ev-new", {"gpu-n": 8})
    html = operator_client.get("/evaluation/").content.decode()
    assert "ev-new</option>" in html and f"{CLUSTER}</option>" in html


def test_a_reader_sees_the_page_but_may_not_request(outsider_client, run, checkpoint):
    response = outsider_client.get("/evaluation/")
    assert response.status_code == 200 and 'id="request"' not in response.content.decode()
    refused = outsider_client.post(
        "/evaluation/request/",
        {"cluster": CLUSTER, "model_path": str(checkpoint), "datasets": "mmlu", "nodes": 1,
         "gpus_per_node": 8, "plan": "decoupled"},
    )  # fmt: skip
    assert refused.status_code == 403
    assert EvaluationRun.objects.count() == 1


@pytest.mark.parametrize(
    ("datasets", "nodes", "message"),
    [
        ("", 1, "datasets: none given"),
        ("mmlu, gsm8k, mmlu", 1, "datasets: &#x27;mmlu&#x27; is listed twice"),
        ("mmlu", 3, "nodes: 3 nodes x 8 GPUs asked; cluster evv has 2 nodes"),
    ],
)
def test_a_bad_request_is_refused_with_its_reason(
    operator_client, run, checkpoint, datasets, nodes, message
):
    response = operator_client.post(
        "/evaluation/request/",
        {"cluster": CLUSTER, "model_path": str(checkpoint), "datasets": datasets,
         "nodes": nodes, "gpus_per_node": 8, "plan": "decoupled"},
    )  # fmt: skip
    assert response.status_code == 400
    assert message in response.content.decode()
    assert EvaluationRun.objects.count() == 1


def test_an_unknown_model_path_is_refused_as_json(operator_client, run):
    response = operator_client.post(
        "/evaluation/request/",
        {"cluster": CLUSTER, "model_path": "/etc/passwd", "datasets": "mmlu", "nodes": 1,
         "gpus_per_node": 8, "plan": "decoupled"},
        HTTP_ACCEPT="application/json",
    )  # fmt: skip
    assert response.status_code == 400
    assert response.json()["error"].startswith("model: /etc/passwd is not under a model root")
    assert EvaluationRun.objects.count() == 1


def test_a_good_request_is_stored_and_shown(operator_client, run, checkpoint):
    response = operator_client.post(
        "/evaluation/request/",
        {"cluster": CLUSTER, "model_path": str(checkpoint), "datasets": "mmlu\nbbh\nmath",
         "nodes": 1, "gpus_per_node": 4, "plan": "baseline"},
    )  # fmt: skip
    assert response.status_code == 302
    new = EvaluationRun.objects.latest("id")
    assert (new.datasets, new.plan, new.gpus_per_node) == (["mmlu", "bbh", "math"], "baseline", 4)
    assert new.requested_by == "operator"
    page = operator_client.get(response["Location"])
    assert f"run {new.pk}:" in page.content.decode()


def test_the_forms_example_checkpoint_is_one_the_page_accepts(operator_client, run, checkpoint):
    """The model path the form shows as its example lies under the configured model root (the
    demo makes that checkpoint), so typing the example in is accepted."""
    html = operator_client.get(f"/evaluation/?cluster={CLUSTER}").content.decode()
    placeholder = re.search(r'id="model-path"[^>]*placeholder="([^"]+)"', html)[1]
    assert placeholder == str(checkpoint)
    response = operator_client.post(
        "/evaluation/request/",
        {"cluster": CLUSTER, "model_path": placeholder, "datasets": "mmlu",
         "nodes": 1, "gpus_per_node": 8, "plan": "decoupled"},
    )  # fmt: skip
    assert response.status_code == 302
    assert EvaluationRun.objects.latest("id").model_path == str(checkpoint)


def test_csv_exports(operator_client, run):
    runs = list(
        csv.reader(io.StringIO(operator_client.get("/api/v1/evaluation/runs.csv").content.decode()))
    )
    assert runs[0][:3] == ["run", "cluster", "created_utc"] and runs[1][0] == str(run.pk)
    jobs = list(
        csv.reader(
            io.StringIO(
                operator_client.get(f"/api/v1/evaluation/runs/{run.pk}/jobs.csv").content.decode()
            )
        )
    )
    assert len(jobs) - 1 == run.jobs.count()
    plans = list(
        csv.reader(
            io.StringIO(
                operator_client.get(f"/api/v1/evaluation/runs/{run.pk}/plan.csv").content.decode()
            )
        )
    )
    assert {r[0] for r in plans[1:]} == {"baseline", "decoupled"}
    assert operator_client.get("/api/v1/evaluation/runs/999999/jobs.csv").status_code == 404
