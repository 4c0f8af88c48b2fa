"""The GPUs of one simulated job move together; an injected straggler is the exception that
Vigil's straggler detector finds, and it finds nothing else."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from collectors.backends import simphases
from collectors.backends.base import GPU_POS
from collectors.backends.simulated import SimulatedBackend
from collectors.backends.simworkload import CHECKPOINT_EVERY_S, PRETRAIN_LOAD_S
from webapp.failures.stragglers import STRAGGLER_METRICS, stragglers_find

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_040.0  # on a minute boundary, as the detector's 1-minute rollup is
STEP_S = 15.0  # Acme's sampling interval (acme-workload.md section 1)


def simulate(hours: float, seed: int):
    """Rows of every GPU a multi-GPU job holds, by job: {(cluster, job id): (job, {rank:
    [(ts, row)]})}, for the jobs that use all the GPUs they hold."""
    backend = SimulatedBackend(seed=seed)
    held: dict[tuple[str, str], tuple] = {}
    for k in range(int(hours * 3600 / STEP_S)):
        ts = T0 + k * STEP_S
        for reading in backend.read(ts):
            cluster = backend.jobs.clusters[reading.cluster]
            node = int(reading.node.rsplit("-", 1)[1]) - 1
            for row in reading.gpu_rows:
                owner = cluster.holder(node, row[0], ts)
                if owner is None:
                    continue
                job, rank = owner
                # Jobs that asked for more GPUs than they use leave some idle on purpose (the
                # "wasted GPUs" finding, not a straggler): kept out.
                if len(job.held) < 2 or job.idle_gpus or job.idle_all:
                    continue
                entry = held.setdefault((reading.cluster, job.job_id), (job, defaultdict(list)))
                entry[1][rank].append((ts, row))
    return held


@pytest.fixture(scope="module")
def two_hours_all_stragglers():
    """Two hours of the default fleet in which every multi-node job run gets a straggler."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simphases, "STRAGGLER_SHARE", 1.0)
        return simulate(2.0, seed=1)


def test_the_gpus_of_a_multi_node_job_move_together(two_hours_all_stragglers):
    """On a job's page its lines lie on top of each other: at every round the job's GPUs (on
    every node it spans) are all working or all idle, and within a few percent of each other's
    power, while the job's power itself moves by far more over the run."""
    checked = 0
    for job, ranks in two_hours_all_stragglers.values():
        if len({n for n, _g in job.held}) < 2 or len(ranks[0]) < 40:
            continue  # single-node, or seen for under 10 minutes
        slow = job.straggler.rank if job.straggler else None
        by_ts: dict[float, list[list]] = defaultdict(list)
        for rank, rows in ranks.items():
            if rank != slow:
                for ts, row in rows:
                    by_ts[ts].append(row)
        means, spreads = [], []
        for rows in by_ts.values():
            working = [row[GPU_POS["gpu_util"]] > 0 for row in rows]
            assert all(working) or not any(working)
            powers = [row[GPU_POS["power_w"]] for row in rows]
            means.append(statistics.fmean(powers))
            if all(working):
                spreads.append(statistics.pstdev(powers) / means[-1])
        assert spreads and max(spreads) < 0.12
        assert statistics.pstdev(means) / statistics.fmean(means) > 3 * statistics.fmean(spreads)
        checked += 1
    assert checked >= 3  # pretraining runs on both clusters, and multi-node pool jobs


def test_pretraining_stalls_on_every_gpu_after_a_checkpoint(two_hours_all_stragglers):
    """A synchronous checkpoint save idles the whole pretraining job at once, after each
    30-minute mark of its run, and only then (after the checkpoint load at its start)."""
    stalled_rounds = 0
    for job, ranks in two_hours_all_stragglers.values():
        if job.job_type != "pretrain":
            continue
        for ts, row in ranks[0]:
            t = ts - job.began_ts
            if t < PRETRAIN_LOAD_S:
                continue
            in_stall = t >= CHECKPOINT_EVERY_S and t % CHECKPOINT_EVERY_S < job.stall_s
            assert (row[GPU_POS["gpu_util"]] == 0) == in_stall, (job.job_id, t)
            stalled_rounds += in_stall
    assert stalled_rounds > 0


def test_the_straggler_detector_finds_the_injected_stragglers_and_no_one_else(
    two_hours_all_stragglers,
):
    """webapp/failures/stragglers.py run as the beat runs it (the last 10 whole minutes of
    1-minute means, every minute) over the simulated jobs: every injected straggler whose
    slowdown lasted 10 busy minutes is reported, and no other GPU ever is."""
    injected, expected, found = set(), set(), set()
    for key, (job, ranks) in two_hours_all_stragglers.items():
        if job.straggler is not None:
            injected.add((key, job.straggler.rank))
        series: dict[int, dict] = {}
        for rank, rows in ranks.items():
            minutes: dict[int, list] = defaultdict(list)
            for ts, row in rows:
                minutes[int(ts // 60)].append(row)
            series[rank] = {
                m: {x: statistics.fmean(r[GPU_POS[x]] for r in rs) for x in STRAGGLER_METRICS}
                for m, rs in minutes.items()
                if len(rs) == 60 / STEP_S
            }
        whole = sorted({m for per in series.values() for m in per})
        for i in range(len(whole) - 9):
            window = whole[i : i + 10]
            if window[-1] - window[0] != 9:
                continue
            found |= {(key, rank) for rank in stragglers_find(series, window)}
            s = job.straggler
            slow_throughout = (
                s is not None
                and window[0] * 60 >= s.onset_ts
                and all(job.busy(s.rank, m * 60 + t) for m in window for t in (0, 59))
            )
            if slow_throughout:
                expected.add((key, s.rank))
    assert expected, "no straggler lasted 10 busy minutes: simulate longer"
    assert expected <= found
    assert found <= injected


def test_a_job_s_phases_are_the_same_in_every_process():
    """Each node agent of a multi-node job computes its phases itself: the level of a job at a
    time is a function of the two alone, equal in a process with another hash seed."""
    key = simphases.job_key("kalos", "1700000000123")
    stamps = [T0 + 7.5 * k for k in range(5)]
    here = [simphases.job_level(key, ts) for ts in stamps]
    code = (
        "from collectors.backends import simphases as s\n"
        f"k = s.job_key('kalos', '1700000000123')\n"
        f"print(repr([s.job_level(k, ts) for ts in {stamps!r}]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert eval(out.stdout) == here  # noqa: S307 (our own subprocess's repr of floats)
    assert simphases.job_key("seren", "1700000000123") != key  # ids repeat across clusters


def test_a_job_s_level_is_standard_normal_at_every_instant_and_smooth():
    """The copula needs N(0, 1) at every instant (so the marginals stay Acme's) and the lines
    should move smoothly: over many jobs, mean 0 and variance 1; 15 s apart, close."""
    values = [
        simphases.job_level(simphases.job_key("c", str(j)), T0 + 37.0 * j) for j in range(4000)
    ]
    assert statistics.fmean(values) == pytest.approx(0.0, abs=0.06)
    assert statistics.pstdev(values) == pytest.approx(1.0, abs=0.05)
    steps = [
        abs(simphases.job_level(k, T0 + 15.0) - simphases.job_level(k, T0))
        for k in (simphases.job_key("c", str(j)) for j in range(500))
    ]
    assert statistics.fmean(steps) < 0.35
