"""A flood of one GPU's Xid lines through the real parts (the node-event worker, the diagnosis,
the recovery plan, the alerts worker, a real SMTP server): 1,000 lines of one burst are one
incident, one recovery plan acting once, and one email to the operators."""

from __future__ import annotations

import time

import pytest

from collectors.schema import NODE_EVENTS_TASK
from tests.alerts.conftest import default_rules, smtp, text_of, with_email  # noqa: F401
from tests.failures.conftest import make_fleet, xid_event
from tests.helpers import send_signed, wait_for
from webapp.failures.models import FailureEvent, GpuErrorEvent
from webapp.recovery.models import RecoveryAction, RecoveryPlan

pytestmark = pytest.mark.timeout(180)


def test_1000_xid_lines_of_one_burst_make_one_incident_one_action_and_one_email(
    transactional_db,
    smtp,  # noqa: F811 (the alerts' SMTP server fixture)
    operator,
    worker_factory,
):
    default_rules()
    fleet = make_fleet()
    mail = with_email(operator).email
    worker_factory(env={"EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}",
                        "VIGIL_ALERTS_SEND_TIMEOUT_S": "2"})  # fmt: skip
    t = float(int(time.time())) - 120  # detected as it happens: acted on
    lines = [xid_event(t + i * 0.1, 79, index=5, node_no=1) for i in range(1000)]
    for n in range(4):
        batch = fleet.node_batch("gpu-node-01", gpu_events=lines[n * 250 : (n + 1) * 250])
        send_signed(NODE_EVENTS_TASK, args=[batch])

    wait_for(lambda: GpuErrorEvent.objects.filter(xid=79, count=1000).exists(), timeout=60)
    [msg] = wait_for(lambda: smtp.to(mail), timeout=90)
    time.sleep(3)  # a second email, if any were coming, would have been sent by now
    assert len(smtp.to(mail)) == 1
    assert "79" in msg["Subject"] + text_of(msg)
    assert FailureEvent.objects.filter(kind="gpu_error").count() == 1
    (plan,) = RecoveryPlan.objects.all()
    assert plan.action == "reboot"
    # One drain of the node, one reboot: not one per line.
    kinds = list(RecoveryAction.objects.values_list("kind", flat=True))
    assert (kinds.count("drain"), kinds.count("reboot")) == (1, 1)
