"""The alert list fits its card at 1440 px with the values a real site gives it: long rule
names, a 112-GPU job's long name in its summary, long cluster, node and team names, an end time
and the row's silence link, none of them in a hidden sideways scroll."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.alerts.conftest import default_rules
from tests.browser.widths import OVERFLOWS, VIEWPORT
from webapp.alerts.models import Alert, AlertGroup, AlertRule
from webapp.fleet.models import Cluster, Node
from webapp.jobs.models import Job
from webapp.teams.services import team_create

pytestmark = pytest.mark.browser


@pytest.fixture
def long_alerts(transactional_db, operator) -> None:
    default_rules()
    idle = AlertRule.objects.get(name="gpus-idle")
    hardware = AlertRule.objects.get(name="gpu-hardware")
    # A site's own rule, named as sites name them.
    custom = AlertRule.objects.create(
        **{
            f.attname: getattr(idle, f.attname)
            for f in AlertRule._meta.concrete_fields
            if not f.primary_key
        }
        | {"name": "pretraining-gpus-idle-during-checkpoint-restore"}
    )
    cluster = Cluster.objects.create(name="kalos-training-eu-west-2")
    node = Node.objects.create(cluster=cluster, hostname="kalos-gpu-node-0112.dc3.example.org")
    team = team_create("foundation-model-pretraining", users=[operator], rules=[("team", "pt")])
    now = timezone.now()
    job = Job.objects.create(
        cluster=cluster,
        scheduler_id="104857612_37",
        name="pretrain-llama-70b-longctx-128k-ablation-lr3e-4-run07",
        user="researcher-with-a-long-name",
        state="running",
        start_at=now,
        gpus_requested=112,
    )
    rows = [
        (custom, "critical", "firing", None, f"Job {job.scheduler_id} ({job.name}): 112 of its "
         "112 allocated GPU(s) idle"),
        (idle, "warning", "pending", None, f"Job {job.scheduler_id} ({job.name}): 8 of its 112 "
         "allocated GPU(s) idle"),
        (hardware, "critical", "resolved", now, f"{node.hostname} GPU 7 (00000000:DB:00.0): Xid "
         "79 GPU has fallen off the bus; node drained, job requeued"),
    ]  # fmt: skip
    for n, (rule, severity, state, ends_at, summary) in enumerate(rows):
        group = AlertGroup.objects.create(key=f"{cluster.name}:{rule.name}:{n}", cluster=cluster)
        Alert.objects.create(
            rule=rule,
            group=group,
            fingerprint=f"width-{n}",
            labels={"alertname": rule.name, "severity": severity},
            summary=summary,
            severity=severity,
            state=state,
            cluster=cluster,
            node=node,
            job=job,
            team=team,
            starts_at=now,
            last_seen_at=now,
            ends_at=ends_at,
        )


def test_the_alert_list_fits_its_card_with_long_names(
    page, live_server, long_alerts, operator_login, screenshot_dir, page_log
):
    page.set_viewport_size(VIEWPORT)
    operator_login("/alerts/")
    page.screenshot(path=screenshot_dir / "alerts-list-long-names.png", full_page=True)
    assert page.locator("#alert-table tbody tr").count() == 3
    # The silence link of each active row is there and in view.
    assert page.locator("#alert-table a.silence").count() == 2
    problems = page.evaluate(OVERFLOWS)
    assert problems == [], f"alert list wider than its card at 1440 px: {problems}"
    assert page_log.errors == []
