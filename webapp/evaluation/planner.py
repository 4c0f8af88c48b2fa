"""Evaluation plans: the coupled baseline and the paper's decoupled plan, with predictions.

Plain functions over plain data (no Django). A plan is a list of jobs with their node, GPU,
predicted start and end, phases, datasets and dependencies; the executor submits exactly
these jobs, and the page draws them as a Gantt chart.

What the model assumes (docs/acme-workload.md §6 and §9):
- Baseline: one coupled job per dataset, submitted in the request's order; each holds one GPU
  while it loads the model (its estimate's `load_s`, measured with a node's GPUs all loading
  at once and so sharing the node NIC), infers and computes metrics. The scheduler starts
  each job on the first GPU that frees (first come, first served, as Slurm does).
- Decoupled: one loader job per node copies the checkpoint from remote storage into
  node-local shared memory at the node NIC's full speed; GPU jobs then read it over PCIe and
  only infer; a CPU job per trial computes its metrics after its inference, on the node's
  spare CPUs (16 per GPU in Acme, §1: they never wait for a CPU here).
- The NIC is shared: per-trial loading speed falls from 1 to 8 concurrent trials per node and
  stays flat after (§6), so a coupled load_s is min(8, GPUs per node) times one copy alone.
  Given the model size instead, one copy takes size / NIC.
- Trials: datasets whose inference is shorter than MERGE_BELOW_OVERHEADS job overheads are
  merged into one trial (one start, one model read); datasets whose inference or metrics
  take longer than half a GPU's fair share of the work are split into equal shards. Metrics
  split with their samples.
- Trials are placed longest first (inference plus metrics, so long-metric trials start early
  and their CPU tail overlaps) on the GPU that frees first: longest-processing-time list
  scheduling, which Slurm reproduces when the jobs are submitted in this order.
- The scheduler's own latency: a job starts `dispatch_s` after it is submitted or its GPU
  freed, and `dependency_s` after the job it waits for ended (Slurm resolves dependencies
  in its own pass). Both are learned per cluster from past runs; before any, 1 s each
  (Seren's median queueing delay, §3).
- Preprocessing is counted in inference; metric jobs of split shards need no merge step.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from webapp.evaluation.estimates import Estimate

# Node NIC loading checkpoints: about 25 Gb/s (docs/acme-workload.md §1).
NIC_GBPS = 25.0
# Host to GPU over PCIe 4.0 x16 (A100-SXM's host link): 31.5 GB/s per direction (PCI-SIG).
PCIE_GB_S = 31.5
# The NIC share stops falling past 8 concurrent trials per node (§6).
NIC_SHARERS_MAX = 8
# Seren's median queueing delay, 1 s (§3): a job starts this long after it may.
DISPATCH_S = 1.0
# A trial shorter than this many job overheads (dispatch + model read) is merged with others.
MERGE_BELOW_OVERHEADS = 2.0
# Shards are at most this fraction of a GPU's fair share of the work (LPT then stays close to
# the fair share: its makespan exceeds it by at most the largest item).
SHARD_OF_FAIR_SHARE = 0.5

PHASES = ("load", "infer", "metrics", "idle")


class PlanError(ValueError):
    """A request the planner cannot plan (no datasets, a dataset twice, no GPUs)."""


@dataclass(frozen=True)
class Hardware:
    nodes: int
    gpus_per_node: int
    model_size_gb: float | None = None
    nic_gbps: float = NIC_GBPS
    pcie_gb_s: float = PCIE_GB_S
    dispatch_s: float = DISPATCH_S
    dependency_s: float = DISPATCH_S

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class PlannedJob:
    key: str
    kind: str  # "coupled" | "load" | "infer" | "metrics"
    node: int
    gpu: int | None  # GPU index on its node; None for CPU jobs
    start_s: float
    end_s: float
    phases: dict[str, float]  # seconds of each phase the job runs (load, infer, metrics)
    datasets: list[tuple[str, int, int]]  # (dataset, shard, shards): shard 1 of 1 is whole
    depends_on: list[str] = field(default_factory=list)

    @property
    def trial(self) -> str:
        return "+".join(
            name if shards == 1 else f"{name}[{shard}/{shards}]"
            for name, shard, shards in self.datasets
        )

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "kind": self.kind,
            "node": self.node,
            "gpu": self.gpu,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "datasets": [list(d) for d in self.datasets],
            "depends_on": self.depends_on,
        }


@dataclass
class Plan:
    kind: str  # "baseline" | "decoupled"
    hardware: Hardware
    jobs: list[PlannedJob]

    @property
    def makespan_s(self) -> float:
        return max((j.end_s for j in self.jobs), default=0.0)

    def gpu_time_s(self) -> dict[str, float]:
        """GPU-seconds by phase over the makespan: loading, inference, metrics (a GPU held
        while metrics run) and idle (no job holds the GPU: waiting, dispatch, the tail)."""
        out = {p: 0.0 for p in PHASES}
        for job in self.jobs:
            if job.gpu is None:
                continue
            for phase, seconds in job.phases.items():
                out[phase] += seconds
        held = out["load"] + out["infer"] + out["metrics"]
        out["idle"] = max(0.0, self.hardware.gpus * self.makespan_s - held)
        return out

    def summary(self) -> dict:
        gpu = self.gpu_time_s()
        total = sum(gpu.values()) or 1.0
        return {
            "makespan_s": round(self.makespan_s, 3),
            # The GPU sat allocated or free but did not infer: the paper's waste.
            "gpu_idle_s": round(total - gpu["infer"], 3),
            "gpu_time_s": {k: round(v, 3) for k, v in gpu.items()},
            "gpu_share": {k: round(v / total, 4) for k, v in gpu.items()},
            "jobs": len(self.jobs),
            "gpu_jobs": sum(1 for j in self.jobs if j.gpu is not None),
        }

    def as_dict(self) -> dict:
        return {"kind": self.kind, **self.summary(), "plan": [j.as_dict() for j in self.jobs]}


def check(estimates: Sequence[Estimate], hardware: Hardware) -> None:
    """Refuse what cannot be planned, naming the problem."""
    if not estimates:
        raise PlanError("datasets: none given")
    seen: set[str] = set()
    for e in estimates:
        if e.dataset in seen:
            raise PlanError(f"datasets: {e.dataset!r} is listed twice")
        seen.add(e.dataset)
        if min(e.load_s, e.infer_s, e.metrics_s) < 0 or not math.isfinite(e.total_s):
            raise PlanError(f"datasets: {e.dataset!r} has a negative or infinite estimate")
    if hardware.nodes < 1 or hardware.gpus_per_node < 1:
        raise PlanError("nodes and GPUs per node must be at least 1")
    if hardware.model_size_gb is not None and not hardware.model_size_gb > 0:
        raise PlanError("model size must be more than 0 GB")


def _copy_s(hardware: Hardware, estimates: Sequence[Estimate]) -> tuple[float, float]:
    """(one copy of the checkpoint over the NIC alone, one read from shared memory over PCIe)."""
    nic_gb_s = hardware.nic_gbps / 8
    if hardware.model_size_gb is not None:
        size_gb = hardware.model_size_gb
    else:
        # The measured coupled load was NIC-bound with the node's GPUs sharing the NIC.
        sharers = min(NIC_SHARERS_MAX, hardware.gpus_per_node)
        size_gb = max(e.load_s for e in estimates) / sharers * nic_gb_s
    return size_gb / nic_gb_s, size_gb / hardware.pcie_gb_s


def coupled_load_s(hardware: Hardware, estimate: Estimate) -> float:
    """A coupled trial's load: its estimate, or from the model size with the NIC shared."""
    if hardware.model_size_gb is None:
        return estimate.load_s
    copy_s, read_s = _copy_s(hardware, [estimate])
    return min(NIC_SHARERS_MAX, hardware.gpus_per_node) * copy_s + read_s


