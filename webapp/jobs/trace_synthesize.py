"""Synthetic AcmeTrace job traces, for tests and benchmarks while the real traces are not here.

`synthesize` writes a file with exactly the schema webapp/jobs/acmetrace.py parses and the
paper's workload mix (type shares by count, sizes, heavy-tailed durations, final states;
docs/acme-workload.md).
"""

from __future__ import annotations

import csv
import math
import random
import time
from datetime import datetime
from pathlib import Path

from webapp.jobs.acmetrace import KALOS_HEADER, SEREN_HEADER

# Type shares of GPU jobs by count (docs/acme-workload.md section 2).
_MIX = {
    "seren": {"Eval": 64.9, "Pretrain": 0.9, "SFT": 14.9, "MLLM": 2.9, "Debug": 1.9, "Other": 14.6},
    "kalos": {"Eval": 92.8, "Pretrain": 3.2, "Debug": 2.7, "Other": 1.3},
}
# GPUs per job by type: (sizes, weights). Evaluation usually under 4 GPUs, pretraining often
# over 100 (Seren median about 128, Kalos 256-512), debug varies widely (section 3).
_SIZES = {
    "Eval": ((1, 2, 4, 8), (70, 12, 10, 8)),
    "Pretrain": ((32, 64, 128, 256, 512, 1024), (10, 15, 30, 25, 15, 5)),
    "SFT": ((1, 8, 16, 32, 64), (20, 40, 20, 15, 5)),
    "MLLM": ((8, 16, 32, 64, 128), (30, 25, 20, 15, 10)),
    "Debug": ((1, 2, 4, 8, 16, 64, 256), (35, 10, 15, 20, 10, 7, 3)),
    "Other": ((1, 2, 4, 8, 16), (55, 10, 10, 20, 5)),
}
# Median duration multiplier by type; pretraining runs longest but within about 10x (section 3).
_DURATION_SCALE = {
    "Eval": 0.8,
    "Pretrain": 8.0,
    "SFT": 2.0,
    "MLLM": 3.0,
    "Debug": 1.0,
    "Other": 1.0,
}
# Final states of GPU jobs by count (section 4; PREEMPTED about 9.7% of Seren GPU jobs, TIMEOUT
# and NODE_FAIL rare, 3 RUNNING jobs in Kalos).
_STATES = {
    "seren": (
        ("COMPLETED", "CANCELLED", "FAILED", "PREEMPTED", "TIMEOUT", "NODE_FAIL"),
        (45.0, 6.0, 38.0, 9.0, 1.5, 0.5),
    ),
    "kalos": (
        ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "RUNNING"),
        (54.1, 6.2, 38.7, 0.6, 0.39, 0.01),
    ),
}
_CPU_JOB_SHARE = {"seren": 0.35, "kalos": 0.68}  # CPU jobs among all jobs (section 1)
_OFFSET = {"seren": ("+08:00", 8 * 3600), "kalos": ("+00:00", 0)}
_START = {"seren": "2023-03-01 00:00:00+08:00", "kalos": "2023-05-01 00:00:00+00:00"}
# About 5,600 jobs a day in Seren (3,600 GPU + 2,000 CPU); Kalos far fewer.
_JOBS_PER_DAY = {"seren": 5600, "kalos": 400}
# Durations: lognormal with median 122 s and mean/median about 11.6 (Seren: 122 / 1,414 s)
# -> sigma = sqrt(2 ln 11.6) = 2.2; capped at the trace's longest job, 14 days.
_DURATION_MEDIAN_S, _DURATION_SIGMA, _DURATION_MAX_S = 122.0, 2.2, 1_209_604


