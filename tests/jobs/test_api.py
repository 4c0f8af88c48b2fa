"""POST /api/v1/job-events: status codes and JSON bodies; nothing stored on any error."""

from __future__ import annotations

import json

import pytest

from tests.jobs.conftest import event
from webapp.core.models import RejectedBatch
from webapp.jobs.models import Job, JobAllocation, JobEvent

URL = "/api/v1/job-events"


def post(client, body, token: str | None = None, **headers):
    if token is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **headers)


def body_of(sender, *events: dict) -> dict:
    """A batch as an HTTP client sends it: no token (it goes in the header), no batch id."""
    batch = sender.batch(*events)
    for key in ("token", "batch_id", "sent_at", "v", "source"):
        batch.pop(key)
    return batch


def nothing_stored() -> bool:
    return not (Job.objects.exists() or JobEvent.objects.exists() or JobAllocation.objects.exists())


def test_events_are_accepted_and_stored(client, sender, t0):
    body = body_of(
        sender,
        event("k8s-1", "submitted", t0, name="sft-chat", user="bob", gpus_requested=2),
        event("k8s-1", "started", t0 + 5,
              allocation=[{"node": "gpu-node-01", "gpu_indices": [2, 3]}]),
        event("k8s-2", "submitted", t0 + 1, job_type="eval"),
    )  # fmt: skip
    response = post(client, body, sender.token)

    assert response.status_code == 202
    answer = response.json()
    assert (answer["accepted"], answer["jobs"], answer["duplicates"]) == (3, 2, 0)
    job = Job.objects.get(scheduler_id="k8s-1")
    assert (job.state, job.source, job.user) == ("running", "http", "bob")
    assert sorted(job.allocations.values_list("gpu_index", flat=True)) == [2, 3]
    assert Job.objects.get(scheduler_id="k8s-2").job_type == "eval"

    again = post(client, body, sender.token)
    assert again.status_code == 202 and again.json()["duplicates"] == 3
    assert JobEvent.objects.count() == 3


def test_no_login_or_csrf_needed(sender, t0):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    response = post(client, body_of(sender, event("a", "submitted", t0)), sender.token)
    assert response.status_code == 202


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (None, "Authorization: expected 'Bearer <node token>'"),
        ("Basic dXNlcjpwYXNz", "Authorization: expected 'Bearer <node token>'"),
        ("Bearer not-the-right-token-at-all", "Authorization: wrong token for node"),
    ],
)
def test_bad_token_is_401(client, sender, t0, header, detail):
    headers = {"HTTP_AUTHORIZATION": header} if header else {}
    response = post(client, body_of(sender, event("a", "submitted", t0)), **headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"].startswith(detail)
    assert nothing_stored()


def test_unknown_sender_is_401(client, sender, t0):
    body = {**body_of(sender, event("a", "submitted", t0)), "node": "nobody"}
    response = post(client, body, sender.token)
    assert response.status_code == 401
    assert response.json() == {"error": "Authorization: no node 'nobody' in cluster 'testcluster'"}
    assert nothing_stored()


@pytest.mark.parametrize(
    "body", ["{not json", b"\xff\xfe", "[1, 2]", ""], ids=["syntax", "bytes", "list", "empty"]
)
def test_malformed_json_is_400(client, sender, body):
    response = post(client, body, sender.token)
    assert response.status_code == 400
    assert response.json()["error"].startswith("body: ")
    assert nothing_stored()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"job_type": "training"}, "events.1.job_type: Input should be"),
        ({"gpus_requested": -1}, "events.1.gpus_requested: Input should be greater than"),
        (
            {"start_ts": 1_700_000_100, "end_ts": 1_700_000_000},
            "events.1: Value error, end_ts is before start_ts (end before start)",
        ),
        (
            {"allocation": [{"node": "gpu-node-77", "gpu_indices": [0]}]},
            "events.1.allocation.0.node: no node 'gpu-node-77' in cluster 'testcluster'",
        ),
    ],  # fmt: skip
)
def test_invalid_event_is_422_and_nothing_is_stored(client, sender, t0, change, error):
    bad = {**event("b", "ended", t0 + 60, state="COMPLETED"), **change}
    response = post(client, body_of(sender, event("a", "submitted", t0), bad), sender.token)

    assert response.status_code == 422
    assert list(response.json()) == ["error"]
    assert response.json()["error"].startswith(error)
    assert nothing_stored()
    assert RejectedBatch.objects.filter(node="scheduler-k8s").count() == 1


def test_token_in_the_body_is_422(client, sender, t0):
    body = {**body_of(sender, event("a", "submitted", t0)), "token": sender.token}
    response = post(client, body, sender.token)
    assert response.status_code == 422
    assert response.json()["error"].startswith("token: ")


def test_get_is_405_json(client):
    response = client.get(URL)
    assert response.status_code == 405
    assert response.json()["error"].startswith("method: GET")


def test_readme_curl_example_works(client, default_rules):
    """The README's curl example, sent as written, is accepted."""
    import io
    import re
    from pathlib import Path

    from django.core.management import call_command

    from webapp.fleet.services import node_token_issue

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Job events API") :]
    body = json.loads(re.search(r"-d '(.*?)'", section, re.DOTALL).group(1))
    # The README's command issues the token (and the scheduler role the events need).
    command = re.search(r"manage\.py issue_node_token ([^#\n]+)", section).group(1).split()
    out = io.StringIO()
    call_command("issue_node_token", *command, "--json", stdout=out)
    token = json.loads(out.getvalue())[body["node"]]
    node_token_issue(body["cluster"], "gpu-a-001")

    response = post(client, body, token)

    assert response.status_code == 202, response.json()
    assert (response.json()["accepted"], response.json()["jobs"]) == (3, 1)
    job = Job.objects.get(scheduler_id="dlc7x2k")
    assert (job.state, job.job_type, job.allocations.count()) == ("completed", "sft", 8)
