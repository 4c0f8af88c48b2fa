"""The cluster's guard rails and the nodes out of service, read on the recovery pages: a fourth
drain in the hour waits for approval and the approvals page says why; the nodes page counts
the nodes out by reason, for how long, and who returns them. Failures are diagnosed through
the real services (simulated executor: no scheduler is contacted)."""

from __future__ import annotations

import time

import pytest

from collectors.schema import NodeStateIn
from tests.failures.conftest import xid_event
from tests.recovery.conftest import policy
from webapp.failures.models import FailureEvent
from webapp.failures.node_events import node_events_ingest
from webapp.failures.services import failure_diagnose
from webapp.fleet.models import Cluster, Node
from webapp.fleet.services import node_states_apply
from webapp.recovery.models import RecoveryAction, RecoveryPlan, RecoveryPolicy
from webapp.recovery.selectors import nodes_out_by_reason

pytestmark = pytest.mark.django_db


def _xid(fleet, xid: int, node_no: int = 2) -> FailureEvent:
    """An Xid on GPU 3 of gpu-node-0N while a job runs there; diagnosed (and planned)."""
    at = float(int(time.time())) - 60
    node = f"gpu-node-0{node_no}"
    fleet.run_job(f"7{node_no}{xid}", at - 3600, None, nodes=(node,))
    node_events_ingest(fleet.node_batch(node, gpu_events=[xid_event(at, xid, index=3,
                                                                    node_no=node_no)]))  # fmt: skip
    failure = (
        FailureEvent.objects.filter(kind="gpu_error", gpu_error__xid=xid)
        .order_by("-occurred_at", "-pk")
        .first()
    )
    failure_diagnose(failure.pk)
    return failure


def _earlier_drains(n: int) -> None:
    """n drains Vigil made within the hour, on record (the rows the cap counts)."""
    cluster = Cluster.objects.get(name="testcluster")
    plan = RecoveryPlan.objects.create(cluster=cluster, mode="auto", executor="simulated")
    for i in range(n):
        RecoveryAction.objects.create(
            plan=plan, cluster=cluster, seq=1, kind="drain", status="succeeded", mode="auto",
            executor="simulated", host=f"other-{i}",
        )  # fmt: skip


def test_a_fourth_drain_in_the_hour_waits_for_approval_and_the_page_says_why(
    fleet, operator_client
):
    policy("auto")
    RecoveryPolicy.objects.update(max_out_percent=100)  # only the hourly cap here
    _earlier_drains(3)
    failure = _xid(fleet, 79)
    actions = {a.kind: a for a in failure.recovery_plan.actions.all()}
    drain = actions["drain"]
    assert drain.status == "awaiting_approval"
    why = "3 node(s) drained by Vigil in the last hour, at most 3 an hour: waits for approval"
    assert why in drain.reason
    # Operators are told, paged; the requeue and the reboot wait behind the drain.
    notify = actions["notify"]
    assert (notify.audience, notify.params, notify.status) == (
        "operators", {"severity": "page"}, "succeeded",
    )  # fmt: skip
    assert why in notify.reason
    body = operator_client.get("/recovery/approvals/").content.decode()
    assert f'data-action="{drain.pk}"' in body or f"/recovery/actions/{drain.pk}/" in body
    assert why in body


def test_within_the_cap_the_drain_runs_without_a_person(fleet):
    policy("auto")
    _earlier_drains(2)
    failure = _xid(fleet, 79)
    drain = failure.recovery_plan.actions.get(kind="drain")
    assert drain.status == "ready"
    assert not failure.recovery_plan.actions.filter(kind="notify").exists()


def test_nodes_page_counts_the_nodes_out_by_reason_and_for_how_long(fleet, owner_client):
    cluster = Cluster.objects.get(name="testcluster")
    for i in (3, 4, 5):
        Node.objects.create(cluster=cluster, hostname=f"gpu-node-0{i}", token_hash="x")
    now = time.time()
    node_states_apply(
        cluster.pk,
        [
            NodeStateIn(node="gpu-node-01", state="drained", reason="vigil: gpu_ecc failure 7",
                        since=now - 600),
            NodeStateIn(node="gpu-node-02", state="drained", reason="vigil: gpu_nvlink failure 9",
                        since=now - 7200),
            NodeStateIn(node="gpu-node-03", state="drained", reason="ops: fan replacement",
                        since=now - 3 * 86400),
            NodeStateIn(node="gpu-node-04", state="drained", reason="ops: fan replacement",
                        since=now - 60),
            NodeStateIn(node="gpu-node-05", state="down", reason="Not responding",
                        since=now - 300),
        ],
    )  # fmt: skip
    response = owner_client.get("/recovery/nodes/")
    groups = {g.reason: g for g in response.context["out_by_reason"]}
    assert {k: (g.count, g.by_vigil) for k, g in groups.items()} == {
        "Vigil: drained for a failure": (2, False),  # no plan resumes them: a person does
        "by a person: ops: fan replacement": (2, False),
        "down: Not responding": (1, False),
    }
    # The longest out of each group, as the page shows it.
    assert groups["by a person: ops: fan replacement"].longest_s == pytest.approx(
        3 * 86400, abs=120
    )
    body = response.content.decode()
    assert 'id="out-by-reason"' in body
    assert 'data-reason="by a person: ops: fan replacement"' in body
    assert groups["Vigil: drained for a failure"].longest_s >= 7200  # the older of the two


