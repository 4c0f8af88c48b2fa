"""Every table's columns fit its card at 1440 px: no column of any `table.data` sits in a hidden
horizontal scroll or past its card's right edge, on any page, with realistic data (names,
messages and numbers of the lengths a real site shows).

One fixture fills every page with rows through the real services: a two-node cluster with
telemetry, a running job holding idle GPUs, a failed job diagnosed and alerted (its email in
the outbox, one delivery refused), a GPU error recovered automatically, a plan awaiting
approval, a silence, an evaluation run, and the energy rig's month."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from tests.alerts.conftest import default_rules, deliver, later, with_email
from tests.browser.widths import OVERFLOWS, VIEWPORT
from tests.energy.conftest import build_rig
from tests.evaluation.conftest import checkpoint  # noqa: F401 (a fixture)
from tests.failures.conftest import make_fleet, nccl_window, pci, xid_event
from tests.helpers import make_batch
from tests.recovery.conftest import policy
from webapp.alerts import evaluate
from webapp.alerts.models import Alert, Notification, OutboxMessage
from webapp.alerts.services import silence_create, subscription_create
from webapp.evaluation.services import evaluation_request
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs.models import Job
from webapp.recovery.execution import action_execute
from webapp.recovery.models import RecoveryAction
from webapp.teams.services import team_create
from webapp.telemetry.services import samples_ingest

pytestmark = pytest.mark.browser

JOBS = {
    # scheduler id: (name, user, account): lengths as the demo and a real site show them.
    "200": ("pretrain-123b-internevo-stage2", "alice.wong", "pretrain"),
    "300": ("sft-20b-chat-mix-v3-lr2e-5", "farah.m", "alignment"),
    "400": ("pretrain-70b-internevo-longctx", "bo.zhang", "pretrain"),
    "500": ("eval-7b-mmlu-humaneval-gsm8k-3", "chen.li", "evaluation"),
    "601": ("debug-nccl-allreduce-bandwidth", "ivan.petrov", "infra"),
    "602": ("pretrain-7b-internevo-ablation-lr", "alice.wong", "pretrain"),
    "700": ("pretrain-20b-internevo-continued", "bo.zhang", "pretrain"),
}


def _run(fleet, job_id: str, *args, **kw) -> None:
    """fleet.run_job, then the job's name, user and account as a real site writes them."""
    fleet.run_job(job_id, *args, **kw)
    name, user, team = JOBS[job_id]
    Job.objects.filter(scheduler_id=job_id).update(name=name, user=user, team=team)


def _cuda_fault(fleet, job_id: str, end: float) -> None:
    """A job on gpu-node-01 dies of a CUDA fault its log shows; diagnosed."""
    _run(fleet, job_id, end - 1800, None, nodes=("gpu-node-01",))
    line = "gpu-node-01: RuntimeError: CUDA error: an illegal memory access was encountered"
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-01",
            log_windows=[
                {
                    "job_id": job_id,
                    "ts": end - 5,
                    "path": f"/var/log/jobs/{job_id}/gpu-node-01.log",
                    "first_line_no": 10,
                    "lines": [line],
                }
            ],
        )
    )
    _run(fleet, job_id, end - 1800, end, nodes=("gpu-node-01",))
    failure_diagnose(FailureEvent.objects.get(job__scheduler_id=job_id).pk)


