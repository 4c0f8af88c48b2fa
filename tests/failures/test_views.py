"""Failure pages: login required, the timeline (filters, lanes, CSV), one failure with its
evidence in context and the blamed node's Xid history."""

from __future__ import annotations

import csv
import io
import re
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.failures.conftest import nccl_window, xid_event
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose

pytestmark = pytest.mark.django_db


def _rows(response) -> list[dict]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.DictReader(io.StringIO(body.decode())))


@pytest.fixture
def diagnosed(fleet) -> FailureEvent:
    """A pretraining job that failed with NCCL timeouts after an Xid 79 on gpu-node-02, and a
    script error of another user's job."""
    end = float(int(time.time())) - 300  # detected as it happens: recovery acts on it
    fleet.run_job("200", end - 6 * 3600, None)
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(end - 700, 79, index=3)])
    )
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=[nccl_window("200", end - 60)]))
    fleet.run_job("200", end - 6 * 3600, end)
    fleet.run_job("201", end - 120, None, nodes=("gpu-node-01",), job_type="debug", user="bob")
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01",
            log_windows=[
                {
                    "job_id": "201",
                    "ts": end - 2,
                    "path": "/logs/201.err",
                    "first_line_no": 1,
                    "lines": [
                        "Traceback (most recent call last):",
                        '  File "/home/bob/x.py", line 3, in <module>',
                        "NameError: name 'foo' is not defined",
                    ],
                }
            ],
        )
    )
    fleet.run_job("201", end - 120, end + 30, nodes=("gpu-node-01",), job_type="debug", user="bob")
    for f in FailureEvent.objects.all():
        failure_diagnose(f.pk)
    return FailureEvent.objects.get(job__scheduler_id="200")