def test_a_kubernetes_cluster_cordons_and_tells_operators_instead_of_a_reset(fleet):
    policy("auto", executor="kubernetes")
    failure = _xid(fleet, 109)  # RESET_GPU, which kubectl cannot do
    actions = list(failure.recovery_plan.actions.order_by("seq", "id"))
    assert [a.kind for a in actions] == ["drain", "notify", "requeue"]
    assert not any(a.status == "failed" for a in actions)
    assert "GPU reset needed, which this cluster's executor cannot do" in actions[1].reason


def test_a_contact_support_xid_drains_and_pages_operators_and_is_never_resumed(fleet):
    policy("auto")
    failure = _xid(fleet, 54)  # CHECK_MECHANICALS: auxiliary power not connected
    actions = list(failure.recovery_plan.actions.order_by("seq", "id"))
    assert [a.kind for a in actions] == ["drain", "notify", "requeue"]
    drain, notify, _ = actions
    assert drain.status == "ready" and drain.host == "gpu-node-02"
    assert "SILENT_RUNNING_PWR_REDUCED_CLOCKING" in notify.reason
    assert "CHECK_MECHANICALS" in notify.reason
    assert (notify.audience, notify.params) == ("operators", {"severity": "page"})
    # Once drained so, a later RESET_GPU Xid on the node plans no reset and no resume.
    cluster = Cluster.objects.get(name="testcluster")
    node_states_apply(cluster.pk, [NodeStateIn(
        node="gpu-node-02", state="drained", reason=f"vigil: {drain.params['reason']}",
        since=time.time())])  # fmt: skip
    RecoveryAction.objects.filter(pk=drain.pk).update(status="succeeded")
    at = float(int(time.time())) - 30  # another GPU: one GPU's Xids within 3 min are one incident
    node_events_ingest(fleet.node_batch("gpu-node-02", gpu_events=[xid_event(at, 109, index=5)]))
    later = FailureEvent.objects.get(kind="gpu_error", gpu_error__xid=109)
    failure_diagnose(later.pk)
    later.refresh_from_db()
    actions = list(later.recovery_plan.actions.order_by("seq", "id"))
    assert not any(a.kind in ("reset_gpu", "resume") for a in actions)
    assert any("escalated to operators" in a.reason for a in actions if a.kind == "notify")
    # The nodes page: out, escalated, for a person to return.
    groups = {g.reason: g.by_vigil for g in nodes_out_by_reason(cluster.pk)}
    assert groups == {"Vigil: escalated to operators": False}


def test_a_vigil_drain_with_no_reset_planned_waits_for_a_person_on_the_nodes_page(fleet):
    # Xid 95 (RESET_GPU): Vigil resets the GPU, checks and resumes the node itself. Xid 74
    # (NVLink, cordon and restart the job): the node stays drained until a person looks.
    policy("auto")
    rebooted = _xid(fleet, 95, node_no=2)
    cordoned = _xid(fleet, 74, node_no=1)
    assert rebooted.recovery_plan.actions.filter(kind="resume").exists()
    assert not cordoned.recovery_plan.actions.filter(kind="resume").exists()
    cluster = Cluster.objects.get(name="testcluster")
    node_states_apply(cluster.pk, [
        NodeStateIn(node="gpu-node-02", state="drained", since=time.time(),
                    reason=f"vigil: gpu_ecc failure {rebooted.pk}"),
        NodeStateIn(node="gpu-node-01", state="drained", since=time.time(),
                    reason=f"vigil: gpu_nvlink failure {cordoned.pk}"),
    ])  # fmt: skip
    groups = {g.reason: (g.count, g.by_vigil) for g in nodes_out_by_reason(cluster.pk)}
    assert groups == {
        "Vigil: drained, its reset or reboot planned": (1, True),
        "Vigil: drained for a failure": (1, False),
    }