def _gpu_uuid(host: str, index: int) -> str:
    """A UUID as NVML prints one (GPU- and 36 characters)."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{host}/{index}')}"


def _telemetry(fleet, t0: float, intervals: int) -> None:
    """Both nodes report every minute with their real-length UUIDs and model name; GPUs 4-7
    of gpu-node-01 are idle."""
    for no, host in enumerate(("gpu-node-01", "gpu-node-02"), 1):
        gpus = [
            {
                "index": i,
                "uuid": _gpu_uuid(host, i),
                "name": "NVIDIA A100-SXM4-80GB",
                "pci_bus_id": pci(no, i),
            }
            for i in range(8)
        ]
        for g in gpus:
            Gpu.objects.filter(node__hostname=host, index=g["index"]).update(uuid=g["uuid"])
        batch = make_batch(
            fleet.cluster, host, fleet.tokens[host], t0=t0, intervals=intervals, step_s=60
        )
        batch["gpus"] = gpus
        for row in batch["samples"]:
            if host == "gpu-node-01" and row[0] >= 4:
                row[2] = 0.0  # gpu_util
        samples_ingest(json.dumps(batch))


@pytest.fixture
def every_page(transactional_db, settings, operator, broker, checkpoint) -> dict[str, str]:  # noqa: F811
    """Data on every page; returns {page name: path}."""
    cache.clear()
    settings.EMAIL_BACKEND = "webapp.alerts.outbox.OutboxEmailBackend"
    with_email(operator)
    default_rules()
    fleet = make_fleet()
    cluster = Cluster.objects.get(name=fleet.cluster)
    for team, account in (("pretraining", "pretrain"), ("evaluation", "evaluation")):
        team_create(team, users=[operator], rules=[("team", account)])
    now = float(int(time.time()))
    _telemetry(fleet, now - 31 * 60, 31)

    # A failed pretraining job: NCCL timeout after an Xid 79 on gpu-node-02; alerted, emailed.
    end = now - 300
    _run(fleet, "200", end - 6 * 3600, None, last_checkpoint_ts=end - 1800)
    node_events_ingest(
        fleet.node_batch(
            "gpu-node-02",
            gpu_events=[xid_event(end - 700, 79, index=3, message="GPU has fallen off the bus.")],
        )
    )
    node_events_ingest(fleet.node_batch("gpu-node-01", log_windows=[nccl_window("200", end - 60)]))
    _run(fleet, "200", end - 6 * 3600, end)
    for f in FailureEvent.objects.all():
        failure_diagnose(f.pk)
    failed = FailureEvent.objects.get(kind="job_failure", job__scheduler_id="200")
    subscription_create(operator, clusters=[cluster], severities=["critical", "warning"])
    for f in FailureEvent.objects.all():
        evaluate.failure_alerts(f.pk)
    deliver(later(2))
    # One delivery refused by the mail server, as the log shows it.
    Notification.objects.filter(pk=Notification.objects.order_by("pk").first().pk).update(
        status="failed",
        attempts=3,
        error="SMTPRecipientsRefused: {'bounce@example.org': (550, b'5.1.1 <bounce@example.org>: "
        "Recipient address rejected: User unknown in virtual mailbox table')}",
    )
    silence_create(
        user="operator",
        comment="reseating GPU 3 on gpu-node-02, ticket DC-4821 (vendor RMA pending)",
        ends_at=timezone.now() + timedelta(hours=4),
        node=Node.objects.get(hostname="gpu-node-02"),
        cause="gpu_off_bus",
    )

    # An Xid 79 under a running job, recovered automatically; the job runs again.
    policy("auto")
    _run(fleet, "300", now - 3600, None, nodes=("gpu-node-02",), job_type="sft")
    node_events_ingest(
        fleet.node_batch("gpu-node-02", gpu_events=[xid_event(now - 120, 79, index=5)])
    )
    recovered = (
        FailureEvent.objects.filter(kind="gpu_error").order_by("-occurred_at", "-pk").first()
    )
    failure_diagnose(recovered.pk)
    for action in recovered.recovery_plan.actions.order_by("seq", "id"):
        action_execute(action.pk, "test")
    _run(fleet, "300", time.time() + 1, None, nodes=("gpu-node-01",), job_type="sft")

    # CUDA faults on gpu-node-01 (a repeat offender): the second plan waits for approval.
    _cuda_fault(fleet, "602", now - 5400)
    policy("approve")
    _cuda_fault(fleet, "400", now - 15)
    policy("auto")

    # A running evaluation job holding four idle GPUs; a debug job that ended.
    _run(fleet, "500", now - 30 * 60, None, nodes=("gpu-node-01",), job_type="eval")
    _run(fleet, "601", now - 7200, now - 3000, state="COMPLETED", exit_code=0, job_type="debug")
    # A pretraining job running with checkpoints (the reliability page's checkpoint interval).
    _run(fleet, "700", now - 4 * 3600, None, nodes=("gpu-node-02",), last_checkpoint_ts=now - 900)

    evaluate.alerts_evaluate(later(600))  # job 500's idle GPUs, for long enough to fire
    # The oldest alert ended (its node back in service): its row shows when.
    Alert.objects.filter(pk=Alert.objects.order_by("pk").first().pk).update(
        state="resolved", ends_at=timezone.now()
    )

    run = evaluation_request(
        cluster_name=fleet.cluster,
        model_path=str(checkpoint),
        datasets=["mmlu", "gsm8k", "humaneval", "ceval", "cmmlu", "triviaqa"],
        nodes=1,
        gpus_per_node=8,
        user="operator",
    )
    energy = build_rig()
    # A team name of a real site's length owning the energy rig's vision account (its by-team
    # rows and the team × month table), and nodes out of service for people's reasons of a
    # real site's length, more kinds than the reasons table lists one by one.
    team_create("customer-pilot-acme-corporation-vision-language", rules=[("team", "vision")])
    since = timezone.now() - timedelta(days=3)
    Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"gpu-node-out-{n:02d}", state="drained",
             state_reason=f"{kind} (vendor case 00{12345 + n}), ticket DC-{4800 + n}",
             state_since=since, token_hash=f"out-{n}")
        for n, kind in enumerate(
            f"RMA: replace {part}, reseat NVLink bridge and rerun the burn-in afterwards"
            for part in ("GPU", "HGX baseboard", "NVSwitch tray", "PSU", "fan module", "DIMM",
                         "ConnectX-7 HCA", "OSFP cable", "NVMe drive", "BMC", "CPU", "riser",
                         "PCIe switch", "heatsink")
        )
    )  # fmt: skip

    node = Node.objects.get(hostname="gpu-node-01")
    job = Job.objects.get(scheduler_id="200")
    action = RecoveryAction.objects.filter(plan__failure=recovered).order_by("seq").first()
    assert Alert.objects.exists() and OutboxMessage.objects.exists() and run.pk
    return {
        "overview": "/",
        "nodes": f"/clusters/{fleet.cluster}/nodes/",
        "node": f"/nodes/{node.pk}/",
        "gpu": f"/gpus/{Gpu.objects.get(node=node, index=4).pk}/",
        "jobs": f"/jobs/?cluster={fleet.cluster}",
        "job": f"/jobs/{job.pk}/",
        "running job": f"/jobs/{Job.objects.get(scheduler_id='500').pk}/",
        "characterization": f"/jobs/characterization/?cluster={fleet.cluster}",
        "wasted": "/jobs/wasted/?minutes=5",
        "failures": "/failures/",
        "failure": f"/failures/{failed.pk}/",
        "gpu failure": f"/failures/{recovered.pk}/",
        "job failures": f"/failures/job/{job.pk}/",
        "reliability": f"/failures/reliability/?cluster={fleet.cluster}",
        "recovery": f"/recovery/?cluster={fleet.cluster}&days=1",
        "approvals": "/recovery/approvals/",
        "recovery nodes": "/recovery/nodes/",
        "action": f"/recovery/actions/{action.pk}/",
        "alerts": "/alerts/",
        "silences": "/alerts/silences/",
        "channels": "/alerts/channels/",
        "deliveries": "/alerts/deliveries/",
        "outbox": "/alerts/outbox/",
        "energy": f"/energy/?cluster={energy['cluster'].name}&month={energy['month']}",
        "energy report": (
            f"/energy/report/?cluster={energy['cluster'].name}&month={energy['month']}"
        ),
        "evaluation": f"/evaluation/?cluster={fleet.cluster}",
    }


def test_every_table_fits_its_card_at_1440_px(
    page, live_server, every_page, operator_login, screenshot_dir, page_log
):
    page.set_viewport_size(VIEWPORT)
    operator_login("/")
    problems, empty = [], []
    for name, path in every_page.items():
        response = page.goto(f"{live_server.url}{path}")
        assert response.ok, f"{name}: {path} answered {response.status}"
        if not page.locator("table.data tbody tr").count():
            empty.append(name)
        shot = name.replace(" ", "-")
        page.screenshot(path=screenshot_dir / f"width-{shot}.png", full_page=True)
        tables = page.locator("table.data[id]:visible")
        for i in range(tables.count()):
            table = tables.nth(i)
            table.screenshot(path=screenshot_dir / f"width-{shot}-{table.get_attribute('id')}.png")
        for t in page.evaluate(OVERFLOWS):
            hidden = ", ".join(t["hidden"]) or "none past the edge"
            problems.append(f"{name} ({path}): {t['table']} scrolls {t['scroll']}; {hidden}")
    assert not empty, f"pages with no table rows (the fixture misses them): {empty}"
    assert not problems, "tables wider than their card at 1440 px:\n" + "\n".join(problems)
    assert page_log.errors == []
