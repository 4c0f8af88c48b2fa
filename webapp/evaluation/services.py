"""Writes of the evaluation app people ask for: an evaluation request, checked whole before
anything is stored. Submission and tracking (the worker's side) are in execution.py.

`evaluation_request` refuses, naming the field: no datasets, a dataset listed twice or with a
name that is not a plain identifier, a model path that is not an existing checkpoint under
VIGIL_EVAL_MODEL_ROOTS, more nodes or GPUs per node than the cluster has in service, no
evaluation program configured. A refused request stores nothing; an accepted one stores the
run, both plans' predictions and the executed plan's jobs in one transaction, and sends the
submission to the cluster's scheduler worker after the commit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings
from django.db import transaction

from webapp.evaluation.choices import PlanKind
from webapp.evaluation.models import EvaluationJob, EvaluationRun
from webapp.evaluation.planner import Hardware, PlanError, plans_compare
from webapp.evaluation.selectors import cluster_capacity, estimates_for, latency_for
from webapp.fleet.models import Cluster

DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
MAX_DATASETS = 1000


class EvaluationError(ValueError):
    """A request that cannot be honoured: `field` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def checkpoint_size_gb(path: str) -> tuple[str, float]:
    """(resolved path, size in GB) of a checkpoint file or folder under a model root."""
    if not path.strip():
        raise EvaluationError("model", "no checkpoint path given")
    resolved = os.path.realpath(path)
    roots = [os.path.realpath(r) for r in settings.VIGIL_EVAL_MODEL_ROOTS]
    if not any(os.path.commonpath([resolved, r]) == r for r in roots):
        raise EvaluationError(
            "model", f"{path} is not under a model root ({', '.join(roots) or 'none set'})"
        )
    p = Path(resolved)
    if p.is_file():
        size = p.stat().st_size
    elif p.is_dir():
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    else:
        raise EvaluationError("model", f"no checkpoint at {path}")
    if size == 0:
        raise EvaluationError("model", f"the checkpoint at {path} is empty")
    return resolved, size / 1e9


def datasets_check(datasets: Sequence[str]) -> list[str]:
    names = [d.strip() for d in datasets if d.strip()]
    if not names:
        raise EvaluationError("datasets", "none given")
    if len(names) > MAX_DATASETS:
        raise EvaluationError("datasets", f"{len(names)} given, at most {MAX_DATASETS}")
    seen: set[str] = set()
    for name in names:
        if not DATASET_NAME.match(name):
            raise EvaluationError(
                "datasets", f"{name[:60]!r} is not a dataset name (letters, digits, _ . -)"
            )
        if name in seen:
            raise EvaluationError("datasets", f"{name!r} is listed twice")
        seen.add(name)
    return names


def evaluation_request(
    *,
    cluster_name: str,
    model_path: str,
    datasets: Sequence[str],
    nodes: int,
    gpus_per_node: int,
    plan: str = PlanKind.DECOUPLED,
    model_size_gb: float | None = None,
    user: str = "",
    submit: bool = True,
) -> EvaluationRun:
    """Check and store an evaluation request, then have the cluster's worker submit it.

    `submit=False` stores the plans only (status planned, nothing sent to the scheduler): for a
    site with no Slurm to run them, such as the demo, which still shows what the plans predict.
    """
    cluster = Cluster.objects.filter(name=cluster_name).first()
    if cluster is None:
        raise EvaluationError("cluster", f"no cluster {cluster_name!r}")
    if plan not in PlanKind.values:
        raise EvaluationError("plan", f"{plan!r} is not one of {', '.join(PlanKind.values)}")
    names = datasets_check(datasets)
    path, measured_gb = checkpoint_size_gb(model_path)
    if model_size_gb is not None and not model_size_gb > 0:
        raise EvaluationError("model_size_gb", "must be more than 0")
    if nodes < 1 or gpus_per_node < 1:
        raise EvaluationError("nodes", "nodes and GPUs per node must be at least 1")
    capacity = cluster_capacity(cluster.pk)
    fit = [n for n in capacity if n.gpus >= gpus_per_node]
    if nodes > len(fit):
        total = sum(n.gpus for n in capacity)
        raise EvaluationError(
            "nodes",
            f"{nodes} nodes x {gpus_per_node} GPUs asked; cluster {cluster.name} has "
            f"{len(fit)} nodes in service with {gpus_per_node} or more GPUs ({total} GPUs in all)",
        )
    if submit and not settings.VIGIL_EVAL_PROGRAM:
        raise EvaluationError("program", "VIGIL_EVAL_PROGRAM is not set: nothing to run")
    estimates = estimates_for(names)
    dispatch_s, dependency_s = latency_for(cluster.pk)
    hardware = Hardware(
        nodes, gpus_per_node, model_size_gb, dispatch_s=dispatch_s, dependency_s=dependency_s
    )
    try:
        prediction = plans_compare(estimates, hardware)
    except PlanError as exc:
        raise EvaluationError("datasets", str(exc)) from None
    prediction["estimates"] = [
        {
            "dataset": e.dataset,
            "load_s": e.load_s,
            "infer_s": e.infer_s,
            "metrics_s": e.metrics_s,
            "source": e.source,
        }
        for e in estimates
    ]
    executed = prediction[plan]
    with transaction.atomic():
        run = EvaluationRun.objects.create(
            cluster=cluster,
            model_path=path,
            model_size_gb=model_size_gb or measured_gb,
            datasets=names,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            plan=plan,
            requested_by=user[:150],
            prediction=prediction,
            predicted_makespan_s=executed["makespan_s"],
        )
        EvaluationJob.objects.bulk_create(
            EvaluationJob(
                run=run,
                key=j["key"],
                order=i,
                kind=j["kind"],
                node_index=j["node"],
                gpu_index=j["gpu"],
                datasets=j["datasets"],
                depends_on=j["depends_on"],
                planned_start_s=j["start_s"],
                planned_end_s=j["end_s"],
                planned_phases=j["phases"],
            )
            for i, j in enumerate(executed["plan"])
        )
        if submit:
            from webapp.evaluation.tasks import submit_send

            transaction.on_commit(lambda: submit_send(run.pk, cluster.name))
    return run
