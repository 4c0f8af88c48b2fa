"""Simulated jobs: Acme's workload mix on a small fleet, tied to which GPUs are busy."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from collectors.agent import Agent
from collectors.backends import simfailures
from collectors.backends.base import GPU_POS
from collectors.backends.siminbox import INBOX_ENV, scheduler_commands_send
from collectors.backends.simulated import SimulatedBackend
from collectors.schema import JobEventBatch

T0 = 1_700_000_000.0


def simulate(clusters=("seren",), days=3.0, seed=11):
    backend = SimulatedBackend(list(clusters), 16, 8, seed=seed)
    watcher = backend.jobs.watcher(lambda c, n: f"token-of-{n}")
    batches = []
    for k in range(int(days * 86400 / 600)):
        batches += [JobEventBatch.model_validate_json(t) for _i, t in watcher.poll(T0 + 600 * k)]
    return backend, batches


def shares(ended, weight):
    totals = Counter()
    for e in ended:
        totals[e.job_type] += weight(e)
    whole = sum(totals.values())
    return {k: v / whole for k, v in totals.items()}


def gpu_time(e):
    return (e.end_ts - e.start_ts) * e.gpus_requested if e.start_ts else 0.0


# acme-workload.md section 2: each type's share of GPU jobs and of GPU time, in %.
ACME_MIX = {
    "seren": {
        "eval": (64.9, 6.2),
        "pretrain": (0.9, 69.5),
        "sft": (14.9, 6.4),
        "mllm": (2.9, 8.6),
        "debug": (1.9, 1.7),
        "other": (14.6, 7.6),
    },
    "kalos": {
        "eval": (92.8, 0.4),
        "pretrain": (3.2, 95.5),
        "debug": (2.7, 1.6),
        "other": (1.3, 2.5),
    },
}


@pytest.mark.parametrize("cluster", ["seren", "kalos"])
def test_a_week_of_jobs_has_the_paper_s_mix_by_count_and_gpu_time(cluster):
    """What the characterization page shows for a simulated cluster: every type within 4
    points of the paper's share of jobs and of GPU time (evaluation is most jobs but little
    GPU time, pretraining the opposite)."""
    _backend, batches = simulate((cluster,), days=7.0)
    ended = [e for b in batches for e in b.events if e.kind == "ended"]
    by_count = shares(ended, lambda e: 1)
    by_time = shares(ended, gpu_time)
    assert set(by_count) == set(ACME_MIX[cluster])
    for job_type, (count_pct, time_pct) in ACME_MIX[cluster].items():
        assert 100 * by_count[job_type] == pytest.approx(count_pct, abs=4), job_type
        assert 100 * by_time[job_type] == pytest.approx(time_pct, abs=4), job_type
    # Section 4: about 40% of jobs fail; by GPU time completed jobs are a minority, most of
    # it cancelled (Seren 66%, Kalos 61%).
    states = Counter(e.state for e in ended)
    assert 0.3 < states["FAILED"] / len(ended) < 0.5
    time_states = Counter()
    for e in ended:
        time_states[e.state] += gpu_time(e)
    total = sum(time_states.values())
    assert time_states["COMPLETED"] / total < 0.45 < time_states["CANCELLED"] / total


def test_job_events_are_consistent():
    _backend, batches = simulate()
    assert {(b.cluster, b.node, b.source) for b in batches} == {
        ("seren", "seren-node-001", "simulated")
    }
    events = [e for b in batches for e in b.events]
    ended = [e for e in events if e.kind == "ended"]
    assert len(ended) > 2000  # about 1,000 jobs a day on 128 GPUs
    # Every job that started was submitted first, holds the GPUs it asked for, and ends once.
    kinds = Counter((e.job_id, e.kind) for e in events)
    assert all(n == 1 for n in kinds.values())
    for e in events:
        if e.kind == "started":
            assert sum(len(a.gpu_indices) for a in e.allocation) == e.gpus_requested
            assert e.start_ts >= e.submit_ts
    # Each run is charged to the model it works on, tooling to the platform: the managers'
    # energy CSV has a project per row.
    projects = Counter((e.job_type, e.project) for e in ended)
    assert {p for (t, p) in projects if t == "debug"} == {"platform"}
    assert {p for (t, p) in projects if t == "pretrain"} <= {"llm-7b", "llm-20b", "llm-123b"}
    assert {p for (t, p) in projects if t in ("eval", "sft")} <= {"llm-7b", "llm-20b", "llm-70b"}
    assert len({p for (t, p) in projects if t == "eval"}) >= 2


def test_evaluation_waits_longest_and_pretraining_hardly_at_all():
    _backend, batches = simulate(days=2.0)
    started = [e for b in batches for e in b.events if e.kind == "started"]

    def mean_wait(kind):
        waits = [e.start_ts - e.submit_ts for e in started if e.job_type == kind]
        return sum(waits) / len(waits)

    assert mean_wait("eval") > mean_wait("pretrain")


def test_free_gpus_idle_and_held_gpus_mostly_work():
    backend = SimulatedBackend(["seren"], 16, 8, seed=5)
    held_busy = held = free_busy = free = 0
    for k in range(40):
        ts = T0 + 900 * k
        readings = backend.read(ts)
        jobs = backend.jobs.clusters["seren"]
        for n, reading in enumerate(readings):
            for row in reading.gpu_rows:
                working = row[GPU_POS["gpu_util"]] >= 50
                if (n, row[0]) in jobs.owner:
                    held += 1
                    held_busy += working
                else:
                    free += 1
                    free_busy += working
    assert free > 100 and free_busy == 0  # nobody's GPU does nothing
    assert 0.6 < held_busy / held < 0.98  # held GPUs work, but some are wasted


def test_backfill_sends_job_history_in_the_past_and_ends_what_is_in_flight():
    backend = SimulatedBackend(["kalos"], 4, 8, seed=2)
    telemetry, jobs = [], []
    agent = Agent(
        backend,
        lambda c, n: f"token-of-{n}",
        lambda _i, t: telemetry.append(t),
        watchers=[backend.jobs.watcher(lambda c, n: f"token-of-{n}")],
        job_sink=lambda _i, t: jobs.append(t),
    )
    agent.run(60, backfill=True)
    assert len(telemetry) == 60 * 4
    events = [e for t in jobs for e in JobEventBatch.model_validate_json(t).events]
    stamps = [row[1] for t in telemetry for row in json.loads(t)["samples"]]
    # Job history covers the sampled window, in the past, with nothing before the first sample
    # (a restarted simulator must not claim GPUs over a past another run already reported).
    assert events and min(stamps) <= min(e.ts for e in events)
    assert max(e.ts for e in events) <= max(stamps) < time.time()
    started = {e.job_id for e in events if e.kind == "started"}
    ended = {e.job_id for e in events if e.kind == "ended"}
    assert started and started <= ended  # the run's end cancels the jobs in flight


def test_history_then_live_carries_on_with_the_jobs_of_the_history():
    """`make demo` sends an hour of history, then samples live from the same simulator: the
    fleet is as busy live as at the end of the history, not emptied by it."""
    backend = SimulatedBackend(["seren"], 4, 8, seed=5)
    telemetry, jobs = [], []
    agent = Agent(
        backend,
        lambda c, n: f"token-of-{n}",
        lambda _i, t: telemetry.append(json.loads(t)),
        interval_s=0.01,
        watchers=[backend.jobs.watcher(lambda c, n: f"token-of-{n}")],
        job_sink=lambda _i, t: jobs.append(t),
    )
    assert agent.replay_history(3600, step_s=30, rounds_per_batch=20) == 120
    history = len(telemetry)
    assert history == 4 * 6  # 120 rounds / 20 to a batch, per node
    events = [e for t in jobs for e in JobEventBatch.model_validate_json(t).events]
    running = {e.job_id for e in events if e.kind == "started"} - {
        e.job_id for e in events if e.kind == "ended"
    }
    assert running  # the history leaves jobs in flight (the pretraining lane at least)

    def held(batches) -> int:
        """GPUs held by running jobs after these job events (one data-parallel job's GPUs
        move in lockstep, so a single instant's utilization says little of the fleet)."""
        alloc: dict[str, int] = {}
        for t in batches:
            for e in JobEventBatch.model_validate_json(t).events:
                if e.kind == "started" and e.allocation:
                    alloc[e.job_id] = sum(len(g.gpu_indices) for g in e.allocation)
                elif e.kind == "ended":
                    alloc.pop(e.job_id, None)
        return sum(alloc.values())

    at_end = held(jobs)
    now = time.time()
    for k in range(3):  # live rounds (agent.run would end the jobs in flight after them)
        agent.round(now + 0.01 * k)
    live = telemetry[history:]
    assert len(live) == 3 * 4
    assert at_end > 0.3 * 4 * 8
    assert held(jobs) == pytest.approx(at_end, rel=0.15)
    # And the live samples come from those jobs' GPUs: some of them working now.
    last_ts = max(row[1] for b in live for row in b["samples"])
    rows = [row for b in live for row in b["samples"] if row[1] == last_ts]
    assert any(row[GPU_POS["gpu_util"]] > 0 for row in rows)


def test_jobs_running_at_the_first_round_are_found_mid_run():
    """The jobs already running when a run starts are reported as started then (no GPU is
    claimed twice over the past), but they are not all loading their checkpoints: at the first
    round the pretraining lanes work, as they do most of the time later on."""
    working, lanes = 0, 0
    for seed in range(8):
        backend = SimulatedBackend(["seren", "kalos"], 16, 8, seed=seed)
        watcher = backend.jobs.watcher(lambda c, n: f"token-of-{n}")
        readings = backend.read(T0)
        events = [
            e
            for _i, text in watcher.poll(T0)
            for e in JobEventBatch.model_validate_json(text).events
        ]
        lane = {e.job_id for e in events if e.kind == "started" and e.job_type == "pretrain"}
        assert all(e.start_ts >= T0 for e in events if e.kind == "started")
        for reading in readings:
            cluster = backend.jobs.clusters[reading.cluster]
            node = int(reading.node.rsplit("-", 1)[1]) - 1
            for row in reading.gpu_rows:
                owner = cluster.holder(node, row[0], T0)
                if owner is not None and owner[0].job_id in lane:
                    lanes += 1
                    working += row[GPU_POS["gpu_util"]] > 0
    # Lanes idle between runs, while loading and after checkpoints: about a fifth of the time.
    assert lanes > 0 and working / lanes > 0.6


# --- Recovery closes the loop: a requeued job runs again ----------------------------------


def _hardware_failed_lane_job(tmp_path, cluster="kalos", seed=5, step_s=10.0):
    """A simulated cluster whose scheduler takes commands from an inbox, run as the demo runs
    it (a round every `step_s`) until a pretraining run ends FAILED on a GPU fault; returns
    the backend, the watcher, the events so far, the job and the time of that round."""
    inbox = tmp_path / "inbox"
    backend = SimulatedBackend([cluster], 16, 8, seed=seed, scheduler_inbox=inbox)
    watcher = backend.jobs.watcher(lambda c, n: f"token-of-{n}")
    c = backend.jobs.clusters[cluster]
    events = []
    ts = T0
    for _ in range(int(20 * 86400 / step_s)):
        ts += step_s
        events += [
            e for _i, t in watcher.poll(ts) for e in JobEventBatch.model_validate_json(t).events
        ]
        for e in events[-50:]:
            job = c.known.get(e.job_id)
            if (
                e.kind == "ended"
                and e.state == "FAILED"
                and job is not None
                and job.lane
                and job.cause in simfailures.HARDWARE_XID
            ):
                return backend, watcher, events, job, ts, inbox
    raise AssertionError("no pretraining run failed on a GPU fault in 20 simulated days")


def test_a_requeued_job_runs_again_on_healthy_nodes(tmp_path):
    """The demo's loop: a 112-GPU pretraining run dies of a GPU fault; Vigil's recovery drains
    the node and requeues the job (the Slurm executor's commands, handed to the simulated
    scheduler); the scheduler reports it requeued and, after a short wait, started again
    under its id on 14 nodes, none of them the drained one; the team's own resubmission is
    not needed."""
    backend, watcher, events, job, ts, inbox = _hardware_failed_lane_job(tmp_path)
    bad = backend.jobs.clusters["kalos"].nodes[job.held[job.culprit][0]]
    acted = ts + 20.0  # Vigil diagnosed and acted 20 s later
    scheduler_commands_send(
        inbox,
        "kalos",
        [["scontrol", "update", f"NodeName={bad}", "State=DRAIN", "Reason=vigil: xid"]],
        ts=acted - 5,
    )
    scheduler_commands_send(
        inbox,
        "kalos",
        [
            # As the Slurm executor writes them (names after `--`).
            ["scontrol", "requeue", "--", job.job_id],
            ["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"],
        ],
        ts=acted,
    )
    before = len(events)
    for k in range(1, 6 * 360):
        events += [
            e
            for _i, t in watcher.poll(ts + 10.0 * k)
            for e in JobEventBatch.model_validate_json(t).events
        ]
    mine = [e for e in events[before:] if e.job_id == job.job_id]
    assert [e.kind for e in mine[:2]] == ["requeued", "started"]
    requeued, started = mine[:2]
    assert requeued.ts >= acted
    assert 0 < started.ts - requeued.ts <= 60  # a short queue time, not a new submission
    nodes = {g.node for g in started.allocation}
    assert len(nodes) == 14 and sum(len(g.gpu_indices) for g in started.allocation) == 112
    assert bad not in nodes
    # Nothing starts on the drained node afterwards, and no second pretraining run is
    # submitted while the requeued one runs.
    later = [e for e in events[before:] if e.kind == "started"]
    assert all(bad not in {g.node for g in e.allocation} for e in later)
    end = next((e.ts for e in mine if e.kind == "ended"), events[-1].ts)
    rivals = [
        e for e in events[before:]
        if e.kind == "submitted" and e.job_type == "pretrain" and e.ts < end
    ]  # fmt: skip
    assert rivals == []


def test_pool_jobs_a_requeued_run_displaces_are_requeued_and_run_again(tmp_path):
    """The requeued run borrows a pool node for the drained one (Slurm's QOS preemption with
    PreemptMode=REQUEUE): the pool jobs on it are requeued, not lost, and start again."""
    # A seed whose run fails while both of Kalos's pool nodes hold jobs.
    backend, watcher, events, job, ts, inbox = _hardware_failed_lane_job(tmp_path, seed=7)
    c = backend.jobs.clusters["kalos"]
    assert all(len(c.free[n]) < c.gpn for n in c.pool_nodes)
    bad = c.nodes[job.held[job.culprit][0]]
    pool_jobs = {j.job_id for (n, _g), (j, _r) in c.owner.items() if n in c.pool_nodes}
    scheduler_commands_send(
        inbox,
        "kalos",
        [
            ["scontrol", "update", f"NodeName={bad}", "State=DRAIN", "Reason=vigil: xid"],
            ["scontrol", "requeue", job.job_id],
        ],
        ts=ts,
    )
    before = len(events)
    for k in range(1, 24 * 360):
        events += [
            e
            for _i, t in watcher.poll(ts + 10.0 * k)
            for e in JobEventBatch.model_validate_json(t).events
        ]
    again = next(e.ts for e in events[before:] if e.kind == "requeued" and e.job_id == job.job_id)
    displaced = {e.job_id for e in events[before:] if e.kind == "requeued" and e.ts == again} - {
        job.job_id
    }
    assert displaced and displaced <= pool_jobs
    for job_id in displaced:
        kinds = [e.kind for e in events[before:] if e.job_id == job_id]
        assert kinds[:2] == ["requeued", "started"], (job_id, kinds)


def test_a_running_job_requeued_frees_its_gpus_and_starts_again(tmp_path):
    inbox = tmp_path / "inbox"
    backend = SimulatedBackend(["seren"], 16, 8, seed=3, scheduler_inbox=inbox)
    watcher = backend.jobs.watcher(lambda c, n: f"token-of-{n}")
    watcher.poll(T0)
    c = backend.jobs.clusters["seren"]
    job = next(j for j, _r in c.owner.values() if j.lane)
    old_end = job.end_ts
    scheduler_commands_send(inbox, "seren", [["scontrol", "requeue", job.job_id]], ts=T0 + 5)
    events = [
        e
        for k in range(1, 30)
        for _i, t in watcher.poll(T0 + 10.0 * k)
        for e in JobEventBatch.model_validate_json(t).events
        if e.job_id == job.job_id
    ]
    assert [e.kind for e in events[:2]] == ["requeued", "started"]
    assert events[0].ts == pytest.approx(T0 + 5)
    assert job.end_ts != old_end  # a new run, with its own end
    assert not [e for e in events if e.kind == "ended" and e.ts == old_end]


def test_commands_the_simulator_cannot_carry_out_are_logged_and_dropped(tmp_path, caplog):
    inbox = tmp_path / "inbox"
    backend = SimulatedBackend(["seren"], 2, 8, seed=3, scheduler_inbox=inbox)
    watcher = backend.jobs.watcher(lambda c, n: f"token-of-{n}")
    watcher.poll(T0)
    scheduler_commands_send(inbox, "seren", [["scontrol", "requeue", "42"]], ts=T0)
    scheduler_commands_send(inbox, "nowhere", [["scontrol", "requeue", "42"]], ts=T0)
    (inbox / "0-broken.json").write_text("{not json")
    with caplog.at_level("WARNING", logger="vigil.collector"):
        batches = watcher.poll(T0 + 10)
    text = caplog.text
    assert "job 42 is not known to cluster seren" in text
    assert "'nowhere'" in text
    assert "0-broken.json skipped" in text
    assert not any('"requeued"' in t for _i, t in batches)
    assert list(inbox.iterdir()) == []  # each taken once


def test_the_inbox_is_found_through_the_environment(tmp_path, monkeypatch):
    """The demo names the inbox in the environment of its collector and its worker."""
    monkeypatch.setenv(INBOX_ENV, str(tmp_path / "inbox"))
    backend = SimulatedBackend(["seren"], 2, 8, seed=3)
    assert backend.jobs.inbox is not None and backend.jobs.inbox.path == tmp_path / "inbox"


def test_the_simulated_scheduler_understands_every_command_the_demo_s_executor_builds(tmp_path):
    """The contract with Vigil's recovery: each kind of action the demo's simulated executor
    carries out is built into command lines the simulated scheduler accepts, and the drain
    and requeue among them take effect."""
    from webapp.recovery.executors import Target, executor_for

    backend = SimulatedBackend(["seren"], 16, 8, seed=3)
    backend.jobs.advance(T0)
    c = backend.jobs.clusters["seren"]
    running = list({id(j): j for j, _r in c.owner.values() if not j.lane}.values())
    job, other = running[:2]
    host = c.nodes[job.held[0][0]]
    executor = executor_for("simulated")
    targets = [
        Target(1, "drain", host=host, cause="gpu_off_bus", failure_id=7),
        Target(2, "requeue", job=job.job_id, cause="gpu_off_bus", failure_id=7),
        Target(3, "health_check", params={"hosts": [host], "reservation": "vigil-check-3"}),
        Target(4, "resume", host=host, params={"reservation": "vigil-check-3"}),
        Target(5, "resume", host=host),
        Target(6, "resubmit", job=other.job_id, params={"resume_checkpoint": "previous"}),
    ]
    answers: dict[str, list[str]] = {}
    for target in targets:
        for argv in executor.commands(target):
            answers.setdefault(target.kind, []).append(c.command(argv, T0 + target.action_id))
        if target.kind == "drain":
            assert c.nodes.index(host) in c.drained
    assert f"job {job.job_id} requeued" in answers["requeue"]
    assert f"job {other.job_id} requeued" in answers["resubmit"]
    assert c.nodes.index(host) not in c.drained  # resumed
    assert job.attempt == other.attempt == 1


def test_a_drained_node_reports_draining_while_its_job_runs_then_drained_then_up(tmp_path):
    """As Slurm's watcher reports it: a node drained under a running job is draining (with the
    drain's reason), drained once the job has left it (requeued here), up once resumed."""
    inbox = tmp_path / "inbox"
    backend = SimulatedBackend(["seren"], 16, 8, seed=3, scheduler_inbox=inbox)
    watcher = backend.jobs.watcher(lambda c, n: "token-of-the-seren-nodes")
    watcher.poll(T0)
    c = backend.jobs.clusters["seren"]
    job = next(j for j, _r in c.owner.values() if j.lane)
    host = c.nodes[job.held[0][0]]
    reason = "vigil: gpu_nvlink failure 7"

    def states_after(ts: float, command: list[str]) -> list[tuple]:
        scheduler_commands_send(inbox, "seren", [command], ts=ts - 5)
        batches = [JobEventBatch.model_validate_json(t) for _i, t in watcher.poll(ts)]
        return [(s.node, s.state, s.reason, s.since) for b in batches for s in b.node_states]

    drain = ["scontrol", "update", f"NodeName={host}", "State=DRAIN", f"Reason={reason}"]
    assert states_after(T0 + 10, drain) == [(host, "draining", reason, T0 + 5)]
    requeue = ["scontrol", "requeue", job.job_id]
    assert states_after(T0 + 20, requeue) == [(host, "drained", reason, T0 + 15)]
    resume = ["scontrol", "update", f"NodeName={host}", "State=RESUME"]
    assert states_after(T0 + 30, resume) == [(host, "up", "", T0 + 25)]
    assert states_after(T0 + 40, ["scontrol", "update", "JobId=1", "StartTime=now"]) == []


# --- The demo's first incident comes live ---------------------------------------------------


def _demo_start(seed: int = 1, live_s: float = 240.0):
    """The demo's collector as `make demo` starts it (both clusters, seed 1, an hour of
    history 30 s apart, then live rounds 5 s apart): the job events and Xids of the history
    and of the first `live_s` live, and the simulator."""
    from collectors.watchers.nodeevents import NodeEventWatcher

    backend = SimulatedBackend(["sable", "kestrel"], 16, 8, seed=seed)
    sim = backend.jobs
    token = "token-of-the-demo-nodes"
    jobs = sim.watcher(lambda c, n: token)
    node_events = NodeEventWatcher([sim.event_source()], lambda c, n: token)
    now = time.time()
    events, xids = [], []
    rounds = [now - 3600 + 30 * k for k in range(120)] + [
        now + 5 * k for k in range(int(live_s / 5))
    ]
    for ts in rounds:
        for _i, text in jobs.poll(ts):
            batch = JobEventBatch.model_validate_json(text)
            events += [(batch.cluster, e) for e in batch.events]
        for _i, text in node_events.poll(ts):
            batch = json.loads(text)
            xids += [(batch["node"], e) for e in batch.get("gpu_events", []) if e["kind"] == "xid"]
    return sim, now, events, xids


def test_the_demo_s_first_incident_comes_live_within_minutes(monkeypatch):
    """`make demo` names a first incident (VIGIL_SIM_FIRST_FAULT_S, 150 s): within minutes of
    the start, live, a GPU of a pretraining run that is working reports an NVLink Xid, so Vigil
    has a live hardware failure to detect, diagnose and act on. Without it the demo's seed
    had none in its first ten minutes live: Acme's pool jobs fail on their own scripts, and
    hardware strikes pretraining runs every few hours."""
    from collectors.backends.simulated import FIRST_FAULT_ENV

    monkeypatch.setenv(FIRST_FAULT_ENV, "150")
    sim, now, events, xids = _demo_start()
    live = [(node, e) for node, e in xids if e["ts"] >= now]
    assert live, "no Xid in the first four minutes live"
    node, xid = live[0]
    assert now + 150 <= xid["ts"] <= now + 155 and xid["xid"] == 74
    # The GPU belongs to the pretraining run working on that node, which is still running (it
    # dies when NCCL's watchdog gives up, ten minutes on, unless it is requeued first).
    cluster = next(c for c in sim.clusters.values() if node in c.nodes)
    held = cluster.holder(cluster.nodes.index(node), xid["gpu_index"], xid["ts"])
    assert held is not None and held[0].lane and held[0].cause == "gpu_nvlink"
    started = [e for _c, e in events if e.kind == "started" and e.job_id == held[0].job_id]
    assert started and started[-1].start_ts < xid["ts"]
    assert not [e for _c, e in events if e.kind == "ended" and e.job_id == held[0].job_id]
    assert held[0].end_ts - xid["ts"] > simfailures.NCCL_TIMEOUT_S


def test_a_first_incident_that_is_not_a_number_of_seconds_is_refused(monkeypatch):
    from collectors.backends.base import BackendError
    from collectors.backends.simulated import FIRST_FAULT_ENV

    for bad in ("soon", "-5", "inf"):
        monkeypatch.setenv(FIRST_FAULT_ENV, bad)
        with pytest.raises(BackendError, match=f"{FIRST_FAULT_ENV}='{bad}': must be a number"):
            SimulatedBackend(["seren"], 2, 8, seed=3)


def test_a_run_requeued_after_the_first_incident_loads_its_checkpoint_then_trains_again(tmp_path):
    """The demo's story read from the telemetry: the first incident's Xid, the culprit node
    drained and the run requeued; its new run's GPUs sit idle while it loads its checkpoint
    and then work again, as its first run did, on every GPU of the new allocation."""
    inbox = tmp_path / "inbox"
    backend = SimulatedBackend(["sable"], 16, 8, seed=1, scheduler_inbox=inbox)
    backend.jobs.event_source()  # the demo's node-event watcher takes the Xid
    c = backend.jobs.clusters["sable"]
    ts = T0
    backend.read(ts)
    run = c.fault_now(ts + 600, "gpu_nvlink")
    assert run is not None
    bad = c.nodes[run.held[run.culprit][0]]
    scheduler_commands_send(
        inbox,
        "sable",
        [
            ["scontrol", "update", f"NodeName={bad}", "State=DRAIN", "Reason=vigil: xid"],
            ["scontrol", "requeue", "--", run.job_id],
        ],
        ts=ts + 610,
    )

    def util_of_run(readings) -> list[float]:
        held = {(c.nodes[n], g) for n, g in run.held}
        return [
            row[GPU_POS["gpu_util"]]
            for r in readings
            for row in r.gpu_rows
            if (r.node, row[0]) in held
        ]

    for k in range(1, 62):
        backend.read(ts + 10.0 * k)
    assert run.attempt == 1 and run.began_ts is not None  # running again
    assert bad not in {c.nodes[n] for n, _g in run.held}
    began = run.began_ts
    loading = util_of_run(backend.read(began + 60))
    assert len(loading) == 64 and max(loading) == 0  # loading its checkpoint
    # Within six minutes of its start every GPU of the new run works, and goes on working
    # (no checkpoint is due in its first 30 minutes).
    for k in range(1, 1 + 12 * 6):
        backend.read(began + 60 + 5.0 * k)
    working = [util_of_run(backend.read(began + 360 + 60.0 * k)) for k in range(20)]
    assert all(len(u) == 64 and min(u) > 0 for u in working)
