"""Reads of the evaluation app: estimates as the planner needs them, the cluster's capacity,
runs and their jobs for the page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Count, Q

from webapp.evaluation.estimates import Estimate, default_estimate
from webapp.evaluation.models import (
    EvaluationJob,
    EvaluationRun,
    RuntimeEstimate,
    SchedulerLatency,
)
from webapp.evaluation.planner import DISPATCH_S
from webapp.fleet.choices import SCHEDULER_OUT_OF_SERVICE
from webapp.fleet.models import Node


def estimates_for(datasets: Sequence[str]) -> list[Estimate]:
    """Each dataset's estimate: learned from past runs, else the default table's."""
    learned = {r.dataset: r for r in RuntimeEstimate.objects.filter(dataset__in=list(datasets))}
    out = []
    for name in datasets:
        row = learned.get(name)
        if row is None:
            out.append(default_estimate(name))
        else:
            out.append(Estimate(name, row.load_s, row.infer_s, row.metrics_s, "learned"))
    return out


def estimates_known() -> dict[str, Estimate]:
    return {
        r.dataset: Estimate(r.dataset, r.load_s, r.infer_s, r.metrics_s, "learned")
        for r in RuntimeEstimate.objects.all()
    }


def latency_for(cluster_id: int) -> tuple[float, float]:
    """The cluster's learned scheduler latencies (dispatch, dependency), else the defaults."""
    row = SchedulerLatency.objects.filter(cluster_id=cluster_id).first()
    return (row.dispatch_s, row.dependency_s) if row is not None else (DISPATCH_S, DISPATCH_S)


@dataclass(frozen=True)
class NodeCapacity:
    hostname: str
    gpus: int


def cluster_capacity(cluster_id: int) -> list[NodeCapacity]:
    """The cluster's nodes in service with their registered GPUs, most GPUs first."""
    nodes = (
        Node.objects.filter(cluster_id=cluster_id)
        .exclude(state__in=SCHEDULER_OUT_OF_SERVICE)
        .annotate(n=Count("gpus"))
        .filter(~Q(n=0))
        .order_by("-n", "hostname")
    )
    return [NodeCapacity(n.hostname, n.n) for n in nodes]


def runs_recent(cluster_id: int | None = None, limit: int = 200) -> list[EvaluationRun]:
    qs = EvaluationRun.objects.select_related("cluster")
    if cluster_id is not None:
        qs = qs.filter(cluster_id=cluster_id)
    return list(qs[:limit])


def run_jobs(run: EvaluationRun) -> list[EvaluationJob]:
    return list(run.jobs.order_by("order"))