@pytest.mark.parametrize(
    "path",
    [
        "/failures/",
        "/api/v1/failures.csv",
        "/failures/reliability/",
        "/api/v1/failures/reliability/table3.csv",
        "/failures/1/",
        "/api/v1/failures/1/evidence.csv",
    ],
)
def test_anonymous_visitors_are_sent_to_login(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_timeline_shows_no_gpu_when_no_node_is_blamed(operator_client, diagnosed):
    # A GPU index without a node (the log named "Device: 0" but no host) means nothing alone.
    FailureEvent.objects.exclude(pk=diagnosed.pk).update(
        blamed_node=None, blamed_host="", blamed_gpu_label="0"
    )
    body = operator_client.get("/failures/").content.decode()
    cells = re.findall(r'<td class="blamed">(.*?)</td>', body)
    assert len(cells) == FailureEvent.objects.count()
    assert [c for c in cells if c != "—"] == [f"gpu-node-02 · GPU {diagnosed.blamed_gpu_label}"]


def test_timeline_lists_and_draws_every_failure(operator_client, diagnosed):
    response = operator_client.get("/failures/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "gpu_off_bus" in body and "user_exception" in body
    fig = response.context["figures"]["timeline"]
    names = {t["name"] for t in fig["data"]}
    assert {"infrastructure", "script"} <= names
    lanes = {y for t in fig["data"] for y in t["y"]}
    assert "gpu-node-02" in lanes  # the blamed node's lane
    urls = {c[0] for t in fig["data"] for c in t["customdata"]}
    assert f"/failures/{diagnosed.pk}/" in urls


def test_timeline_lanes_per_job(operator_client, diagnosed):
    fig = operator_client.get("/failures/?lane=job").context["figures"]["timeline"]
    lanes = {y for t in fig["data"] for y in t["y"]}
    assert {"job 200", "job 201"} <= lanes


@pytest.mark.parametrize(
    ("query", "jobs"),
    [
        ("category=script", {"201"}),
        ("cause=gpu_off_bus&kind=job_failure", {"200"}),
        ("job_type=pretrain&kind=job_failure", {"200"}),
        ("user=bob", {"201"}),
        ("cluster=testcluster", {"200", "201"}),  # an unknown one is refused: test_timeline_cluster
    ],
)
def test_timeline_filters_and_csv_agree(operator_client, diagnosed, query, jobs):
    page = operator_client.get(f"/failures/?{query}")
    shown = {f.job.scheduler_id for f in page.context["failures"] if f.job}
    assert shown == jobs
    rows = _rows(operator_client.get(f"/api/v1/failures.csv?{query}"))
    assert {r["job"] for r in rows if r["job"]} == jobs


def test_bad_filter_says_which(operator_client, diagnosed):
    response = operator_client.get("/failures/?cause=cosmic_rays")
    assert response.status_code == 400
    assert "cause: unknown value" in response.content.decode()


def test_csv_has_the_diagnosis(operator_client, diagnosed):
    rows = _rows(operator_client.get("/api/v1/failures.csv?kind=job_failure"))
    row = next(r for r in rows if r["job"] == "200")
    assert row["cause"] == "gpu_off_bus"
    assert row["blamed_node"] == "gpu-node-02"
    assert row["action"] == "reboot"
    assert float(row["gpu_hours_lost"]) == pytest.approx(96.0)


def test_failure_page_shows_diagnosis_evidence_in_context_and_xid_history(
    operator_client, diagnosed
):
    response = operator_client.get(f"/failures/{diagnosed.pk}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "gpu_off_bus" in body and "reboot" in body
    assert f'href="/jobs/{diagnosed.job_id}/"' in body
    blocks = response.context["context"]
    hits = [text for b in blocks for _, text, hit in b.lines if hit]
    assert any("fallen off the bus" in t or ": 79," in t for t in hits)
    assert any("Watchdog caught collective" in t for t in hits)
    # The log window's line numbers are the file's (the window started at line 120).
    window = next(b for b in blocks if b.source.endswith("200.out"))
    assert {no for no, _, _ in window.lines} == {120, 121, 122}
    assert [e.xid for e, _ in response.context["xids"]] == [79]
    assert response.context["figures"]["xids"]["data"]
    # The recovery timeline (the recovery app's template tag): the diagnosis, then the plan.
    assert 'data-phase="diagnosed"' in body and 'id="recovery-decision"' in body


def test_failure_csvs(operator_client, diagnosed):
    evidence = _rows(operator_client.get(f"/api/v1/failures/{diagnosed.pk}/evidence.csv"))
    assert evidence[0]["rule_id"] == "kernel-xid"
    xids = _rows(operator_client.get(f"/api/v1/failures/{diagnosed.pk}/gpu-errors.csv"))
    assert [(r["node"], r["xid"], r["meaning"]) for r in xids] == [
        ("gpu-node-02", "79", "GPU has fallen off the bus")
    ]


def test_missing_failure_is_404(operator_client, db):
    assert operator_client.get("/failures/999999/").status_code == 404


def test_job_link_from_the_jobs_app(operator_client, diagnosed):
    response = operator_client.get(f"/failures/job/{diagnosed.job_id}/")
    assert response.status_code == 302
    assert response["Location"] == f"/failures/{diagnosed.pk}/"


def test_timeline_and_failure_page_query_counts_stay_flat(
    operator_client, diagnosed, django_assert_max_num_queries
):
    # Each response is checked: a redirect to the login page would count few queries too.
    with django_assert_max_num_queries(8):
        timeline = operator_client.get("/failures/")
    with django_assert_max_num_queries(8):
        page = operator_client.get(f"/failures/{diagnosed.pk}/")
    assert timeline.status_code == 200
    assert '<td class="num">96.00</td>' in timeline.content.decode()  # job 200's GPU-hours lost
    assert page.status_code == 200
    assert 'id="gpu-hours-lost">96.00 ' in page.content.decode()


# --- Who reads the log lines: owner, teammate, operator; not the outsider --------------------

LOG_LINE = "Watchdog caught collective"
HIDDEN_NOTE = "Log lines are visible to the job&#x27;s team and operators."


@pytest.mark.parametrize("persona", ["owner_client", "teammate_client", "operator_client"])
def test_owner_teammate_and_operator_read_the_log_lines(request, persona, diagnosed):
    c = request.getfixturevalue(persona)
    body = c.get(f"/failures/{diagnosed.pk}/").content.decode()
    assert LOG_LINE in body and HIDDEN_NOTE not in body
    assert f"/api/v1/failures/{diagnosed.pk}/evidence.csv" in body
    evidence = _rows(c.get(f"/api/v1/failures/{diagnosed.pk}/evidence.csv"))
    assert any(LOG_LINE in r["text"] for r in evidence)


def test_outsider_sees_the_diagnosis_but_not_the_log_lines(outsider_client, diagnosed):
    response = outsider_client.get(f"/failures/{diagnosed.pk}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "gpu_off_bus" in body and "reboot" in body and "gpu-node-02" in body
    assert HIDDEN_NOTE in body
    assert LOG_LINE not in body and "step 1200 loss" not in body
    assert response.context["context"] == []
    assert f"/api/v1/failures/{diagnosed.pk}/evidence.csv" not in body  # no link to a refusal
    assert [e.xid for e, _ in response.context["xids"]] == [79]  # fleet data stays


def test_outsider_is_refused_the_evidence_csv(outsider_client, diagnosed):
    response = outsider_client.get(f"/api/v1/failures/{diagnosed.pk}/evidence.csv")
    assert response.status_code == 403
    assert LOG_LINE not in response.content.decode()
    assert "team and operators" in response.content.decode()


def test_a_team_reads_its_own_jobs_only(owner_client, teammate_client, diagnosed):
    """Job 201 is bob's, in no team: alice and her teammate get the note and a 403."""
    other = FailureEvent.objects.get(job__scheduler_id="201")
    for c in (owner_client, teammate_client):
        body = c.get(f"/failures/{other.pk}/").content.decode()
        assert "NameError" not in body.split('id="evidence"')[1] and HIDDEN_NOTE in body
        assert c.get(f"/api/v1/failures/{other.pk}/evidence.csv").status_code == 403


def test_outsider_sees_the_timeline_and_its_csv(outsider_client, diagnosed):
    assert outsider_client.get("/failures/").status_code == 200
    rows = _rows(outsider_client.get("/api/v1/failures.csv?kind=job_failure"))
    assert {r["job"] for r in rows} == {"200", "201"}
    assert outsider_client.get(f"/api/v1/failures/{diagnosed.pk}/gpu-errors.csv").status_code == 200


def test_failure_page_query_count_stays_flat_for_a_teammate(
    teammate_client, diagnosed, django_assert_max_num_queries
):
    # The access check adds three (operators group, rules, membership) to the operator's page,
    # and one reads what the engine read (kept apart from the failure row).
    with django_assert_max_num_queries(9):
        page = teammate_client.get(f"/failures/{diagnosed.pk}/")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="gpu-hours-lost">96.00 ' in body
    assert LOG_LINE in body  # the teammate's page, not the outsider's


def test_a_job_failure_naming_no_node_sits_on_its_node_or_job_lane(operator_client, diagnosed):
    """Never "(node unknown)": job 201 ran on gpu-node-01 only, so its failure goes there; job
    200 ran on two nodes, so its failure (with its blame cleared) sits on its job's lane."""
    FailureEvent.objects.update(blamed_node=None, node=None, blamed_host="")
    fig = operator_client.get("/failures/").context["figures"]["timeline"]
    lanes = {y for t in fig["data"] for y in t["y"]}
    assert "(node unknown)" not in lanes
    by_job = {c[0]: y for t in fig["data"] for c, y in zip(t["customdata"], t["y"], strict=True)}
    job200 = FailureEvent.objects.get(job__scheduler_id="200")
    job201 = FailureEvent.objects.get(job__scheduler_id="201")
    hosts200 = set(job200.job.allocations.values_list("node__hostname", flat=True))
    assert len(hosts200) > 1 and by_job[f"/failures/{job200.pk}/"] == "job 200"
    assert by_job[f"/failures/{job201.pk}/"] == "gpu-node-01"


def test_replayed_failures_are_marked_and_left_out_of_time_to_detect(operator_client, diagnosed):
    """A failure detected two hours after it happened came from a replay: the timeline says so
    and the live time-to-detect does not count it."""
    from datetime import timedelta

    from webapp.failures.selectors import time_to_detect_live

    FailureEvent.objects.filter(pk=diagnosed.pk).update(
        detected_at=diagnosed.occurred_at + timedelta(hours=2)
    )
    others = FailureEvent.objects.exclude(pk=diagnosed.pk)
    for f in others:
        FailureEvent.objects.filter(pk=f.pk).update(
            detected_at=f.occurred_at + timedelta(seconds=30)
        )
    body = operator_client.get("/failures/").content.decode()
    assert body.count('<span class="tag replayed"') == 1
    assert "1 replayed or backfilled" in body
    detect = time_to_detect_live(list(FailureEvent.objects.all()))
    assert detect["detect_replayed"] == 1 and detect["detect_live"] == others.count()
    assert detect["detect_median_s"] == 30.0


def test_a_replayed_failure_is_marked_on_its_page_the_csv_and_reliability(
    operator_client, diagnosed
):
    """The same failure, detected 52 min 50 s after it happened, reads as late everywhere:
    its own page, the failures CSV (a column) and the reliability page, which leaves it out of
    time to detect and says how many it left out."""
    from datetime import timedelta

    FailureEvent.objects.filter(pk=diagnosed.pk).update(
        detected_at=diagnosed.occurred_at + timedelta(minutes=52, seconds=50)
    )
    for f in FailureEvent.objects.exclude(pk=diagnosed.pk):
        FailureEvent.objects.filter(pk=f.pk).update(
            detected_at=f.occurred_at + timedelta(seconds=30)
        )
    page = operator_client.get(f"/failures/{diagnosed.pk}/").content.decode()
    assert 'id="reported-late"' in page and "52 min 50 s after it happened" in page
    others = FailureEvent.objects.exclude(pk=diagnosed.pk).first()
    assert (
        'id="reported-late"' not in operator_client.get(f"/failures/{others.pk}/").content.decode()
    )

    rows = {int(r["id"]): r for r in _rows(operator_client.get("/api/v1/failures.csv"))}
    assert rows[diagnosed.pk]["replayed"] == "True"
    assert float(rows[diagnosed.pk]["reported_late_s"]) == pytest.approx(3170.0)
    assert {r["replayed"] for pk, r in rows.items() if pk != diagnosed.pk} == {"False"}
    assert {r["reported_late_s"] for pk, r in rows.items() if pk != diagnosed.pk} == {""}

    reliability = operator_client.get("/failures/reliability/?days=30")
    assert reliability.context["r"].times["detect_median_s"] == 30.0
    assert 'id="detect-replayed"' in reliability.content.decode()


# --- What the engine read is stored apart and never loaded by a list --------------------------


@pytest.fixture
def big_failure(fleet, diagnosed) -> FailureEvent:
    """A failed job whose log windows add up to several MB, diagnosed (the engine keeps what it
    read for the failure page's "in context" view)."""
    end = float(int(time.time())) - 300
    fleet.run_job("300", end - 3600, None, nodes=("gpu-node-01",), user="bob")
    filler = "x" * 3000
    windows = [
        {
            "job_id": "300",
            "ts": end - 60 + i,
            "path": "/logs/300.out",
            "first_line_no": 1 + 400 * i,
            "lines": [f"step {400 * i + n} loss 2.31 {filler}" for n in range(400)],
        }
        for i in range(3)
    ]
    windows[-1]["lines"][-3:] = [
        "Traceback (most recent call last):",
        '  File "/home/bob/train.py", line 3, in <module>',
        "NameError: name 'foo' is not defined",
    ]
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=windows))
    fleet.run_job("300", end - 3600, end, nodes=("gpu-node-01",), user="bob")
    failure = FailureEvent.objects.get(job__scheduler_id="300")
    failure_diagnose(failure.pk)
    return failure


def _sql_reading_inputs(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"][:200] for q in ctx.captured_queries if "inputs" in q["sql"]]


def test_timeline_and_csv_never_load_what_the_engine_read(operator_client, big_failure):
    with CaptureQueriesContext(connection) as ctx:
        page = operator_client.get("/failures/")
    assert page.status_code == 200
    assert big_failure in page.context["failures"]
    assert _sql_reading_inputs(ctx) == []
    with CaptureQueriesContext(connection) as ctx:
        rows = _rows(operator_client.get("/api/v1/failures.csv"))
    assert "300" in {r["job"] for r in rows}
    assert _sql_reading_inputs(ctx) == []
    # The failure page still shows the evidence in its context, read from the stored inputs.
    detail = operator_client.get(f"/failures/{big_failure.pk}/")
    hits = [text for b in detail.context["context"] for _, text, hit in b.lines if hit]
    assert any("NameError: name 'foo' is not defined" in t for t in hits)


def test_failures_csv_streams_every_row(operator_client, diagnosed):
    response = operator_client.get("/api/v1/failures.csv")
    assert response.status_code == 200
    assert response.streaming  # written as it is read, never whole in memory
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="failures.csv"' in response["Content-Disposition"]
    rows = _rows(response)
    assert sorted(int(r["id"]) for r in rows) == sorted(
        FailureEvent.objects.values_list("id", flat=True)
    )
    assert {r["job"]: r["cause"] for r in rows}["200"] == "gpu_off_bus"


def test_what_the_engine_read_is_pruned_after_its_retention(operator_client, diagnosed, settings):
    from webapp.celery import app
    from webapp.failures.models import FailureInputs
    from webapp.failures.tasks import prune_inputs

    settings.VIGIL_FAILURE_INPUTS_RETENTION_DAYS = 30
    other = FailureEvent.objects.get(job__scheduler_id="201")
    FailureInputs.objects.filter(failure=diagnosed).update(
        stored_at=timezone.now() - timedelta(days=31)
    )
    assert prune_inputs() == {"pruned": 1}
    page = operator_client.get(f"/failures/{diagnosed.pk}/")
    assert page.status_code == 200 and page.context["context"] == []
    # The failure, its diagnosis and its evidence lines stay; only the lines around them go.
    assert "gpu_off_bus" in page.content.decode()
    assert LOG_LINE in page.content.decode()
    kept = operator_client.get(f"/failures/{other.pk}/").context["context"]
    assert any("NameError" in text for b in kept for _, text, _ in b.lines)
    assert prune_inputs() == {"pruned": 0}
    assert "vigil.failures.prune_inputs" in {e["task"] for e in app.conf.beat_schedule.values()}


def test_what_every_user_reads_of_a_failure_never_quotes_its_log(
    fleet, outsider_client, owner_client, operator_client
):
    """A failure's detail is the rule's label (here the exception class), never the line it
    matched: a path or token a job prints stays in the evidence, behind the team rule, and
    reaches no page, list or CSV that every logged-in user reads."""
    secret = "/home/bob/.aws/token-AKIAIOSFODNN7EXAMPLE"
    end = float(int(time.time())) - 300
    fleet.run_job("202", end - 600, None, nodes=("gpu-node-01",), job_type="debug", user="bob")
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01",
            log_windows=[
                {
                    "job_id": "202",
                    "ts": end - 2,
                    "path": "/logs/202.err",
                    "first_line_no": 1,
                    "lines": [
                        "Traceback (most recent call last):",
                        '  File "/home/bob/train.py", line 9, in <module>',
                        f"OSError: [Errno 28] No space left on device: '{secret}'",
                    ],
                }
            ],
        )
    )
    fleet.run_job("202", end - 600, end, nodes=("gpu-node-01",), job_type="debug", user="bob")
    failure = FailureEvent.objects.get(job__scheduler_id="202")
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    assert failure.detail and "AKIA" not in failure.detail and ".aws" not in failure.detail
    for client in (outsider_client, owner_client, operator_client):
        for url in ("/failures/", "/api/v1/failures.csv", f"/failures/{failure.pk}/"):
            response = client.get(url)
            body = (
                b"".join(response.streaming_content) if response.streaming else response.content
            ).decode()
            if client is operator_client and url == f"/failures/{failure.pk}/":
                assert "AKIAIOSFODNN7EXAMPLE" in body  # operators read the evidence
            else:
                assert "AKIAIOSFODNN7EXAMPLE" not in body, url
