"""What a finished run measured: its makespan, GPU time by phase, and per-dataset phase times
for the estimates. Plain functions over plain data (no Django)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from webapp.evaluation.estimates import Estimate

GPU_KINDS = ("coupled", "infer")


@dataclass
class RanJob:
    key: str
    kind: str
    datasets: list[list]  # [[dataset, shard, shards], ...]
    completed: bool
    start_s: float | None  # epoch seconds (the program's report, else the scheduler's)
    end_s: float | None
    phases: dict[str, list[float]] = field(default_factory=dict)  # phase -> [start, end]
    node: int = 0  # the plan's node index

    def seconds(self, phase: str) -> float:
        span = self.phases.get(phase)
        return span[1] - span[0] if span else 0.0


def makespan_s(jobs: Sequence[RanJob], submitted_s: float) -> float | None:
    """From the first submission to the last job's end (the planner counts from submission)."""
    ends = [j.end_s for j in jobs if j.end_s is not None]
    return max(ends) - submitted_s if ends else None


def gpu_time_s(jobs: Sequence[RanJob], gpus: int, makespan: float) -> dict[str, float]:
    """GPU-seconds by phase, as planner.Plan.gpu_time_s counts them."""
    out = {"load": 0.0, "infer": 0.0, "metrics": 0.0, "idle": 0.0}
    for j in jobs:
        if j.kind in GPU_KINDS:
            for phase in ("load", "infer", "metrics"):
                out[phase] += j.seconds(phase)
    out["idle"] = max(0.0, gpus * makespan - out["load"] - out["infer"] - out["metrics"])
    return out


def measured_estimates(
    jobs: Sequence[RanJob], planned: Mapping[str, Estimate], *, coupled: bool
) -> list[Estimate]:
    """Per dataset, the seconds its whole trial took per phase, from every job that ran part
    of it; a dataset with a job that did not complete (or reported nothing) is left out.
    A merged trial's time is shared by its datasets as the plan expected them to share it.
    Loading is learned from coupled runs only (a decoupled run never loads per trial)."""
    sums: dict[str, dict[str, float]] = {}
    spoiled: set[str] = set()
    for j in jobs:
        names = [d[0] for d in j.datasets]
        if not j.completed or not j.phases:
            spoiled.update(names)
            continue
        # A shard k of n is expected to take 1/n of its dataset.
        weights = {
            d[0]: (planned[d[0]].infer_s if d[0] in planned else 1.0) / max(1, int(d[2]))
            for d in j.datasets
        }
        total = sum(weights.values()) or 1.0
        for n in names:
            share = weights[n] / total if len(names) > 1 else 1.0
            acc = sums.setdefault(n, {"load": 0.0, "infer": 0.0, "metrics": 0.0, "jobs": 0})
            acc["infer"] += j.seconds("infer") * share
            acc["metrics"] += j.seconds("metrics") * share
            if coupled:
                acc["load"] += j.seconds("load")
            acc["jobs"] += 1
    out = []
    for n, acc in sums.items():
        if n in spoiled:
            continue
        old = planned.get(n)
        load = acc["load"] if coupled else (old.load_s if old else 0.0)
        out.append(Estimate(n, load, acc["infer"], acc["metrics"], "learned"))
    return out


def latency_gaps(
    jobs: Sequence[RanJob],
    depends: Mapping[str, Sequence[str]],
    gpus_per_node: int,
    submitted_s: float,
) -> tuple[list[float], list[float]]:
    """The scheduler's latencies this run shows: (seconds from submitted or GPU freed to
    started, seconds from the dependency's end to started). Which GPU freed for a job is
    rebuilt as Slurm hands them out on a node: in submission order, the first to free. A job
    that did not complete, or whose dependencies did not, is left out."""
    by_key = {j.key: j for j in jobs}
    frees: dict[int, list[float]] = {}
    dispatch, dependency = [], []
    for j in jobs:  # in submission order
        ends = [by_key[d].end_s if d in by_key else None for d in depends.get(j.key) or []]
        if not j.completed or j.start_s is None or j.end_s is None or None in ends:
            continue
        freed = submitted_s
        if j.kind in GPU_KINDS:
            running = frees.setdefault(j.node, [])
            if len(running) >= gpus_per_node:
                freed = max(freed, heapq.heappop(running))
            heapq.heappush(running, j.end_s)
        ready = max((e for e in ends if e is not None), default=None)
        if ready is not None and ready >= freed:
            dependency.append(max(0.0, j.start_s - ready))
        else:
            dispatch.append(max(0.0, j.start_s - freed))
    return dispatch, dependency
