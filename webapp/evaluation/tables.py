"""The evaluation page's tables, declared once for the page's header and the CSV
(`webapp/core/tables.py`)."""

from __future__ import annotations

from webapp.core.tables import Column, Table, iso, keyed

MEASURED_PHASES = ("load", "infer", "metrics")


def _datasets(datasets: list) -> str:
    """A plan's datasets as `name:part/parts`, space-separated."""
    return " ".join(f"{d[0]}:{d[1]}/{d[2]}" for d in datasets)


# The run history (`evaluation/page.html`), rows EvaluationRun with cluster read; the page
# folds the nodes and GPUs per node into one cell.
RUNS = Table(
    Column("run", "Run", "pk"),
    Column("cluster", accessor="cluster.name", csv_only=True),
    Column("created_utc", "Created (UTC)", iso("created_at")),
    Column("requested_by", "By"),
    Column("model_path", "Model"),
    Column("model_size_gb", accessor="model_size_gb", csv_only=True, digits=3),
    Column("datasets", "Datasets", lambda r: len(r.datasets), num=True),
    Column("nodes", csv_only=True),
    Column("gpus_per_node", csv_only=True),
    Column("size", "Nodes x GPUs", html_only=True, num=True),
    Column("plan", "Plan"),
    Column("status", "Status"),
    Column("predicted_makespan_s", "Predicted", num=True),
    Column("actual_makespan_s", "Measured", num=True),
    *(
        Column(
            f"predicted_{plan}_s",
            accessor=lambda r, plan=plan: r.prediction.get(plan, {}).get("makespan_s"),
            csv_only=True,
        )
        for plan in ("baseline", "decoupled")
    ),
    Column("predicted_speedup", "Predicted speedup", "prediction.speedup", num=True),
    Column("error", csv_only=True),
)


def _node(pair) -> object:
    run, job = pair
    return (
        run.node_names[job.node_index] if job.node_index < len(run.node_names) else job.node_index
    )


def _measured(phase: str):
    def read(pair) -> object:
        span = pair[1].measured.get(phase)
        return round(span[1] - span[0], 3) if span else ""

    return read


# One run's jobs (`evaluation/page.html`), rows (run, EvaluationJob) pairs: the CSV names
# each job's node, the page its index.
JOBS = Table(
    Column("key", "Job", lambda p: p[1].key),
    Column("kind", "Kind", lambda p: p[1].kind),
    Column("node", "Node", _node),
    Column("gpu", "GPU", lambda p: p[1].gpu_index, num=True),
    Column("datasets", "Datasets", lambda p: _datasets(p[1].datasets)),
    Column("depends_on", "After", lambda p: " ".join(p[1].depends_on)),
    Column("planned_start_s", "Planned start", lambda p: p[1].planned_start_s, num=True),
    Column("planned_end_s", "Planned end", lambda p: p[1].planned_end_s, num=True),
    Column("slurm_job", "Slurm job", lambda p: p[1].scheduler_id),
    Column("attempts", "Attempts", lambda p: p[1].attempts, num=True),
    Column("status", "Status", lambda p: p[1].status),
    Column("start_utc", accessor=lambda p: iso("start_at")(p[1]), csv_only=True),
    Column("end_utc", accessor=lambda p: iso("end_at")(p[1]), csv_only=True),
    *(Column(f"{ph}_s", accessor=_measured(ph), csv_only=True) for ph in MEASURED_PHASES),
    Column("error", accessor=lambda p: p[1].error, csv_only=True),
)

# Both plans as predicted (CSV; the page draws them as Gantt charts), rows (plan kind, the
# planned job's dict) pairs.
PLANS = Table(
    Column("plan", accessor=lambda p: p[0], csv_only=True),
    *(
        Column(k, accessor=lambda p, k=k: p[1][k], csv_only=True)
        for k in ("key", "kind", "node", "gpu", "start_s", "end_s")
    ),
    *(
        Column(f"{ph}_s", accessor=lambda p, ph=ph: p[1]["phases"].get(ph, 0.0), csv_only=True)
        for ph in MEASURED_PHASES
    ),
    Column("datasets", accessor=lambda p: _datasets(p[1]["datasets"]), csv_only=True),
    Column("depends_on", accessor=lambda p: " ".join(p[1]["depends_on"]), csv_only=True),
)

# The learned runtime estimates (CSV), rows RuntimeEstimate.
ESTIMATES = Table(
    *keyed("dataset", "load_s", "infer_s", "metrics_s", "runs"),
    Column("updated_utc", accessor=iso("updated_at"), csv_only=True),
)

# The evaluation phases of the characterization page (CSV), rows (phase, EvalPhases) pairs.
PHASES = Table(
    Column("phase", accessor=lambda p: p[0], csv_only=True),
    Column("gpu_s", accessor=lambda p: p[1].gpu_s[p[0]], csv_only=True, digits=3),
    Column("share", accessor=lambda p: p[1].share[p[0]], csv_only=True),
    Column("paper_share", accessor=lambda p: p[1].paper.get(p[0]), csv_only=True),
    Column("jobs", accessor=lambda p: p[1].jobs, csv_only=True),
    Column("allocations", accessor=lambda p: p[1].allocations, csv_only=True),
)