class _Gpus:
    """GPUs by the time they free: the earliest first, ties by node then index."""

    def __init__(self, hardware: Hardware, ready_at: Sequence[float]) -> None:
        self.heap = [
            (ready_at[n], n, g)
            for n in range(hardware.nodes)
            for g in range(hardware.gpus_per_node)
        ]
        heapq.heapify(self.heap)

    def take(self) -> tuple[float, int, int]:
        return heapq.heappop(self.heap)

    def free(self, at: float, node: int, gpu: int) -> None:
        heapq.heappush(self.heap, (at, node, gpu))


def baseline_plan(estimates: Sequence[Estimate], hardware: Hardware) -> Plan:
    """One coupled job per dataset, in the request's order, on the first GPU that frees."""
    check(estimates, hardware)
    gpus = _Gpus(hardware, [0.0] * hardware.nodes)
    jobs = []
    for i, e in enumerate(estimates):
        free_at, node, gpu = gpus.take()
        start = free_at + hardware.dispatch_s
        phases = {"load": coupled_load_s(hardware, e), "infer": e.infer_s, "metrics": e.metrics_s}
        end = start + sum(phases.values())
        jobs.append(
            PlannedJob(
                f"coupled-{i}", "coupled", node, gpu, start, end, phases, [(e.dataset, 1, 1)]
            )
        )
        gpus.free(end, node, gpu)
    return Plan("baseline", hardware, jobs)


