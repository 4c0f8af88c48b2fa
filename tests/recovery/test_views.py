"""Recovery pages: everyone logged in reads, only operators act (403 for the others, the login
for a visitor); the cluster page's numbers, the failure page's timeline, the approvals queue,
the nodes out of service, one action's audit, and their CSV exports.

The data is made through the real services: an Xid 79 on the node of a running job, diagnosed
in a cluster whose policy is auto with the simulated executor (no scheduler is contacted),
the actions run in-process with action_execute, and a later `started` event of the job."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.failures.conftest import xid_event
from tests.recovery.conftest import policy
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet.models import Cluster, Node
from webapp.recovery import services
from webapp.recovery.execution import action_execute
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy

pytestmark = pytest.mark.django_db


def _rows(response) -> list[dict]:
    assert response.status_code == 200
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def _now() -> float:
    return float(int(time.time()))


def _xid_79(fleet, job_id: str, at: float, node_no: int = 2) -> FailureEvent:
    """Job `job_id` runs on gpu-node-0N when its GPU 3 falls off the bus; diagnosed."""
    node = f"gpu-node-0{node_no}"
    fleet.run_job(job_id, at - 3600, None, nodes=(node,))
    node_events_ingest(
        fleet.node_batch(node, gpu_events=[xid_event(at, 79, index=3, node_no=node_no)])
    )
    failure = FailureEvent.objects.filter(kind="gpu_error").order_by("-occurred_at").first()
    failure_diagnose(failure.pk)
    failure.refresh_from_db()
    return failure


def _run_all(failure: FailureEvent) -> list[RecoveryAction]:
    for action in failure.recovery_plan.actions.order_by("seq", "id"):
        action_execute(action.pk, "test")
    return list(failure.recovery_plan.actions.order_by("seq", "id"))


@pytest.fixture
def recovered(fleet) -> FailureEvent:
    """Recovered with no human step: drained, requeued (simulated) and running again."""
    policy("auto")
    failure = _xid_79(fleet, "300", _now() - 120)
    actions = _run_all(failure)
    assert [(a.kind, a.status) for a in actions] == [
        ("drain", "succeeded"),
        ("requeue", "succeeded"),
        ("reboot", "succeeded"),  # Xid 79: RESTART_BM, through the scheduler
    ]
    # The requeued job starts on the other node (a second after the requeue ended: within
    # the clock skew a batch may carry, VIGIL_MAX_FUTURE_SKEW_S).
    fleet.run_job("300", time.time() + 1, None, nodes=("gpu-node-01",))
    return failure


@pytest.fixture
def awaiting(fleet) -> RecoveryAction:
    """An approve-mode cluster's drain waiting for an operator."""
    policy("approve")
    failure = _xid_79(fleet, "400", _now() - 60)
    return failure.recovery_plan.actions.order_by("seq").first()


# --- Who may do what -------------------------------------------------------------------------

PAGES = ("/recovery/", "/recovery/approvals/", "/recovery/nodes/")


@pytest.mark.parametrize("persona", ["operator_client", "owner_client", "outsider_client"])
def test_everyone_logged_in_reads_the_pages(request, persona, recovered):
    c = request.getfixturevalue(persona)
    for url in PAGES:
        assert c.get(url).status_code == 200, url
    action = recovered.recovery_plan.actions.first()
    assert c.get(f"/recovery/actions/{action.pk}/").status_code == 200
    assert c.get(f"/failures/{recovered.pk}/").status_code == 200


