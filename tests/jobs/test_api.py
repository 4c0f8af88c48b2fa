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
        ("Bearer not-the-right-token-at-all", "Authorization: unknown or wrong node token"),
    ],
)
def test_bad_token_is_401_and_writes_no_row(client, sender, t0, header, detail):
    headers = {"HTTP_AUTHORIZATION": header} if header else {}
    response = post(client, body_of(sender, event("a", "submitted", t0)), **headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json() == {"error": detail}
    assert nothing_stored()
    assert not RejectedBatch.objects.exists()  # anyone can send these: no table to fill


def test_unknown_node_and_wrong_token_get_the_same_answer(client, sender, t0):
    """A guesser cannot tell a node that does not exist from a token that is wrong."""
    from webapp.fleet.models import Node
    from webapp.fleet.services import caches_clear, node_scheduler_grant, node_token_issue

    gone = node_token_issue("testcluster", "decommissioned-01")
    node_scheduler_grant("testcluster", "decommissioned-01")
    body = body_of(sender, event("a", "submitted", t0))
    # Known once (and so in every cache), then removed from the fleet.
    assert post(client, {**body, "node": "decommissioned-01"}, gone).status_code == 202
    Node.objects.filter(hostname="decommissioned-01").delete()
    caches_clear()  # as after a removal by another process (the fleet module's cache rule)

    unknown_node = post(client, {**body, "node": "decommissioned-01"}, gone)
    wrong_token = post(client, body, "f" * 64)

    assert unknown_node.status_code == wrong_token.status_code == 401
    assert unknown_node.json() == wrong_token.json()
    assert unknown_node.json() == {"error": "Authorization: unknown or wrong node token"}


def test_a_rotated_token_stops_working(client, sender, t0):
    from webapp.fleet.services import node_token_issue

    body = body_of(sender, event("a", "submitted", t0))
    assert post(client, body, sender.token).status_code == 202
    new_token = node_token_issue(sender.cluster, sender.node)

    assert post(client, body, sender.token).status_code == 401
    assert post(client, body, new_token).status_code == 202


def test_unauthenticated_requests_are_counted_in_metrics(client, sender, t0, settings):
    settings.VIGIL_METRICS_KEY = "scrape-key-123"
    body = body_of(sender, event("a", "submitted", t0))
    post(client, body)
    post(client, body, "f" * 64)
    post(client, body, sender.token)  # authenticated: not counted

    scrape = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-key-123")

    assert "vigil_api_unauthenticated_requests_total 2.0" in scrape.content.decode()


def test_cluster_and_node_may_be_left_out(client, sender, t0):
    body = body_of(sender, event("a", "submitted", t0))
    del body["cluster"], body["node"]
    response = post(client, body, sender.token)
    assert response.status_code == 202, response.json()
    assert Job.objects.filter(scheduler_id="a").exists()


@pytest.mark.parametrize(("field", "value"), [("cluster", "othercluster"), ("node", "gpu-node-01")])
def test_body_naming_another_node_is_403(client, sender, t0, field, value):
    body = {**body_of(sender, event("a", "submitted", t0)), field: value}
    response = post(client, body, sender.token)
    assert response.status_code == 403
    assert response.json()["error"].startswith("cluster/node: the body names ")
    assert nothing_stored()


def test_body_over_the_cap_is_413_before_it_is_read(client, sender, t0, settings):
    settings.VIGIL_API_MAX_BODY_BYTES = 2048
    events = [event(f"j{i}", "submitted", t0) for i in range(100)]
    big = json.dumps(body_of(sender, *events))
    assert len(big) > 2048

    response = post(client, big, sender.token)

    assert response.status_code == 413
    assert "VIGIL_API_MAX_BODY_BYTES" in response.json()["error"]
    assert nothing_stored()
    assert post(client, body_of(sender, events[0]), sender.token).status_code == 202


def test_a_body_is_never_read_past_the_cap(rf, sender, settings):
    """Without a usable Content-Length the view reads at most the cap (and one byte more)."""
    from webapp.jobs.api import job_events

    settings.VIGIL_API_MAX_BODY_BYTES = 1024
    request = rf.post(
        URL, data=b" " * 5000 + b"{}", content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {sender.token}",
    )  # fmt: skip
    del request.META["CONTENT_LENGTH"]
    response = job_events(request)
    assert response.status_code == 413


def test_deep_nesting_is_400_not_500(client, sender):
    response = post(client, "[" * 100_000 + "]" * 100_000, sender.token)
    assert response.status_code == 400
    assert response.json() == {"error": "body: nested too deeply"}
    deep_inside = '{"events": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert post(client, deep_inside, sender.token).status_code == 400
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


def test_a_known_node_without_the_scheduler_role_is_forbidden_not_unauthenticated(
    client, sender, t0
):
    from webapp.fleet.services import node_scheduler_grant

    node_scheduler_grant(sender.cluster, sender.node, False)
    response = post(client, body_of(sender, event("x-1", "submitted", t0)), sender.token)

    assert response.status_code == 403
    assert "scheduler role" in response.json()["error"]
    assert nothing_stored()
    assert RejectedBatch.objects.filter(reason="not_scheduler").count() == 1
