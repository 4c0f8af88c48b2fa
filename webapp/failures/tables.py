"""The failure pages' tables, declared once for the page's header and the CSV
(`webapp/core/tables.py`)."""

from __future__ import annotations

from django.utils.safestring import mark_safe

from webapp.core.tables import Column, Table
from webapp.failures.selectors import detected_live, reported_late_s, xid_meaning


def _iso(path: str):
    def read(row) -> str | None:
        value = getattr(row, path)
        return value.isoformat() if value else None

    return read


# The failure timeline (`failures/timeline.html`), rows FailureEvent with cluster, job, node
# and blamed_node read; the page puts the time first, the job's name beside its id and the
# blamed GPU beside the blamed node.
FAILURES = Table(
    Column("id", accessor="pk", csv_only=True),
    Column("cluster", "Cluster", "cluster.name"),
    Column("kind", "Kind"),
    Column("occurred_at", "When (UTC)", _iso("occurred_at")),
    Column("detected_at", accessor=_iso("detected_at"), csv_only=True),
    Column("diagnosed_at", accessor=_iso("diagnosed_at"), csv_only=True),
    # Replayed or reported late: detected_at is when it arrived, not when it was seen.
    Column("replayed", accessor=lambda e: not detected_live(e), csv_only=True),
    Column("reported_late_s", accessor=reported_late_s, csv_only=True),
    Column("job", "Job", "job.scheduler_id"),
    Column("job_type", accessor="job.job_type", csv_only=True),
    Column("user", "User", "job.user"),
    Column("node", accessor="node.hostname", csv_only=True),
    Column("cause", "Cause"),
    Column("category", "Category"),
    Column("acme_alias", accessor="alias", csv_only=True),
    Column("action", "Action"),
    Column("default_action", csv_only=True),
    Column("breaker", csv_only=True),
    Column("detail", csv_only=True),
    Column("confidence", csv_only=True),
    Column("rule_id", csv_only=True),
    Column("source", "Source"),
    Column(
        "blamed_node",
        "Blamed",
        lambda e: e.blamed_node.hostname if e.blamed_node else e.blamed_host or None,
    ),
    Column("blamed_gpu", accessor=lambda e: e.blamed_gpu_label or None, csv_only=True),
    Column("gpu_hours_lost", "GPU-h lost", num=True),
    page_order=(
        "occurred_at",
        "cluster",
        "kind",
        "job",
        "user",
        "cause",
        "category",
        "action",
        "blamed_node",
        "gpu_hours_lost",
        "source",
    ),
)

# The evidence lines a failure's diagnosis read (CSV; the page shows them in context), rows
# the evidence dicts.
EVIDENCE = Table(Column("file"), Column("line"), Column("rule_id"), Column("text"))

# A node's GPU errors (`failures/detail.html`), rows (hostname, GpuError) pairs.
XIDS = Table(
    Column("node", accessor=lambda r: r[0], csv_only=True),
    Column("ts", "When (UTC)", lambda r: r[1].ts.isoformat()),
    # A row is one Xid's burst on one GPU: its last line, and how many lines (count).
    Column("last_ts", "Last (UTC)", lambda r: r[1].last_ts.isoformat()),
    Column("gpu_index", "GPU", lambda r: r[1].gpu_index),
    Column("kind", "Kind", lambda r: r[1].kind),
    Column("xid", "Xid", lambda r: r[1].xid or None),
    Column("meaning", "Meaning", lambda r: xid_meaning(r[1].xid) if r[1].xid else ""),
    Column("count", "Count", lambda r: r[1].count, num=True),
    Column("source", "Source", lambda r: r[1].source),
    Column("message", accessor=lambda r: r[1].message, csv_only=True),
)

# --- Reliability (`failures/reliability.html`); rows are reliability.py's dataclasses ---------

# One row: the Reliability itself.
RELIABILITY_SUMMARY = Table(
    Column("cluster", accessor="window.cluster.name", csv_only=True),
    Column("since", accessor=lambda r: r.window.since.isoformat(), csv_only=True),
    Column("until", accessor=lambda r: r.window.until.isoformat(), csv_only=True),
    Column("nodes", "Nodes", num=True),
    Column("node_days", "Node-days observed", num=True, digits=3),
    Column("cluster_hours", "Cluster hours observed", num=True, digits=3),
    Column("failures", "Failures", num=True),
    Column(
        "failures_per_1000_node_days",
        "Failures per 1,000 node-days observed",
        "rate_per_1000_node_days",
        num=True,
        digits=3,
    ),
    Column("mtbf_h", "Cluster MTBF", unit="h", num=True, digits=3),
    Column(
        "detect_median_s", "Time to detect, median", "times.detect_median_s", num=True, digits=3
    ),
    Column(
        "diagnose_median_s",
        "Time to diagnose, median",
        "times.diagnose_median_s",
        num=True,
        digits=3,
    ),
)