def test_a_visitor_is_sent_to_the_login(client, awaiting):
    for url in (*PAGES, f"/recovery/actions/{awaiting.pk}/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    response = client.post(f"/recovery/actions/{awaiting.pk}/approve/")
    assert response["Location"].startswith("/login/")
    awaiting.refresh_from_db()
    assert awaiting.status == "awaiting_approval"


@pytest.mark.parametrize("persona", ["owner_client", "outsider_client"])
def test_only_operators_act(request, persona, awaiting):
    c = request.getfixturevalue(persona)
    node = Node.objects.get(hostname="gpu-node-02")
    cluster = awaiting.cluster.name
    assert c.post(f"/recovery/actions/{awaiting.pk}/approve/").status_code == 403
    assert c.post(f"/recovery/actions/{awaiting.pk}/reject/").status_code == 403
    assert c.post(f"/recovery/nodes/{node.pk}/return/").status_code == 403
    assert c.post("/recovery/policy/", {"cluster": cluster, "mode": "auto"}).status_code == 403
    awaiting.refresh_from_db()
    assert awaiting.status == "awaiting_approval" and awaiting.approved_by == ""
    assert RecoveryPolicy.objects.get().mode == "approve"
    assert not RecoveryPlan.objects.filter(kind="return_to_service").exists()
    # They see the queue, read only: the commands, no buttons.
    body = c.get("/recovery/approvals/").content.decode()
    assert "scontrol update NodeName=gpu-node-02 State=DRAIN" in body
    assert "Approve and run" not in body


# --- Approvals -------------------------------------------------------------------------------


def test_operator_approves_an_action_and_it_is_ready_to_run_once(operator_client, awaiting):
    body = operator_client.get("/recovery/approvals/").content.decode()
    assert f'id="approval-{awaiting.pk}"' in body
    assert "Approve and run" in body and "gpu_off_bus" in body
    assert "simulated" in body  # the simulated executor is labelled
    response = operator_client.post(f"/recovery/actions/{awaiting.pk}/approve/", follow=True)
    assert response.status_code == 200
    assert f"Action {awaiting.pk} (drain node) approved" in response.content.decode()
    awaiting.refresh_from_db()
    assert (awaiting.status, awaiting.approved_by) == ("ready", "operator")
    assert action_execute(awaiting.pk, "test").status == "succeeded"
    # Job 400 still runs there (its requeue comes next): draining, as Slurm says it.
    assert Node.objects.get(hostname="gpu-node-02").state == "draining"


def test_approving_an_action_that_already_ran_shows_why_and_changes_nothing(
    operator_client, awaiting
):
    services.action_approve(awaiting.pk, "olivia")
    action_execute(awaiting.pk, "test")
    awaiting.refresh_from_db()
    before = (awaiting.status, awaiting.approved_by, awaiting.approved_at, awaiting.ended_at)
    response = operator_client.post(f"/recovery/actions/{awaiting.pk}/approve/")
    assert response.status_code == 400
    body = response.content.decode()
    assert f"action {awaiting.pk} is succeeded: only an action awaiting approval" in body
    awaiting.refresh_from_db()
    assert (
        awaiting.status,
        awaiting.approved_by,
        awaiting.approved_at,
        awaiting.ended_at,
    ) == before
    assert awaiting.attempts == 1  # it ran once, and only once
    response = operator_client.post(
        f"/recovery/actions/{awaiting.pk}/approve/", HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 400 and "only an action awaiting" in response.json()["error"]


def test_operator_rejects_with_a_reason_and_the_requeue_after_it_is_cancelled(
    operator_client, awaiting
):
    requeue = awaiting.plan.actions.get(kind="requeue")
    response = operator_client.post(
        f"/recovery/actions/{awaiting.pk}/reject/", {"why": "node in maintenance"}, follow=True
    )
    assert "rejected" in response.content.decode()
    awaiting.refresh_from_db()
    requeue.refresh_from_db()
    assert awaiting.status == "rejected" and "node in maintenance" in awaiting.result
    assert requeue.status == "cancelled"
    assert "Nothing awaits approval." in response.content.decode()


def test_approvals_csv_has_the_waiting_actions(outsider_client, awaiting):
    rows = _rows(outsider_client.get("/api/v1/recovery/approvals.csv"))
    assert [(r["action"], r["kind"], r["host"]) for r in rows][0] == (
        str(awaiting.pk),
        "drain",
        "gpu-node-02",
    )
    assert {r["status"] for r in rows} == {"awaiting_approval"}
    assert "scontrol update NodeName=gpu-node-02 State=DRAIN" in rows[0]["commands"]


# --- The failure page's timeline -------------------------------------------------------------


def test_failure_page_shows_the_recovery_timeline_with_durations(owner_client, recovered):
    response = owner_client.get(f"/failures/{recovered.pk}/")
    body = response.content.decode()
    for phase in ("occurred", "detected", "diagnosed", "action", "running_again"):
        assert f'data-phase="{phase}"' in body, phase
    assert "Drain node gpu-node-02 (simulated)" in body
    assert "Requeue job 300 (simulated)" in body
    assert 'id="recovery-total"' in body  # failure to job running again
    rows = _rows(owner_client.get(f"/api/v1/recovery/failures/{recovered.pk}/timeline.csv"))
    assert [r["phase"] for r in rows] == [
        "occurred",
        "detected",
        "diagnosed",
        "action",
        "action",
        "action",  # the reboot Xid 79 asks for (RESTART_BM)
        "running_again",
    ]
    assert rows[-1]["at"] and float(rows[-1]["after_s"]) >= 0
    assert {r["executor"] for r in rows if r["phase"] == "action"} == {"simulated"}


def test_failure_page_without_a_plan_says_so(operator_client, fleet):
    # A dry-run cluster still plans; a failure not diagnosed yet has no plan.
    fleet.run_job("500", _now() - 3600, None, nodes=("gpu-node-02",))
    node_events_ingest(fleet.node_batch("gpu-node-02", gpu_events=[xid_event(_now(), 79)]))
    failure = FailureEvent.objects.get(kind="gpu_error")
    body = operator_client.get(f"/failures/{failure.pk}/").content.decode()
    assert "Recovery is planned once the failure is diagnosed." in body


# --- The cluster's recovery ------------------------------------------------------------------


def test_recovery_page_counts_an_automatic_recovery_as_an_intervention_avoided(
    outsider_client, recovered, fleet
):
    # A second failure, in approve mode and still waiting, needs a person: not avoided.
    policy("approve")
    _xid_79(fleet, "301", _now() - 20, node_no=1)
    response = outsider_client.get("/recovery/?cluster=testcluster&days=1")
    assert response.status_code == 200
    r = response.context["r"]
    assert (r.failures, r.auto_recovered) == (2, 1)
    assert (r.ran, r.succeeded, r.success_rate) == (3, 3, 1.0)  # drain, requeue, reboot
    # 3 + 4: with gpu-node-02 drained, draining gpu-node-01 too would take half the cluster
    # out: past the guard rail, operators are told (a notify).
    assert r.simulated == 7
    assert r.phases["running_again"]["n"] == 1 and r.phases["act"]["n"] == 1
    assert r.recover_median_s is not None and r.recover_median_s >= 0
    body = response.content.decode()
    assert 'id="avoided">1<' in body and "of 2 failures planned live (50%)" in body
    assert "no human step" in body  # how it is counted
    assert "Approve each action" in body and "nothing runs until an operator" in body
    assert "simulated" in body
    assert set(response.context["figures"]) == {"actions", "phases"}
    plans = response.context["plans"]
    assert plans.paginator.count == 2
    assert f'href="/failures/{recovered.pk}/"' in body


def test_a_replayed_failure_is_not_counted_as_a_chance_to_avoid_a_manual_intervention(
    outsider_client, recovered, fleet
):
    # An Xid that happened 40 minutes before Vigil heard of it (a collector's backlog replayed):
    # its plan only notifies, so it is no failure recovery could have handled without a person.
    at = _now() - 2400
    fleet.run_job("302", at - 3600, None, nodes=("gpu-node-01",))
    node_events_ingest(
        fleet.node_batch("gpu-node-01", gpu_events=[xid_event(at, 79, index=3, node_no=1)])
    )
    replayed = FailureEvent.objects.get(kind="gpu_error", node__hostname="gpu-node-01")
    failure_diagnose(replayed.pk)
    assert {a.kind for a in replayed.recovery_plan.actions.all()} == {"notify"}
    response = outsider_client.get("/recovery/?cluster=testcluster&days=1")
    r = response.context["r"]
    assert (r.failures, r.late, r.live_failures, r.auto_recovered) == (2, 1, 1, 1)
    assert r.avoided_share == 1.0
    body = response.content.decode()
    assert 'id="avoided">1<' in body and "of 1 failure planned live (100%)" in body
    assert "1 replayed failure (reported over 10 min late) not counted" in body
    summary = {
        (row["group"], row["name"]): row
        for row in _rows(
            outsider_client.get("/api/v1/recovery/summary.csv?cluster=testcluster&days=1")
        )
    }
    assert summary[("failures", "planned")]["count"] == "2"
    assert summary[("failures", "planned_live")]["count"] == "1"
    assert summary[("failures", "replayed")]["count"] == "1"
    assert summary[("failures", "recovered_without_a_human")]["median_s_or_share"] == "1.0"


def test_operator_sets_the_mode_and_a_bad_mode_is_refused(operator_client, recovered):
    response = operator_client.post(
        "/recovery/policy/", {"cluster": "testcluster", "mode": "dry_run"}, follow=True
    )
    assert "testcluster now recovers in mode Dry run" in response.content.decode()
    policy_row = RecoveryPolicy.objects.get()
    assert (policy_row.mode, policy_row.updated_by) == ("dry_run", "operator")
    assert policy_row.executor == "simulated"  # the mode form leaves the executor alone
    response = operator_client.post("/recovery/policy/", {"cluster": "testcluster", "mode": "yolo"})
    assert response.status_code == 400
    assert "mode: &#x27;yolo&#x27; is not a mode" in response.content.decode()
    assert RecoveryPolicy.objects.get().mode == "dry_run"


def test_recovery_csv_exports_have_the_rows(outsider_client, recovered):
    q = "?cluster=testcluster&days=1"
    plans = _rows(outsider_client.get("/api/v1/recovery/plans.csv" + q))
    assert [(p["failure"], p["action"], p["mode"], p["executor"]) for p in plans] == [
        (str(recovered.pk), "reboot", "auto", "simulated")  # Xid 79: RESTART_BM
    ]
    assert (plans[0]["actions"], plans[0]["succeeded"]) == ("3", "3")
    actions = _rows(outsider_client.get("/api/v1/recovery/actions.csv" + q))
    assert [(a["kind"], a["status"], a["executor"]) for a in actions] == [
        ("reboot", "succeeded", "simulated"),
        ("requeue", "succeeded", "simulated"),
        ("drain", "succeeded", "simulated"),
    ]
    only = _rows(outsider_client.get("/api/v1/recovery/actions.csv" + q + "&kind=drain"))
    assert [a["kind"] for a in only] == ["drain"]
    summary = {
        (r["group"], r["name"]): r
        for r in _rows(outsider_client.get("/api/v1/recovery/summary.csv" + q))
    }
    assert summary[("failures", "recovered_without_a_human")]["count"] == "1"
    assert summary[("time_to_recover", "running_again")]["count"] == "1"
    over = _rows(outsider_client.get("/api/v1/recovery/actions-over-time.csv" + q))
    assert sum(int(r["actions"]) for r in over) == 3


def test_recovery_page_with_a_bad_window_says_which_field(operator_client, recovered):
    response = operator_client.get("/recovery/?cluster=nowhere&days=x")
    assert response.status_code == 400
    assert "unknown cluster" in response.content.decode()


# --- Nodes out of service --------------------------------------------------------------------


def test_nodes_page_shows_the_drained_node_and_the_failure_behind_it(owner_client, recovered):
    body = owner_client.get("/recovery/nodes/").content.decode()
    assert 'data-node="gpu-node-02"' in body and 'data-node="gpu-node-01"' not in body
    assert f'href="/failures/{recovered.pk}/"' in body
    assert 'button type="submit" class="return"' not in body  # the owner reads only
    rows = _rows(owner_client.get("/api/v1/recovery/nodes.csv"))
    assert [(r["node"], r["state"], r["failures"]) for r in rows] == [
        ("gpu-node-02", "drained", str(recovered.pk))
    ]


def test_operator_returns_a_node_to_service(operator_client, recovered, settings):
    settings.VIGIL_HEALTHCHECK_SCRIPT = "/opt/vigil/healthcheck.sh"
    node = Node.objects.get(hostname="gpu-node-02")
    assert 'class="return"' in operator_client.get("/recovery/nodes/").content.decode()
    response = operator_client.post(f"/recovery/nodes/{node.pk}/return/", follow=True)
    assert "gpu-node-02: node health check then return node to service planned" in (
        response.content.decode()
    )
    plan = RecoveryPlan.objects.get(kind="return_to_service")
    assert plan.requested_by == "operator" and plan.node == node
    for action in plan.actions.order_by("seq"):
        action_execute(action.pk, "test")
    node.refresh_from_db()
    # Back in service; "registered" as the fleet calls a node it has not heard from yet.
    assert node.state in ("up", "registered") and node.state_reason == ""
    assert 'data-node="gpu-node-02"' not in operator_client.get("/recovery/nodes/").content.decode()


def test_returning_an_unknown_node_is_404_and_changes_nothing(operator_client, recovered):
    assert operator_client.post("/recovery/nodes/999999/return/").status_code == 404
    assert not RecoveryPlan.objects.filter(kind="return_to_service").exists()


def test_a_get_does_not_act(operator_client, awaiting):
    assert operator_client.get(f"/recovery/actions/{awaiting.pk}/approve/").status_code == 405
    awaiting.refresh_from_db()
    assert awaiting.status == "awaiting_approval"


# --- One action's audit ----------------------------------------------------------------------


def test_action_page_shows_who_decided_and_every_command_with_its_output(
    outsider_client, recovered
):
    drain = recovered.recovery_plan.actions.get(kind="drain")
    body = outsider_client.get(f"/recovery/actions/{drain.pk}/").content.decode()
    assert "Succeeded" in body and 'id="simulated"' in body
    assert f'<code id="rule">{drain.rule}</code>' in body
    assert "nobody needed to (automatic)" in body
    assert "$ scontrol update NodeName=gpu-node-02 State=DRAIN" in body
    # The drain reason is one argument, quoted as a shell would need it.
    assert f"State=DRAIN &#x27;Reason=vigil: gpu_off_bus failure {recovered.pk}&#x27;" in body
    assert "simulated: no scheduler was contacted" in body  # the command's output
    assert "node gpu-node-02 drained" in body  # the result
    steps = _rows(outsider_client.get(f"/api/v1/recovery/actions/{drain.pk}/steps.csv"))
    assert steps and all(s["exit"] == "0" for s in steps)
    assert steps[0]["argv"].startswith("scontrol update NodeName=gpu-node-02")
    assert outsider_client.get("/recovery/actions/999999/").status_code == 404


# --- Size --------------------------------------------------------------------------------------


def test_main_pages_query_counts_stay_flat(
    operator_client, recovered, awaiting, django_assert_max_num_queries
):
    drain = recovered.recovery_plan.actions.get(kind="drain")
    for url, most in (
        ("/recovery/", 14),
        ("/recovery/approvals/", 10),
        ("/recovery/nodes/", 10),
        (f"/recovery/actions/{drain.pk}/", 8),
        (f"/failures/{recovered.pk}/", 11),
    ):
        with django_assert_max_num_queries(most):
            assert operator_client.get(url).status_code == 200


# --- The reliability page's time to recover ----------------------------------------------------


def test_reliability_page_gains_time_to_recover_by_category(outsider_client, recovered):
    response = outsider_client.get("/failures/reliability/?cluster=testcluster&days=1")
    rows = {x.category: x for x in response.context["r"].recovery}
    assert (rows["infrastructure"].failures, rows["infrastructure"].running_again) == (1, 1)
    assert rows["all"].median_s == rows["infrastructure"].median_s >= 120
    body = response.content.decode()
    assert 'id="time-to-recover"' in body and 'data-category="infrastructure"' in body
    csv_rows = _rows(
        outsider_client.get("/api/v1/failures/reliability/recovery.csv?cluster=testcluster&days=1")
    )
    assert [(r["category"], r["jobs_running_again"]) for r in csv_rows] == [
        ("infrastructure", "1"),
        ("all", "1"),
    ]
    assert float(csv_rows[0]["time_to_recover_median_s"]) >= 120


def test_switching_to_dry_run_in_the_admin_cancels_what_has_not_started(admin_client, awaiting):
    row = RecoveryPolicy.objects.get(cluster_id=awaiting.cluster_id)
    response = admin_client.post(
        f"/admin/recovery/recoverypolicy/{row.pk}/change/",
        {"cluster": row.cluster_id, "mode": "dry_run", "executor": row.executor,
         "max_auto_restarts": "", "updated_by": "", "max_drains_per_hour": "3",
         "max_out_percent": "10"},
    )  # fmt: skip
    assert response.status_code == 302, response.content[:2000]
    awaiting.refresh_from_db()
    assert awaiting.status == "cancelled"
    assert awaiting.result == "cancelled: the cluster was switched to dry_run by admin"
    with pytest.raises(services.RecoveryError, match="only an action awaiting approval"):
        services.action_approve(awaiting.pk, "olivia")


# --- Replayed or late failures ---------------------------------------------------------------


def test_a_replayed_failure_is_left_out_of_time_to_detect_and_marked_late(
    outsider_client, recovered, fleet
):
    """A failure that reached Vigil 42 min after it happened (a spool replayed): the recovery
    page's detect phase counts only the live one, and the failure page's timeline says the
    detection was late instead of showing it as a 42-minute detection."""
    from datetime import timedelta

    from webapp.jobs.models import JobEvent

    policy("approve")
    late = _xid_79(fleet, "301", _now() - 20, node_no=1)
    FailureEvent.objects.filter(pk=late.pk).update(
        occurred_at=late.detected_at - timedelta(minutes=42)
    )
    live_detect_s = (recovered.detected_at - recovered.occurred_at).total_seconds()
    r = outsider_client.get("/recovery/?cluster=testcluster&days=1").context["r"]
    assert r.failures == 2
    assert r.phases["detect"]["n"] == 1
    assert r.phases["detect"]["median_s"] == pytest.approx(live_detect_s, abs=0.01)
    assert r.phases["detect"]["p95_s"] == pytest.approx(live_detect_s, abs=0.01)
    assert r.phases["diagnose"]["n"] == 2  # diagnosis starts at detection: both count

    body = outsider_client.get(f"/failures/{late.pk}/").content.decode()
    assert "reported late" in body and "42 min after it happened" in body
    rows = _rows(outsider_client.get(f"/api/v1/recovery/failures/{late.pk}/timeline.csv"))
    assert {r["phase"]: r["status"] for r in rows}["detected"] == "late"
    live = _rows(outsider_client.get(f"/api/v1/recovery/failures/{recovered.pk}/timeline.csv"))
    assert {r["phase"]: r["status"] for r in live}["detected"] == ""

    # The reliability page's time to recover agrees: the late failure's job running again
    # (occurred -> running again holds the replay's delay) gets no time there either.
    fleet.run_job("301", time.time() + 1, None, nodes=("gpu-node-01",))
    reliability = outsider_client.get("/failures/reliability/?cluster=testcluster&days=1")
    rows = {x.category: x for x in reliability.context["r"].recovery}
    # Both jobs ran again (counted, as the recovery page counts them); only the live one's
    # time goes into the median.
    assert (rows["all"].failures, rows["all"].running_again) == (2, 2)
    assert rows["all"].median_s == pytest.approx(
        (
            JobEvent.objects.filter(job__scheduler_id="300", kind="started").latest("ts").ts
            - recovered.occurred_at
        ).total_seconds()
    )


def test_the_demos_simulated_scheduler_receives_the_commands_it_must_carry_out(
    fleet, tmp_path, monkeypatch, django_capture_on_commit_callbacks
):
    """The demo closes the loop: the simulated executor hands the drain and the requeue to
    the simulated scheduler's inbox once each action has committed, so the job runs again
    (the inbox's reader is tested in tests/collectors/test_simjobs.py)."""
    from collectors.backends.siminbox import INBOX_ENV

    monkeypatch.setenv(INBOX_ENV, str(tmp_path))
    policy("auto")
    failure = _xid_79(fleet, "310", _now() - 120)
    with django_capture_on_commit_callbacks(execute=True):
        actions = _run_all(failure)
    sent = [json.loads(p.read_text()) for p in sorted(tmp_path.rglob("*.json"))]
    lines = [c for message in sent for c in message.get("commands", [])]
    assert any(c[:2] == ["scontrol", "requeue"] and c[-1] == "310" for c in lines), sent
    assert len(sent) == len([a for a in actions if a.commands])


def test_drain_page_links_the_jobs_on_the_node_when_it_was_drained(
    outsider_client, fleet, recovered
):
    drain = recovered.recovery_plan.actions.get(kind="drain")
    requeue = recovered.recovery_plan.actions.get(kind="requeue")
    # A job that had ended on the node hours before its GPU failed was not affected.
    fleet.run_job("250", _now() - 7 * 3600, _now() - 6 * 3600, nodes=("gpu-node-02",))
    body = outsider_client.get(f"/recovery/actions/{drain.pk}/").content.decode()
    section = body.split('id="jobs-affected"', 1)
    assert len(section) == 2, "no list of the drained node's jobs"
    jobs_html = section[1].split("</section>", 1)[0]
    assert f'href="/jobs/{requeue.job.pk}/"' in jobs_html and ">300<" in jobs_html
    # What the plan did to it, linked to that step.
    assert f'href="/recovery/actions/{requeue.pk}/"' in jobs_html and "Requeued" in jobs_html
    assert ">250<" not in jobs_html


def test_nodes_out_by_reason_reads_at_a_glance_at_a_real_sites_size(outsider_client):
    """People's drain reasons differ by their ticket, case and slot numbers: one group each
    whatever the numbers, and past a dozen groups the rest fold into one row."""
    cluster = Cluster.objects.create(name="big")
    since = timezone.now() - timedelta(hours=5)
    reasons = [f"RMA ticket DC-{4000 + n}: replace GPU {n % 8}" for n in range(30)]
    reasons += [f"bench {chr(65 + n)} burn-in" for n in range(14)]  # 14 texts, no number
    Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"big-{n:03d}", state="drained", state_reason=r,
             state_since=since, token_hash=f"t{n}")
        for n, r in enumerate(reasons)
    )  # fmt: skip
    html = outsider_client.get("/recovery/nodes/").content.decode()
    table = html.split('id="out-by-reason"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr data-reason=\"([^\"]*)\"[^>]*>(.*?)</tr>", table, re.S)
    assert rows[0][0] == "by a person: RMA ticket DC-…: replace GPU …"
    assert re.search(r'<td class="num">30</td>', rows[0][1])
    assert len(rows) == 13  # the twelve largest groups, then the rest in one row
    assert rows[-1][0] == "(3 other reasons)" and '<td class="num">3</td>' in rows[-1][1]