@dataclass
class _Trial:
    datasets: list[tuple[str, int, int]]
    infer_s: float
    metrics_s: float


def trials_make(
    estimates: Sequence[Estimate], hardware: Hardware, overhead_s: float
) -> list[_Trial]:
    """Merge the small datasets, split the long ones (see the module docstring)."""
    merge_below = MERGE_BELOW_OVERHEADS * overhead_s
    fair_share = (sum(e.infer_s for e in estimates) + len(estimates) * overhead_s) / hardware.gpus
    shard_max = max(SHARD_OF_FAIR_SHARE * fair_share, merge_below)
    trials: list[_Trial] = []
    small: _Trial | None = None
    for e in sorted(estimates, key=lambda e: e.infer_s):
        if e.infer_s < merge_below:
            if small is None or small.infer_s + e.infer_s > merge_below:
                small = _Trial([], 0.0, 0.0)
                trials.append(small)
            small.datasets.append((e.dataset, 1, 1))
            small.infer_s += e.infer_s
            small.metrics_s += e.metrics_s
            continue
        # Long metrics split too: a shard's metrics are its samples' (CPUs are plentiful).
        shards = max(1, math.ceil(max(e.infer_s, e.metrics_s) / shard_max))
        for k in range(1, shards + 1):
            trials.append(
                _Trial([(e.dataset, k, shards)], e.infer_s / shards, e.metrics_s / shards)
            )
    return trials


def decoupled_plan(estimates: Sequence[Estimate], hardware: Hardware) -> Plan:
    """A loader per node, inference-only GPU jobs packed longest first, CPU metric jobs."""
    check(estimates, hardware)
    copy_s, read_s = _copy_s(hardware, estimates)
    d, dep = hardware.dispatch_s, hardware.dependency_s
    jobs: list[PlannedJob] = []
    loaded_at = []
    for n in range(hardware.nodes):
        start = d
        jobs.append(
            PlannedJob(f"load-{n}", "load", n, None, start, start + copy_s, {"load": copy_s}, [])
        )
        loaded_at.append(start + copy_s)
    trials = trials_make(estimates, hardware, d + read_s)
    trials.sort(key=lambda t: (-(t.infer_s + t.metrics_s), t.datasets))
    gpus = _Gpus(hardware, [0.0] * hardware.nodes)
    for i, t in enumerate(trials):
        free_at, node, gpu = gpus.take()
        start = max(free_at + d, loaded_at[node] + dep)
        end = start + read_s + t.infer_s
        infer = PlannedJob(
            f"infer-{i}",
            "infer",
            node,
            gpu,
            start,
            end,
            {"load": read_s, "infer": t.infer_s},
            t.datasets,
            [f"load-{node}"],
        )
        metrics = PlannedJob(
            f"metrics-{i}",
            "metrics",
            node,
            None,
            end + dep,
            end + dep + t.metrics_s,
            {"metrics": t.metrics_s},
            t.datasets,
            [infer.key],
        )
        jobs += [infer, metrics]
        gpus.free(end, node, gpu)
    return Plan("decoupled", hardware, jobs)


def plans_compare(estimates: Sequence[Estimate], hardware: Hardware) -> dict:
    """Both plans, their predictions and the decoupled plan's speedup."""
    base = baseline_plan(estimates, hardware)
    dec = decoupled_plan(estimates, hardware)
    return {
        "datasets": len(estimates),
        "nodes": hardware.nodes,
        "gpus_per_node": hardware.gpus_per_node,
        "model_size_gb": hardware.model_size_gb,
        "dispatch_s": hardware.dispatch_s,
        "dependency_s": hardware.dependency_s,
        "baseline": base.as_dict(),
        "decoupled": dec.as_dict(),
        "speedup": round(base.makespan_s / dec.makespan_s, 4) if dec.makespan_s else None,
    }
