"""Job events in-process: jobs, states and allocations as a user would see them; refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from collectors.schema import BatchError
from tests.jobs.conftest import event
from tests.jobs.helpers import assert_tallies_match_jobs
from webapp.core.models import RejectedBatch
from webapp.core.refusals import AuthError, batch_reject
from webapp.core.windows import Window
from webapp.fleet.models import Gpu, Node
from webapp.jobs.characterization import jobs_characterize
from webapp.jobs.models import Job, JobAllocation, JobEvent, JobTypeRule
from webapp.jobs.services import job_events_ingest, type_rules_forget


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def alloc(node: str, *indices: int) -> dict:
    return {"node": node, "gpu_indices": list(indices)}


def nothing_stored() -> bool:
    return not (Job.objects.exists() or JobEvent.objects.exists() or JobAllocation.objects.exists())


def lifecycle(t0: float, job_id: str = "1001") -> list[dict]:
    return [
        event(job_id, "submitted", t0, name="pretrain-7b", user="alice", partition="gpu",
              gpus_requested=4, submit_ts=t0),
        event(job_id, "started", t0 + 30, start_ts=t0 + 30,
              allocation=[alloc("gpu-node-01", 0, 1), alloc("gpu-node-02", 0, 1)]),
        event(job_id, "ended", t0 + 630, end_ts=t0 + 630, state="COMPLETED", exit_code=0),
    ]  # fmt: skip


def test_lifecycle_creates_the_job_with_its_gpus_and_times(sender, default_rules, t0):
    result = job_events_ingest(sender.raw(*lifecycle(t0)))

    assert (result.events, result.applied, result.jobs) == (3, 3, 1)
    job = Job.objects.get(scheduler_id="1001")
    assert job.cluster.name == "testcluster"
    assert (job.name, job.user, job.partition) == ("pretrain-7b", "alice", "gpu")
    assert job.job_type == "pretrain"  # from the default rules (name contains "pretrain")
    assert job.state == "completed" and job.exit_code == 0
    assert (job.submit_at, job.start_at, job.end_at) == (at(t0), at(t0 + 30), at(t0 + 630))
    assert (job.duration_s, job.queue_s, job.gpu_time_s) == (600, 30, 2400)
    assert job.gpus_requested == 4 and job.nodes_requested == 2
    allocations = list(job.allocations.select_related("node", "gpu"))
    assert sorted((a.node.hostname, a.gpu_index) for a in allocations) == [
        ("gpu-node-01", 0),
        ("gpu-node-01", 1),
        ("gpu-node-02", 0),
        ("gpu-node-02", 1),
    ]
    assert all((a.start, a.end) == (at(t0 + 30), at(t0 + 630)) for a in allocations)
    # The GPU is linked where the fleet knows it (node 01), by index otherwise (node 02).
    node01 = {a.gpu_index: a.gpu for a in allocations if a.node.hostname == "gpu-node-01"}
    assert node01[0] == Gpu.objects.get(node__hostname="gpu-node-01", index=0)
    assert all(a.gpu is None for a in allocations if a.node.hostname == "gpu-node-02")
    assert list(job.events.values_list("kind", flat=True)) == ["submitted", "started", "ended"]


def test_running_job_holds_open_allocations(sender, t0):
    job_events_ingest(sender.raw(*lifecycle(t0)[:2]))
    job = Job.objects.get(scheduler_id="1001")
    assert job.state == "running" and job.end_at is None and job.duration_s is None
    assert job.allocations.filter(end__isnull=True).count() == 4


def test_each_final_state_is_mapped(sender, t0):
    names = ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
             "OUT_OF_MEMORY"]  # fmt: skip
    events = [
        event(f"j{i}", "ended", t0 + 10, start_ts=t0, end_ts=t0 + 10, state=name, exit_code=i)
        for i, name in enumerate(names)
    ]
    job_events_ingest(sender.raw(*events))
    states = dict(Job.objects.values_list("scheduler_id", "state"))
    assert states == {
        "j0": "completed",
        "j1": "failed",
        "j2": "cancelled",
        "j3": "timeout",
        "j4": "node_fail",
        "j5": "preempted",
        "j6": "out_of_memory",
    }
    assert Job.objects.get(scheduler_id="j1").exit_code == 1


def test_resent_batch_changes_nothing(sender, t0):
    raw = sender.raw(*lifecycle(t0))
    job_events_ingest(raw)
    before = list(Job.objects.values())
    allocations = list(JobAllocation.objects.values())

    again = job_events_ingest(raw)
    # The same events in a new batch (a watcher replaying its spool) change nothing either.
    third = job_events_ingest(sender.raw(*lifecycle(t0)))

    assert again.applied == third.applied == 0 and again.duplicates == 3
    assert [{**j, "updated_at": None} for j in Job.objects.values()] == [
        {**j, "updated_at": None} for j in before
    ]
    assert list(JobAllocation.objects.values()) == allocations
    assert JobEvent.objects.count() == 3


def test_requeue_closes_the_allocation_and_returns_the_job_to_pending(sender, t0):
    events = lifecycle(t0)[:2]
    events.append(event("1001", "requeued", t0 + 100))
    job_events_ingest(sender.raw(*events))
    job = Job.objects.get(scheduler_id="1001")
    assert job.state == "pending"
    assert set(job.allocations.values_list("end", flat=True)) == {at(t0 + 100)}

    # It runs again on other GPUs and completes: two intervals per GPU slot, no overlap.
    job_events_ingest(
        sender.raw(
            event(
                "1001",
                "started",
                t0 + 200,
                start_ts=t0 + 200,
                allocation=[alloc("gpu-node-01", 4, 5)],
            ),
            event("1001", "ended", t0 + 500, end_ts=t0 + 500, state="FAILED", exit_code=1),
        )  # fmt: skip
    )
    job.refresh_from_db()
    assert (job.state, job.start_at, job.end_at) == ("failed", at(t0 + 200), at(t0 + 500))
    runs = sorted(set(job.allocations.values_list("start", "end")))
    assert runs == [(at(t0 + 30), at(t0 + 100)), (at(t0 + 200), at(t0 + 500))]


def test_ended_before_started_from_a_late_watcher(sender, t0):
    submitted, started, ended = lifecycle(t0)
    job_events_ingest(sender.raw(ended))
    job = Job.objects.get(scheduler_id="1001")
    assert job.state == "completed" and job.end_at == at(t0 + 630)

    job_events_ingest(sender.raw(started, submitted))
    job.refresh_from_db()
    # The late start neither reopens the job nor leaves its GPUs held forever.
    assert job.state == "completed"
    assert (job.submit_at, job.start_at, job.end_at) == (at(t0), at(t0 + 30), at(t0 + 630))
    assert job.name == "pretrain-7b"
    assert job.allocations.count() == 4
    assert set(job.allocations.values_list("start", "end")) == {(at(t0 + 30), at(t0 + 630))}


def test_the_characterization_follows_job_events(sender, default_rules, t0):
    """Through events (submitted, started, requeued, ended late or out of order) the cluster's
    tallies, which the characterization page reads, stay what counting the jobs says."""
    job_events_ingest(sender.raw(*lifecycle(t0, "a")))
    job_events_ingest(sender.raw(*lifecycle(t0, "b")[:2]))  # b runs
    requeued = [*lifecycle(t0, "c")[:2], event("c", "requeued", t0 + 100)]
    job_events_ingest(sender.raw(*requeued))
    job_events_ingest(sender.raw(lifecycle(t0, "d")[2]))  # d's end arrives first
    cluster = Job.objects.get(scheduler_id="a").cluster
    assert_tallies_match_jobs(cluster)

    job_events_ingest(sender.raw(*lifecycle(t0, "d")[:2]))
    job_events_ingest(
        sender.raw(event("b", "ended", t0 + 900, end_ts=t0 + 900, state="FAILED", exit_code=1))
    )
    assert_tallies_match_jobs(cluster)
    result = jobs_characterize(Window(cluster))
    assert result.total.gpu_jobs == 4 and result.types[0].job_type == "pretrain"
    assert {s.group: s.gpu_jobs for s in result.states} == {
        "completed": 2,
        "cancelled": 0,
        "failed": 1,
    }
    # a and d, then b, and the 70 s c ran on its 4 GPUs before its requeue (GPU time consumed
    # counts every run).
    assert result.total.gpu_time_s == 600 * 4 * 2 + 870 * 4 + 70 * 4


def test_events_of_one_batch_in_any_order_give_the_same_job(sender, t0):
    job_events_ingest(sender.raw(*reversed(lifecycle(t0, "a"))))
    job_events_ingest(sender.raw(*lifecycle(t0, "b")))
    a, b = Job.objects.get(scheduler_id="a"), Job.objects.get(scheduler_id="b")
    fields = ("state", "submit_at", "start_at", "end_at", "exit_code", "job_type", "gpus_requested")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert sorted(a.allocations.values_list("gpu_index", "start", "end")) == sorted(
        b.allocations.values_list("gpu_index", "start", "end")
    )


def test_one_start_reported_per_node_adds_each_nodes_gpus(sender, t0):
    """Two watchers each report the same start with the GPUs of their own node."""
    job_events_ingest(
        sender.raw(event("7", "started", t0, allocation=[alloc("gpu-node-01", 0, 1)]))
    )
    job_events_ingest(
        sender.raw(event("7", "started", t0, allocation=[alloc("gpu-node-02", 2, 3)]))
    )
    job = Job.objects.get(scheduler_id="7")
    assert sorted(job.allocations.values_list("node__hostname", "gpu_index")) == [
        ("gpu-node-01", 0),
        ("gpu-node-01", 1),
        ("gpu-node-02", 2),
        ("gpu-node-02", 3),
    ]


def test_explicit_type_wins_over_rules(sender, default_rules, t0):
    job_events_ingest(
        sender.raw(
            event("x", "submitted", t0, name="eval-llama", job_type="sft"),
            event("y", "submitted", t0, name="something", partition="debug"),
            event("z", "submitted", t0, name="nothing-special"),
        )
    )
    types = dict(Job.objects.values_list("scheduler_id", "job_type"))
    assert types == {"x": "sft", "y": "debug", "z": "other"}


def test_edited_rules_apply_to_new_jobs(sender, t0):
    JobTypeRule.objects.all().delete()
    JobTypeRule.objects.create(order=1, field="comment", pattern=r"kind=eval", job_type="eval")
    type_rules_forget()  # what the admin does on save; other processes wait out the TTL
    job_events_ingest(sender.raw(event("c", "submitted", t0, comment="team=a kind=EVAL")))
    assert Job.objects.get(scheduler_id="c").job_type == "eval"


@pytest.mark.parametrize(
    ("change", "reason", "needle"),
    [
        ({"job_type": "training"}, "malformed", "events.0.job_type"),
        ({"start_ts": 1_700_000_100.0, "end_ts": 1_700_000_000.0}, "malformed", "end before start"),
        ({"gpus_requested": -8}, "malformed", "events.0.gpus_requested"),
        ({"ts": "2024-03-01T00:00:00+25:00"}, "malformed", "events.0.ts"),
        ({"state": "EXPLODED"}, "malformed", "events.0.state"),
        (
            {"allocation": [{"node": "gpu-node-99", "gpu_indices": [0]}]},
            "unknown_node",
            "gpu-node-99",
        ),
    ],  # fmt: skip
)
def test_bad_event_refuses_the_whole_batch(sender, t0, change, reason, needle):
    good = event("ok", "submitted", t0)
    bad = {**event("bad", "ended", t0 + 60, state="COMPLETED"), **change}
    raw = sender.raw(bad, good) if reason == "malformed" else sender.raw(good, bad)

    with pytest.raises(BatchError) as excinfo:
        job_events_ingest(raw)

    assert excinfo.value.reason == reason
    assert needle in excinfo.value.detail
    assert nothing_stored()


def test_end_before_start_across_events_is_refused(sender, t0):
    job_events_ingest(sender.raw(event("j", "started", t0 + 100)))
    with pytest.raises(BatchError, match="end before start"):
        job_events_ingest(sender.raw(event("j", "ended", t0 + 200, end_ts=t0 + 50,
                                           state="FAILED")))  # fmt: skip
    job = Job.objects.get(scheduler_id="j")
    assert job.state == "running" and job.end_at is None
    assert JobEvent.objects.count() == 1


def test_wrong_token_is_refused_and_recorded(sender, t0):
    raw = json.dumps({**sender.batch(*lifecycle(t0)), "token": "not-the-token-" + "x" * 20})
    with pytest.raises(AuthError) as excinfo:
        job_events_ingest(raw)
    batch_reject(raw, excinfo.value)

    assert nothing_stored()
    rejected = RejectedBatch.objects.get()
    assert (rejected.reason, rejected.node) == ("bad_token", "scheduler-k8s")


def test_batch_of_another_cluster_cannot_place_jobs_on_our_nodes(sender, t0):
    from webapp.fleet.services import node_scheduler_grant, node_token_issue

    token = node_token_issue("othercluster", "scheduler")
    node_scheduler_grant("othercluster", "scheduler")  # a scheduler, but of its own cluster
    raw = json.dumps(
        {**sender.batch(*lifecycle(t0)), "cluster": "othercluster", "node": "scheduler",
         "token": token}
    )  # fmt: skip
    with pytest.raises(BatchError, match="no node 'gpu-node-01' in cluster 'othercluster'"):
        job_events_ingest(raw)
    assert nothing_stored()
    assert Node.objects.filter(cluster__name="othercluster").count() == 1


@pytest.mark.integration
def test_worker_applies_a_batch_published_by_task_name(committed_sender, worker_factory, t0):
    """As a watcher does: publish by task name to the real broker; a real worker stores it,
    and refuses (and records) a batch with a wrong token without stopping."""
    from collectors.schema import INGEST_QUEUE, JOB_EVENTS_TASK
    from tests.helpers import send_signed, wait_for

    worker_factory()
    bad = json.dumps({**committed_sender.batch(event("evil", "submitted", t0)),
                      "token": "wrong-token-" + "x" * 20})  # fmt: skip
    send_signed(JOB_EVENTS_TASK, args=[bad], queue=INGEST_QUEUE)
    send_signed(JOB_EVENTS_TASK, args=[committed_sender.raw(*lifecycle(t0))], queue=INGEST_QUEUE)

    job = wait_for(lambda: Job.objects.filter(scheduler_id="1001", state="completed").first())
    assert job.end_at == at(t0 + 630)
    assert job.allocations.filter(end=at(t0 + 630)).count() == 4
    assert wait_for(lambda: RejectedBatch.objects.filter(reason="bad_signature").exists())
    assert not Job.objects.filter(scheduler_id="evil").exists()


def test_job_events_need_the_scheduler_role(sender, t0):
    """A GPU node's own token may not place jobs on the cluster's nodes; once the node is
    given the scheduler role (the host of the Slurm watcher) it may, until it is taken away."""
    from webapp.fleet.services import node_scheduler_grant, node_token_issue

    token = node_token_issue("testcluster", "gpu-node-01")
    raw = json.dumps({**sender.batch(*lifecycle(t0)), "node": "gpu-node-01", "token": token})
    with pytest.raises(AuthError) as excinfo:
        job_events_ingest(raw)
    assert excinfo.value.reason == "not_scheduler"
    assert "issue_node_token --scheduler" in excinfo.value.detail
    assert nothing_stored()

    node_scheduler_grant("testcluster", "gpu-node-01")
    assert job_events_ingest(raw).applied == 3
    node_scheduler_grant("testcluster", "gpu-node-01", granted=False)
    later = {**sender.batch(event("later", "submitted", t0)), "node": "gpu-node-01"}
    with pytest.raises(AuthError, match="may not send job events"):
        job_events_ingest(json.dumps({**later, "token": token}))
    assert not Job.objects.filter(scheduler_id="later").exists()


@pytest.mark.integration
def test_worker_refuses_job_events_of_a_node_without_the_scheduler_role(
    committed_sender, worker_factory, broker, t0, tmp_path
):
    """Over the broker, as a compromised GPU node would send them: refused once, recorded,
    and the outbox entry cleared (never published again)."""
    from django.conf import settings

    from collectors.outbox import OUTBOX_KEY
    from collectors.schema import JOB_EVENTS_TASK
    from collectors.transport import Transport
    from tests.helpers import wait_for
    from webapp.core.outbox import outbox_redeliver
    from webapp.fleet.services import node_token_issue

    worker_factory()
    token = node_token_issue("testcluster", "gpu-node-01")
    batch = {**committed_sender.batch(*lifecycle(t0)), "node": "gpu-node-01", "token": token}
    transport = Transport(settings.CELERY_BROKER_URL, tmp_path / "spool")
    # As the collector sends: the outbox copy, then the task by name.
    assert transport.send(json.dumps(batch), batch["batch_id"], task=JOB_EVENTS_TASK)
    rejected = wait_for(lambda: RejectedBatch.objects.first())
    assert (rejected.reason, rejected.node) == ("not_scheduler", "gpu-node-01")
    wait_for(lambda: broker.hlen(OUTBOX_KEY) == 0)
    assert outbox_redeliver(older_than_s=0) == 0
    assert nothing_stored()


def node_state(node: str, state: str, since: float, reason: str = "") -> dict:
    return {"node": node, "state": state, "reason": reason, "since": since}


def test_node_states_from_the_scheduler_set_the_nodes_state(sender, t0):
    """A batch of node states alone (a watcher saw a drain and no job change)."""
    result = job_events_ingest(
        sender.raw(
            node_states=[
                node_state("gpu-node-01", "drained", t0, "vigil: gpu_off_bus failure 123"),
                node_state("gpu-node-02", "draining", t0 + 1, "hand drain"),
                node_state("login-01", "down", t0, "Not responding"),
            ]
        )
    )

    assert (result.events, result.node_states, result.node_states_unknown) == (0, 3, 1)
    nodes = {n.hostname: n for n in Node.objects.filter(cluster__name="testcluster")}
    assert (nodes["gpu-node-01"].state, nodes["gpu-node-01"].state_reason) == (
        "drained",
        "vigil: gpu_off_bus failure 123",
    )
    assert nodes["gpu-node-01"].state_since == at(t0)
    assert nodes["gpu-node-02"].state == "draining"
    assert nodes["scheduler-k8s"].state == "registered"  # the sender itself is not named
    assert not Node.objects.filter(hostname="login-01").exists()  # ignored, not created


def test_a_refused_batch_changes_no_node_state(sender, t0):
    raw = sender.raw(
        event("j", "started", t0 + 100, submit_ts=t0 + 200),  # starts before it was submitted
        node_states=[node_state("gpu-node-01", "drained", t0, "bad gpu")],
    )
    with pytest.raises(BatchError):
        job_events_ingest(raw)
    node = Node.objects.get(hostname="gpu-node-01")
    assert (node.state, node.state_reason) == ("registered", "")
    assert nothing_stored()


def test_node_states_need_the_scheduler_role(sender, t0):
    from webapp.fleet.services import node_token_issue

    token = node_token_issue("testcluster", "gpu-node-01")
    raw = sender.raw(
        node="gpu-node-01",
        token=token,
        node_states=[node_state("gpu-node-02", "down", t0, "sabotage")],
    )
    with pytest.raises(AuthError, match="may not send job events"):
        job_events_ingest(raw)
    assert Node.objects.get(hostname="gpu-node-02").state == "registered"