def synthesize(path: str | Path, rows: int, seed: int = 0, cluster_flavour: str = "seren") -> Path:
    """Write `rows` jobs in the AcmeTrace schema of `cluster_flavour` (seren or kalos)."""
    if cluster_flavour not in _MIX:
        raise ValueError(f"cluster_flavour: expected seren or kalos, got {cluster_flavour!r}")
    rng = random.Random(seed)
    kalos = cluster_flavour == "kalos"
    mix_types, mix_weights = zip(*_MIX[cluster_flavour].items(), strict=True)
    state_names, state_weights = _STATES[cluster_flavour]
    suffix, offset_s = _OFFSET[cluster_flavour]
    hour_prefix: dict[int, str] = {}

    def stamp(epoch: int) -> str:
        local = epoch + offset_s
        hour = local // 3600
        prefix = hour_prefix.get(hour)
        if prefix is None:
            prefix = hour_prefix[hour] = time.strftime("%Y-%m-%d %H", time.gmtime(hour * 3600))
        rest = local - hour * 3600
        return f"{prefix}:{rest // 60:02d}:{rest % 60:02d}{suffix}"

    # Draw the categorical columns in bulk (much faster than one choices() call per row).
    types = rng.choices(mix_types, mix_weights, k=rows)
    states = rng.choices(state_names, state_weights, k=rows)
    cpu_job = [rng.random() < _CPU_JOB_SHARE[cluster_flavour] for _ in range(rows)]
    sizes = {t: rng.choices(*_SIZES[t], k=rows) for t in mix_types}
    mean_gap_s = 86400 / _JOBS_PER_DAY[cluster_flavour]
    t = int(datetime.fromisoformat(_START[cluster_flavour]).timestamp())
    mu = math.log(_DURATION_MEDIAN_S)
    kalos_chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    path = Path(path)
    with path.open("w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(KALOS_HEADER if kalos else SEREN_HEADER)
        for i in range(rows):
            t += int(rng.expovariate(1 / mean_gap_s))
            job_type, state = types[i], states[i]
            if cpu_job[i]:
                gpus, nodes, cpus = 0, 1, rng.choice((4, 8, 16, 32, 64))
                duration = int(min(rng.lognormvariate(math.log(14), 1.5), _DURATION_MAX_S))
            else:
                gpus = sizes[job_type][i]
                nodes, cpus = -(-gpus // 8), 16 * gpus  # 8 GPUs and 128 CPUs per node
                duration = int(
                    min(
                        rng.lognormvariate(mu, _DURATION_SIGMA) * _DURATION_SCALE[job_type],
                        _DURATION_MAX_S,
                    )
                )
            # Queueing: most jobs start within a second; evaluation waits longest (section 3).
            waits = rng.random() < (0.53 if job_type == "Eval" else 0.3)
            queue = int(rng.lognormvariate(math.log(60), 2.5)) if waits else rng.randint(0, 1)
            submit, start = t, t + queue
            end = start + duration
            job_id = (
                "dlc" + "".join(rng.choices(kalos_chars, k=13)) if kalos else str(5_000_000 + i)
            )
            user = f"u{rng.randint(1, 9999):04d}" if not kalos else f"u{rng.randint(0, 4095):03x}"
            end_text = "" if state == "RUNNING" else stamp(end)
            common = [job_id, user, nodes, gpus, cpus]
            times = [stamp(submit), stamp(start), end_text]
            if kalos:
                # The public Kalos file counts duration from submission (its example row:
                # queue 10 s, end - start 8 s, duration 18 s).
                duration_text = "" if state == "RUNNING" else str(end - submit)
                gpu_time = "" if state == "RUNNING" else f"{(end - submit) * gpus:.1f}"
                out.writerow(
                    [
                        *common,
                        rng.choice((100, 500, 1000)) if gpus else 50,
                        rng.choice((10.0, 100.0)),
                        job_type,
                        state,
                        *times,
                        end_text if state == "FAILED" else "",
                        end_text if state == "CANCELLED" else "",
                        duration_text,
                        f"{float(queue):.1f}",
                        gpu_time,
                    ]
                )
            else:
                out.writerow(
                    [*common, job_type, state, *times, duration, queue, f"{duration * gpus:.1f}"]
                )
    return path
