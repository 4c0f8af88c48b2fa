"""Alerts that say the right thing: a hardware alert resolves only once its node is back in
service, an idle-GPU alert does not flap with its job's utilization, and a large job's idle
GPUs raise more than an info alert, sooner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from tests.alerts.conftest import later
from tests.alerts.helpers import _now, idle_allocate, idle_job_on, idle_samples
from tests.failures.conftest import xid_event
from webapp.alerts import evaluate
from webapp.alerts.choices import AlertState
from webapp.alerts.models import Alert
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet import services as fleet_services
from webapp.fleet.models import Node
from webapp.jobs.models import Job
from webapp.recovery.models import RecoveryAction

pytestmark = pytest.mark.django_db
EVENT_S = 900  # the gpu-hardware rule's resolve_after_s


def _xid_alert(fleet) -> tuple[Alert, Node]:
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(_now() - 5, 79, index=3)])
    )
    failure = FailureEvent.objects.get(kind="gpu_error")
    failure_diagnose(failure.pk)
    [alert] = evaluate.failure_alerts(failure.pk)
    return alert, Node.objects.get(hostname="gpu-node-02")


def test_a_hardware_alert_stays_while_its_node_is_drained_and_resolves_when_it_is_back(fleet):
    alert, node = _xid_alert(fleet)
    assert alert.state == AlertState.FIRING
    # The scheduler drained the node (Vigil's drain or an operator's): nothing is repaired.
    Node.objects.filter(pk=node.pk).update(state="drained", state_since=timezone.now())
    RecoveryAction.objects.filter(node=node).update(status="succeeded", ended_at=timezone.now())
    evaluate.alerts_evaluate(later(EVENT_S + 60))
    assert Alert.objects.get(pk=alert.pk).state == AlertState.FIRING
    # An operator returned it to service; the scheduler reports it up.
    Node.objects.filter(pk=node.pk).update(state="up", state_since=later(EVENT_S + 90))
    evaluate.alerts_evaluate(later(EVENT_S + 120))
    assert Alert.objects.get(pk=alert.pk).state == AlertState.RESOLVED


def test_a_hardware_alert_stays_while_vigils_drain_is_not_reported_yet(fleet):
    alert, node = _xid_alert(fleet)
    # Vigil drained it a moment ago; the scheduler has not reported the node since.
    Node.objects.filter(pk=node.pk).update(state="up", state_since=later(-3600))
    RecoveryAction.objects.filter(node=node).delete()
    RecoveryAction.objects.create(
        plan=alert.failure.recovery_plan,
        cluster=node.cluster,
        kind="drain",
        status="succeeded",
        mode="auto",
        executor="simulated",
        node=node,
        host=node.hostname,
        ended_at=later(10),
    )
    evaluate.alerts_evaluate(later(EVENT_S + 60))
    assert Alert.objects.get(pk=alert.pk).state == AlertState.FIRING


def test_a_hardware_alert_on_a_node_never_drained_resolves_after_its_window(fleet):
    alert, node = _xid_alert(fleet)
    Node.objects.filter(pk=node.pk).update(state="up")
    RecoveryAction.objects.filter(node=node).update(status="failed")
    evaluate.alerts_evaluate(later(EVENT_S + 60))
    assert Alert.objects.get(pk=alert.pk).state == AlertState.RESOLVED


# --- Idle GPUs -----------------------------------------------------------------------------


def test_an_idle_alert_does_not_flap_with_utilization_about_the_threshold(fleet):
    job, token = idle_job_on("idle-01", 1, "501")
    idle_samples("idle-01", token, 1, 0.0, 40)
    idle_allocate(job, "idle-01", 1)
    now = datetime.now(UTC)
    evaluate.alerts_evaluate(now)
    [first] = Alert.objects.filter(rule__name="gpus-idle")
    assert first.state == AlertState.PENDING
    idle_samples("idle-01", token, 1, 30.0, 30)  # a busy sample between idle ones
    evaluate.alerts_evaluate(now + timedelta(seconds=15))
    idle_samples("idle-01", token, 1, 0.0, 20)
    evaluate.alerts_evaluate(now + timedelta(seconds=30))
    # One alert, still pending: not resolved and raised again.
    [alert] = Alert.objects.filter(rule__name="gpus-idle")
    assert alert.pk == first.pk and alert.state == AlertState.PENDING
    # Busy for longer than the clear time: resolved.
    idle_samples("idle-01", token, 1, 60.0, 10)
    evaluate.alerts_evaluate(now + timedelta(seconds=30 + evaluate.IDLE_CLEAR_S + 1))
    assert Alert.objects.get(pk=first.pk).state == AlertState.RESOLVED


def test_a_large_job_idle_for_six_minutes_pages_while_one_idle_gpu_waits(fleet):
    hosts = [f"idle-big-{n:02d}" for n in range(14)]  # 14 nodes x 8 GPUs = 112
    big, token = idle_job_on(hosts[0], 112, "600")
    tokens = {h: fleet_services.node_token_issue("idlecluster", h) for h in hosts[1:]}
    tokens[hosts[0]] = token
    for h in hosts:
        idle_samples(h, tokens[h], 8, 0.0, 20)
        idle_allocate(big, h, 8)
    small, small_token = idle_job_on("idle-small", 1, "601")
    idle_samples("idle-small", small_token, 1, 0.0, 20)
    idle_allocate(small, "idle-small", 1)
    now = datetime.now(UTC)
    evaluate.alerts_evaluate(now)
    evaluate.alerts_evaluate(now + timedelta(minutes=6))
    big_alert = Alert.objects.get(rule__name="gpus-idle", job=big)
    small_alert = Alert.objects.get(rule__name="gpus-idle", job=small)
    assert (big_alert.state, big_alert.severity) == (AlertState.FIRING, "critical")
    assert "112 of its 112 allocated GPU(s) idle" in big_alert.summary
    assert (small_alert.state, small_alert.severity) == (AlertState.PENDING, "info")


@pytest.mark.parametrize(
    "gpus, severity", [(1, "info"), (7, "info"), (8, "warning"), (63, "warning"), (64, "critical")]
)
def test_idle_severity_scales_with_the_gpus_idle(gpus, severity):
    assert evaluate.idle_severity({}, "info", gpus) == severity


def test_a_run_loading_its_checkpoint_is_not_idle_until_its_start_up_time_has_passed(fleet):
    # A 64-GPU job requeued by recovery starts again: its GPUs idle while it loads its
    # checkpoint. That is the run starting, not GPUs wasted: no page for every recovery.
    hosts = [f"idle-load-{n:02d}" for n in range(8)]
    job, token = idle_job_on(hosts[0], 64, "700")
    tokens = {h: fleet_services.node_token_issue("idlecluster", h) for h in hosts[1:]}
    tokens[hosts[0]] = token
    started = timezone.now() - timedelta(minutes=2)
    Job.objects.filter(pk=job.pk).update(start_at=started)
    job.refresh_from_db()
    for h in hosts:
        idle_samples(h, tokens[h], 8, 0.0, 20)
        idle_allocate(job, h, 8)
    now = datetime.now(UTC)
    evaluate.alerts_evaluate(now)
    assert not Alert.objects.filter(rule__name="gpus-idle", job=job).exists()
    # Still idle once its start-up time has passed: that is waste, and it pages.
    past_start_up = started + timedelta(seconds=evaluate.IDLE_STARTUP_S + 1)
    evaluate.alerts_evaluate(past_start_up)
    evaluate.alerts_evaluate(past_start_up + timedelta(minutes=4))
    alert = Alert.objects.get(rule__name="gpus-idle", job=job)
    assert (alert.state, alert.severity) == (AlertState.FIRING, "critical")


def test_the_alerts_list_dates_a_replayed_failures_alert_as_its_email_does(fleet, operator_client):
    # An Xid that happened 40 minutes before Vigil learned of it (a replay, an agent cut off):
    # the list says when it happened and that it was reported later, as the email's "Since".
    occurred = _now() - 40 * 60
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(occurred, 79, index=3)])
    )
    failure = FailureEvent.objects.get(kind="gpu_error")
    failure_diagnose(failure.pk)
    [alert] = evaluate.failure_alerts(failure.pk)
    body = operator_client.get("/alerts/").content.decode()
    row = body[body.index(f'data-alert="{alert.pk}"') :].split("</tr>")[0]
    when = datetime.fromtimestamp(occurred, UTC)
    assert when.strftime("%H:%M:%S") in row
    assert "reported 40 min later" in row