# Table 3's shape, rows one cause each with its category (the page groups them).
RELIABILITY_CAUSES = Table(
    Column("category_cause", "Category / cause", html_only=True),
    Column("category", csv_only=True),
    Column("cause", csv_only=True),
    Column("acme_alias", "Acme alias", "alias"),
    Column("failed_jobs", "Failed jobs", "jobs", num=True),
    Column("share_of_failed_jobs", "Share of failed jobs", "job_share", num=True, digits=3),
    Column("gpu_hours_lost", "GPU-hours lost", "gpu_hours", num=True, digits=3),
    Column("share_of_lost_gpu_time", "Share of lost GPU time", "gpu_share", num=True, digits=3),
)

RELIABILITY_RECOVERY = Table(
    Column("category", "Category"),
    Column("failures", "Failures", num=True),
    Column("jobs_running_again", "Job running again", "running_again", num=True),
    Column("time_to_recover_median_s", "Median", "median_s", num=True, digits=3),
    Column("time_to_recover_p95_s", "p95", "p95_s", num=True, digits=3),
)

RELIABILITY_NODES = Table(
    Column("node", "Node"),
    Column("failures", "Failures", num=True),
    Column("observed_h", "Observed", unit="h", num=True, digits=3),
    Column("mtbf_h", "MTBF", unit="h", num=True, digits=3),
)

RELIABILITY_SIZES = Table(
    Column("job_size", "Job size", "size"),
    Column("job_hours", "Job-hours observed", num=True, digits=3),
    Column("failures", "Failures", num=True),
    Column("mtbf_observed_h", "Observed MTBF", unit="h", num=True, digits=3),
    Column(
        "mtbf_formula_h",
        mark_safe("1 / (N<sub>nodes</sub> × r<sub>f</sub>)"),  # noqa: S308 (a constant)
        unit="h",
        num=True,
        digits=3,
    ),
)

RELIABILITY_OFFENDERS = Table(
    Column("node", "Node"),
    Column("failures", "Failures", num=True),
    Column("jobs_failed", "Jobs failed", num=True),
    Column("gpu_errors", "GPU errors", "xids", num=True),
    Column("node_fails", "NODE_FAILs", num=True),
    Column("causes", "Causes"),
    Column(
        "days_since_last_failure", "Days since last failure", "days_since_last", num=True, digits=3
    ),
)

# Pretraining jobs' ETTR; the page puts the job's name beside its id.
RELIABILITY_ETTR = Table(
    Column("job", "Job", "job.scheduler_id"),
    Column("name", accessor="job.name", csv_only=True),
    Column("wall_h", "Wall-clock", unit="h", num=True, digits=3),
    Column("productive_h", "Productive", unit="h", num=True, digits=3),
    Column("ettr", "ETTR", num=True, digits=3),
    Column("failures", "Failures", num=True),
)

# Running pretraining jobs' checkpoint interval, rows with the checkpoint write time the
# view adds; the page shows the intervals in minutes, the CSV in seconds.
RELIABILITY_CHECKPOINTS = Table(
    Column("job", "Job", "job.scheduler_id"),
    Column("name", accessor="job.name", csv_only=True),
    Column("nodes", "Nodes", num=True),
    Column("job_mtbf_h", "Job MTBF", "mtbf_h", unit="h", num=True, digits=3),
    Column("young_daly_interval", "Young/Daly interval", unit="min", html_only=True, num=True),
    Column("young_daly_interval_s", accessor="optimal_s", csv_only=True, digits=0),
    Column("used_interval", "Interval used", unit="min", html_only=True, num=True),
    Column(
        "used_interval_s",
        accessor=lambda x: round(x.used_s, 0) if x.used_s else "unknown",
        csv_only=True,
    ),
    Column("checkpoint_write_s", csv_only=True),
    Column(
        "last_checkpoint_at",
        "Last checkpoint (UTC)",
        lambda x: x.last_checkpoint_at.isoformat() if x.last_checkpoint_at else None,
    ),
)

# The reliability CSVs by the name in their address ("causes" and "table3" both serve
# Table 3's rows).
RELIABILITY = {
    "summary": RELIABILITY_SUMMARY,
    "nodes": RELIABILITY_NODES,
    "sizes": RELIABILITY_SIZES,
    "causes": RELIABILITY_CAUSES,
    "table3": RELIABILITY_CAUSES,
    "offenders": RELIABILITY_OFFENDERS,
    "ettr": RELIABILITY_ETTR,
    "checkpoints": RELIABILITY_CHECKPOINTS,
    "recovery": RELIABILITY_RECOVERY,
}
