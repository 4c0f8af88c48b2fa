"""Simulated failures: causes at Acme's rates, traces the diagnosis engine reads back."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from collectors.backends import simfailures
from collectors.backends.simfleet import JobSimulator
from collectors.backends.simjobs import ClusterJobs
from collectors.backends.simulated import SimulatedBackend
from collectors.schema import parse_job_events, parse_node_events
from collectors.watchers.nodeevents import NodeEventWatcher
from webapp.failures.diagnosis import diagnose_text

TOKEN = "s" * 32


@pytest.mark.parametrize("cause", [c for c, *_ in simfailures.CAUSES])
@pytest.mark.parametrize("nodes", [1, 4])
def test_every_injected_cause_is_what_the_diagnosis_finds(cause, nodes):
    hosts = [f"seren-node-{n:03d}" for n in range(1, nodes + 1) for _ in range(8)]
    for seed in range(5):
        ctx = simfailures.FailureContext(
            "4242", hosts, (seed * 11) % len(hosts), 900, random.Random(seed)
        )
        windows = simfailures.render_windows(cause, ctx, "bo")
        kernel = None
        if cause in simfailures.HARDWARE_XID:
            kernel = simfailures.kernel_xid_line(
                "00000000:17:00.0", simfailures.HARDWARE_XID[cause], 7
            )
        text = "\n".join(line for lines in windows.values() for line in lines)
        assert diagnose_text(text, kernel).cause == cause, text


def run_days(days: float, seed: int = 7):
    """Run the simulator's jobs and failures alone (no telemetry), one round a minute."""
    backend = SimulatedBackend(["seren"], 16, 8, seed=seed)
    causes: dict[str, str] = {}
    plan = ClusterJobs._plan_failure

    def recording(self, job):  # what was injected, to compare with what is diagnosed
        plan(self, job)
        causes[job.job_id] = job.cause

    ClusterJobs._plan_failure = recording
    try:
        sim: JobSimulator = backend.jobs
        jobs_watcher = sim.watcher(lambda c, n: TOKEN)
        events = NodeEventWatcher([sim.event_source()], lambda c, n: TOKEN)
        t0 = 1_750_000_000.0
        job_events, node_batches = [], []
        for k in range(int(days * 1440)):
            ts = t0 + 60 * k
            job_events += [e for _, t in jobs_watcher.poll(ts) for e in parse_job_events(t).events]
            node_batches += [parse_node_events(t) for _, t in events.poll(ts)]
    finally:
        ClusterJobs._plan_failure = plan
    return causes, job_events, node_batches


def test_simulated_failures_leave_windows_and_xids_consistent_with_the_end_event():
    causes, job_events, node_batches = run_days(6.0)
    ended = {e.job_id: e for e in job_events if e.kind == "ended"}
    started = {e.job_id: e for e in job_events if e.kind == "started"}
    failed = {j: e for j, e in ended.items() if e.state == "FAILED"}
    windows: dict[str, list] = {}
    for b in node_batches:
        for w in b.log_windows:
            windows.setdefault(w.job_id, []).append((b.node, w))
    xids = [(b.node, e) for b in node_batches for e in b.gpu_events if e.kind == "xid"]
    assert failed and xids
    # Every window belongs to a job that failed, and every job failed in view has windows.
    assert set(windows) <= set(failed)
    in_view = {j for j in failed if j in causes}
    assert in_view and in_view <= set(windows)
    seen = Counter()
    for job_id in in_view:
        cause, end = causes[job_id], failed[job_id]
        assert end.exit_code == simfailures.EXIT_CODE[cause]
        job_nodes = {a.node for a in started[job_id].allocation} if job_id in started else set()
        nodes_with_windows = {node for node, _ in windows[job_id]}
        kernel = [  # rebuilt as the server does (webapp/failures/evidence.py xid_line)
            f"{node} kernel: NVRM: Xid (PCI:{e.pci_bus_id}): {e.xid}, {e.message}"
            for node, e in xids
            if node in job_nodes and end.end_ts - 900 <= e.ts <= end.end_ts
        ]
        if cause in simfailures.HARDWARE_XID:
            # One GPU faults; the watchdog fires on every node of the job.
            assert len(kernel) >= 1 and nodes_with_windows == job_nodes
        assert len(windows[job_id]) <= max(len(job_nodes), 1)
        text = "\n".join(line for _, w in windows[job_id] for line in w.lines)
        assert diagnose_text(text, "\n".join(kernel) or None).cause == cause
        seen[cause] += 1
    assert seen["user_exception"] > 0 and len(seen) >= 4
    # Modest volume for a demo: a few dozen lines per window.
    sizes = [len(w.lines) for ws in windows.values() for _, w in ws]
    assert max(sizes) < 60


def test_pretraining_failures_are_mostly_infrastructure():
    rng = random.Random(3)
    pre = Counter(simfailures.draw_cause(rng, True) for _ in range(2000))
    pool = Counter(simfailures.draw_cause(rng, False) for _ in range(2000))
    infra = {"gpu_nvlink", "gpu_off_bus", "gpu_ecc", "ib_link", "object_storage", "nccl_timeout"}
    assert sum(pre[c] for c in infra) / 2000 > 0.75
    assert sum(pool[c] for c in simfailures.HARDWARE_XID) == 0
    assert pool["user_exception"] / 2000 > 0.5


def test_failures_do_not_change_the_job_stream_of_a_seed():
    def stream(failures: bool) -> list[tuple]:
        sim = JobSimulator({"seren": [f"n{i}" for i in range(8)]}, 8, seed=4, failures=failures)
        out = []
        for k in range(600):
            sim.advance(1_750_000_000.0 + 60 * k)
            out += [(e.job_id, e.kind, e.ts, e.state) for e in sim.clusters["seren"].take_events()]
        return out

    assert stream(True) == stream(False)
