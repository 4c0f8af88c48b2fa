"""The workload model of the simulated jobs (collectors/backends/simjobs.py runs it): job
types with their sizes, durations and final states, the mix per cluster, users and teams, and
how a job's GPUs work over its life.

Numbers from docs/acme-workload.md (Hu et al., NSDI '24, and AcmeTrace); values marked
"our assumption" have no published source.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from collectors.backends.simphases import Straggler
from collectors.schema import JobGpus


@dataclass(frozen=True)
class TypeModel:
    """One job type: count share, GPUs (value, weight), lognormal duration, final states."""

    name: str
    sizes: tuple[tuple[int, float], ...]
    median_s: float
    sigma: float
    completed: float  # shares by count of the final states (the rest is failed)
    cancelled: float


# Pool types (everything but pretraining), Seren's. A type's share of GPU time over its share
# of jobs fixes its GPU-seconds per job relative to evaluation's (docs/acme-workload.md section 2:
# SFT 4.5x, MLLM 31x, debug 9.4x, other 5.4x); sizes and medians are our fit to that, with
# evaluation under 4 GPUs and a few minutes (section 3: median job 2 min) and failed+cancelled
# about 40-50% (section 4). Sigmas are kept moderate for the heavy types: a few dozen MLLM jobs
# a day with a heavier tail would swing the GPU-time shares by several points from day to day.
POOL_TYPES = (
    TypeModel("eval", ((1, 0.75), (2, 0.1), (4, 0.1), (8, 0.05)), 210.0, 1.4, 0.58, 0.05),
    TypeModel("sft", ((1, 0.2), (2, 0.1), (4, 0.25), (8, 0.4), (16, 0.05)), 330.0, 1.4, 0.45, 0.1),
    TypeModel("mllm", ((8, 0.6), (16, 0.4)), 2010.0, 0.9, 0.45, 0.1),
    TypeModel("debug", ((1, 0.4), (2, 0.1), (4, 0.1), (8, 0.3), (16, 0.1)), 790.0, 1.3, 0.4, 0.2),
    TypeModel("other", ((1, 0.5), (2, 0.1), (4, 0.1), (8, 0.3)), 850.0, 1.1, 0.5, 0.08),
)
# Pretraining runs: hours long; by GPU time Acme's are mostly cancelled (loss spikes, manual
# restarts) or failed midway (infrastructure), rarely completed (section 4: Seren completed
# 21% / cancelled 66% / failed 12% by GPU time, of which the pool's jobs, mostly completed,
# make about a sixth).
PRETRAIN = TypeModel("pretrain", (), 7200.0, 0.8, 0.05, 0.8)

# Per cluster: pool count shares by type (section 2, pretraining left out: it has its lane),
# the share of nodes reserved for pretraining and the load offered to the pool; optionally
# the cluster's own type models. The lane's share of GPU time is about lane GPUs / (lane GPUs
# + pool_load x pool GPUs), and pretraining's share of jobs is lane runs / (runs + pool jobs).
# Seren: 8 of 16 nodes, pool at 0.41: pretraining 69.5% of GPU time and 0.9% of jobs.
# Kalos: pretraining 95.5% of GPU time and 3.2% of jobs, evaluation 92.8% of jobs but 0.4% of
# GPU time: 14 of 16 nodes pretrain in shorter runs (more restarts), and the pool's evaluation
# trials are one-GPU and short while its debug and other jobs are long (GPU-seconds per job
# 137x and 450x evaluation's), on at most one node (a whole-pool job would wait for hours
# behind the trials).
# checkpoint_stall_s: how long a pretraining run's GPUs sit idle after each 30-min checkpoint
# (a synchronous save; section 10: synchronous saves slowed training by up to 43%). Fitted so
# that the share of idle samples lands near Acme's (section 5: Seren 31.4%, Kalos 33.8%):
# Kalos's lane is 14 of 16 nodes, and without stalls its GPUs idle only while loading and
# between runs (17% of samples, KS 0.16 from Acme's utilization); 390 s (22% of a run, within
# the published 43%) brings it to about 32%. Seren's pool already idles enough: 60 s.
CLUSTER_MIX = {
    "seren": {
        "mix": {"eval": 64.9, "sft": 14.9, "mllm": 2.9, "debug": 1.9, "other": 14.6},
        "reserve": 0.5,
        "pool_load": 0.41,
        "checkpoint_stall_s": 60.0,
    },
    "kalos": {
        "mix": {"eval": 92.8, "debug": 2.7, "other": 1.3},
        "reserve": 0.875,
        "pool_load": 0.31,
        "checkpoint_stall_s": 390.0,
        "types": (
            TypeModel("eval", ((1, 1.0),), 95.0, 1.0, 0.58, 0.05),
            TypeModel("debug", ((1, 0.4), (2, 0.1), (4, 0.1), (8, 0.4)), 4700.0, 0.7, 0.4, 0.2),
            TypeModel("other", ((8, 1.0),), 9500.0, 0.6, 0.5, 0.08),
        ),
        # Kalos completed 31% / cancelled 61% / failed 8% of GPU time (section 4).
        "pretrain": TypeModel("pretrain", (), 5400.0, 0.8, 0.30, 0.60),
    },
}
EVAL_BATCH = (4, 24)  # evaluation trials arrive together (one per dataset, section 9)
EVAL_LOAD_SHARE, EVAL_METRIC_SHARE = 0.295, 0.19  # GPU idle while loading / scoring (section 6)
DEBUG_IDLE_SHARE = 0.5  # debug sessions that hold GPUs without using them (our assumption)
OVER_REQUEST_SHARE = 0.1  # jobs that use half the GPUs they hold (our assumption)
PRETRAIN_LOAD_S = 300.0  # checkpoint load before the first step (25 Gb/s NIC, section 1)
PRETRAIN_GAP_S = (60.0, 900.0)  # time to resubmit a pretraining run after the last one
CHECKPOINT_EVERY_S = 1800.0  # 30-min checkpoint interval (section 10)
ITERATION_S = 4.2  # seconds per training step printed in the simulated logs (our assumption)
JOB_LOG_DIR = "/var/log/jobs"  # where the simulated logs "are": /var/log/jobs/<job>/<node>.log
# Simulated silently before the first sample so the fleet starts busy; the jobs in flight at
# that moment are reported as submitted/started then, so a restarted simulator never reports
# GPUs held twice over the same past.
WARMUP_S = 12 * 3600.0
USERS = {
    "pretrain": ("alice", "bo"),
    "eval": ("chen", "dana", "eli"),
    "sft": ("farah", "gus"),
    "mllm": ("hana",),
    "debug": ("ivan", "chen", "farah"),
    "other": ("jin", "kai"),
}
TEAMS = {"alice": "pretrain", "bo": "pretrain", "hana": "multimodal", "jin": "data", "kai": "data"}


@dataclass
class SimJob:
    job_id: str
    job_type: str
    name: str
    user: str
    gpus: int
    duration_s: float
    state: str  # the final state it will reach
    submit_ts: float
    priority: int  # lower starts first
    lane: bool = False
    start_ts: float | None = None
    end_ts: float | None = None
    held: list[tuple[int, int]] = field(default_factory=list)  # (node index, gpu index)
    idle_gpus: int = 0  # the last `idle_gpus` of `held` never work
    idle_all: bool = False
    alloc: list[JobGpus] = field(default_factory=list)
    cause: str | None = None  # of a FAILED job: a cause of docs/failure-taxonomy.md
    culprit: int = 0  # the rank (position in `held`) the failure starts on
    # When the job really started. start_ts is what was reported, clipped to the simulator's
    # first round for the jobs already running then; the phases (loading, checkpoints) follow
    # the real start, so the first round finds jobs mid-run, as the steady state does.
    began_ts: float | None = None
    stall_s: float = 0.0  # GPUs idle after each checkpoint (a synchronous save)
    phase_key: int = 0  # simphases.job_key: the job's lockstep phases are drawn from it
    straggler: Straggler | None = None
    attempt: int = 0  # runs before this one (a requeued job runs again under its id)

    def busy(self, pos: int, ts: float) -> bool:
        """Does the job's `pos`-th GPU work at `ts`? The same answer for every working GPU."""
        if self.idle_all or pos >= len(self.held) - self.idle_gpus or self.began_ts is None:
            return False
        t = ts - self.began_ts
        if self.job_type == "eval":
            full = self.duration_s
            return EVAL_LOAD_SHARE * full <= t < (1 - EVAL_METRIC_SHARE) * full
        if self.job_type == "pretrain":
            if t < min(PRETRAIN_LOAD_S, 0.1 * self.duration_s):
                return False
            return t < CHECKPOINT_EVERY_S or t % CHECKPOINT_EVERY_S >= self.stall_s
        return True

    def slow(self, pos: int, ts: float) -> bool:
        """Is the job's `pos`-th GPU its injected straggler at `ts`?"""
        s = self.straggler
        return s is not None and s.rank == pos and ts >= s.onset_ts


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(sigma * rng.gauss(0.0, 1.0))


def weighted(rng: random.Random, pairs: tuple[tuple[int, float], ...]) -> int:
    return rng.choices([v for v, _ in pairs], weights=[w for _, w in pairs])[0]
