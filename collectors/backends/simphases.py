"""How the GPUs of one simulated job move together: a pure function of (job, time).

A data-parallel job's ranks run the same steps and meet at every collective, so its GPUs go
through the same compute-heavy and communication-heavy stretches and the same checkpoint
stalls, each with a little jitter of its own (collectors/backends/simulated.py adds the
jitter). Nothing here keeps state: the level of a job at a time is drawn from a hash of the
job's key and the time, so every node agent that simulates one of the job's nodes, in this
process or another, and every restart, computes the same phases for it.

A straggler is the injected exception (docs/failure-signatures.md section 8): one GPU of a
multi-node job runs at reduced clocks from some point of the run to its end, as a GPU in
hardware slowdown does, while its peers keep their pace; webapp/failures/stragglers.py should
find it and only it.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

# Two scales of a job's activity (our assumption; Acme publishes no per-job time series):
# minutes-long stretches (a data shard of longer sequences, an evaluation pass, pipeline
# rebalancing) and a faster wobble of about a minute (gradient accumulation, logging steps).
# The weights' squares sum to 1, so the level stays N(0, 1) at every instant.
SLOW_S, SLOW_WEIGHT = 600.0, 0.8
FAST_S, FAST_WEIGHT = 60.0, 0.6

# Share of multi-node job runs that get a straggler (our assumption: the OSDI'25 study in
# docs/failure-signatures.md section 8 finds 42.5% of jobs straggling for any reason; one slow GPU
# is one of several reasons, so we inject fewer).
STRAGGLER_SHARE = 0.25
# NVML's HwSlowdown reason "reduces the core clocks by a factor of 2 or more" (nvml.h,
# nvmlClocksEventReasonHwSlowdown): the straggler runs at half clock. Power falls less than
# the clock, because static and memory power stay (our assumption: 0.6 of its peers').
STRAGGLER_CLOCK_RATIO = 0.5
STRAGGLER_POWER_RATIO = 0.6
HW_SLOWDOWN_REASON = 0x8  # clocks_event_reasons bit (docs/telemetry.md section 2)
# The slowdown begins somewhere in the first part of the run and lasts to its end (a
# fail-slow GPU stays slow until someone cordons it).
STRAGGLER_ONSET = (0.1, 0.5)

_MASK = 2**64 - 1


# The demo's clusters are named apart from the paper's (a page showing "kalos" beside the
# paper's Kalos reads as the paper's cluster): each simulates the workload of its twin.
PAPER_TWIN = {"sable": "seren", "kestrel": "kalos"}


def paper_twin(cluster: str) -> str:
    """The paper cluster whose workload and calibration `cluster` simulates (seren by default;
    a paper name stands for itself)."""
    name = cluster.lower()
    return PAPER_TWIN.get(name, name)


def job_key(cluster: str, job_id: str) -> int:
    """The 64-bit key a job's phases are drawn from (job ids repeat across clusters; a demo
    cluster draws its twin's, so it runs the twin's workload exactly)."""
    digest = hashlib.blake2b(f"{paper_twin(cluster)}/{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _splitmix(x: int) -> int:
    """SplitMix64's finalizer (Steele, Lea and Flood, OOPSLA 2014): a well-mixed 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _gauss(key: int, knot: int) -> float:
    """A standard normal value for (key, knot), by Box-Muller from two hashed uniforms."""
    h1 = _splitmix(key ^ (knot & _MASK))
    h2 = _splitmix(h1)
    u1 = ((h1 >> 11) + 1) / 2.0**53  # in (0, 1]: log(u1) is finite
    u2 = (h2 >> 11) / 2.0**53
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def _noise(key: int, ts: float, scale_s: float) -> float:
    """Value noise: N(0, 1) knots every `scale_s`, blended with a smoothstep and rescaled so
    that the blend is N(0, 1) too (the variance of w0 z0 + w1 z1 is w0^2 + w1^2)."""
    x = ts / scale_s
    k = math.floor(x)
    f = x - k
    w = f * f * (3.0 - 2.0 * f)
    z0, z1 = _gauss(key, k), _gauss(key, k + 1)
    return ((1.0 - w) * z0 + w * z1) / math.sqrt((1.0 - w) ** 2 + w * w)


def job_level(key: int, ts: float) -> float:
    """The job's activity latent at `ts`: N(0, 1) at every instant, smooth over minutes, the
    same for every GPU of the job and in every process."""
    slow = _noise(key, ts, SLOW_S)
    fast = _noise(key ^ 0x5DEECE66D, ts, FAST_S)
    return SLOW_WEIGHT * slow + FAST_WEIGHT * fast


@dataclass(frozen=True)
class Straggler:
    """One slow GPU of a job: its rank (position in the job's GPUs) and when it slows down."""

    rank: int
    onset_ts: float


def straggler_plan(key: int, gpus: int, start_ts: float, duration_s: float) -> Straggler | None:
    """The straggler of a multi-node job run, or None; drawn from the job's key alone."""
    rng = random.Random(key ^ 0x57A661E5)
    if rng.random() >= STRAGGLER_SHARE:
        return None
    rank = rng.randrange(gpus)
    onset = start_ts + rng.uniform(*STRAGGLER_ONSET) * duration_s
    return Straggler(rank=rank, onset_ts=onset)
