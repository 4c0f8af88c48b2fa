"""The recovery pages' tables, declared once for the page's header and the CSV
(`webapp/core/tables.py`)."""

from __future__ import annotations

import shlex

from webapp.core.tables import Column, Table, iso, keyed

# The cluster's headline numbers (CSV), rows dicts by key; the page's phase table is its
# time_to_recover group, one phase a row.
SUMMARY = Table(
    Column("cluster", csv_only=True),
    Column("group", csv_only=True),
    Column("name", "Phase"),
    Column("count", "Failures", num=True),
    Column("median_s_or_share", "Median", num=True),
    Column("p95_s", "p95", num=True),
)

# The actions figure's data (CSV), rows (bucket start, kind, status, executor, actions).
OVER_TIME = Table(
    Column("bucket_start", accessor=lambda r: r[0].isoformat(), csv_only=True),
    Column("kind", accessor=lambda r: r[1], csv_only=True),
    Column("status", accessor=lambda r: r[2], csv_only=True),
    Column("executor", accessor=lambda r: r[3], csv_only=True),
    Column("actions", accessor=lambda r: r[4], csv_only=True, num=True),
)

# Recent plans (`recovery/cluster.html`), rows RecoveryPlan counted (plans_counted) with
# cluster, node and job read; the page folds the counts into one outcome badge.
PLANS = Table(
    Column("plan", accessor="pk", csv_only=True),
    Column("cluster", accessor="cluster.name", csv_only=True),
    Column("kind", csv_only=True),
    Column("created_at", "Created (UTC)", iso("created_at")),
    Column("failure", "Failure", "failure_id"),
    Column("cause", "Cause"),
    Column("proposed_action", csv_only=True),
    Column("action", "Action chosen"),
    Column("rule", "Rule"),
    Column("reason", csv_only=True),
    Column("mode", "Mode"),
    Column("executor", csv_only=True),
    Column("node", "Node", "node.hostname"),
    Column("job", "Job", "job.scheduler_id"),
    Column("actions", "Actions", "n_actions", num=True),
    Column("succeeded", accessor="n_succeeded", csv_only=True),
    Column("failed", accessor="n_failed", csv_only=True),
    Column("waiting", accessor="n_waiting", csv_only=True),
    Column("outcome", "Outcome", html_only=True),
)

# Recovery actions (CSV of the cluster's and of the approvals queue; the approvals page shows
# each as a card), rows RecoveryAction with cluster and plan read.
ACTIONS = Table(
    Column("action", accessor="pk", csv_only=True),
    Column("plan", accessor="plan_id", csv_only=True),
    Column("failure", accessor="plan.failure_id", csv_only=True),
    Column("cluster", accessor="cluster.name", csv_only=True),
    *keyed("seq", "kind", "status", "mode", "executor", "rule", "reason", "host"),
    Column("job", accessor="job_scheduler_id", csv_only=True),
    Column(
        "commands",
        accessor=lambda a: " ; ".join(shlex.join(argv) for argv in a.commands),
        csv_only=True,
    ),
    *keyed("result", "error", "attempts", "approved_by"),
    Column("approved_at", accessor=iso("approved_at"), csv_only=True),
    Column("created_at", accessor=iso("created_at"), csv_only=True),
    Column("started_at", accessor=iso("started_at"), csv_only=True),
    Column("ended_at", accessor=iso("ended_at"), csv_only=True),
)


def _drains(row: dict) -> list[dict]:
    return row["drains"]


# Nodes out of service (`recovery/nodes.html`), rows the dicts views._node_rows builds (node,
# reason, since, drains); the page ends each row with its return-to-service button.
NODES = Table(
    Column("cluster", "Cluster", "node.cluster.name"),
    Column("node", "Node", "node.hostname"),
    Column("state", "State", "node.state"),
    Column("reason", "Reason"),
    Column("since", "Since (UTC)", iso("since")),
    Column(
        "failures",
        "Failures behind it",
        lambda r: " ".join(str(d["plan__failure_id"]) for d in _drains(r) if d["plan__failure_id"]),
    ),
    Column(
        "drain_actions",
        accessor=lambda r: " ".join(str(d["pk"]) for d in _drains(r)),
        csv_only=True,
    ),
    Column("return", "", html_only=True),
)

# One action's commands as run (CSV; the page shows each with its output), rows the
# action's step dicts with the action's id added under "action".
STEPS = Table(
    Column("action", csv_only=True),
    Column("command", accessor="i", csv_only=True),
    Column("attempt", accessor=lambda s: s.get("attempt"), csv_only=True),
    Column("argv", accessor=lambda s: shlex.join(s.get("argv", [])), csv_only=True),
    Column("started_at", accessor=lambda s: s.get("started_at"), csv_only=True),
    Column("ended_at", accessor=lambda s: s.get("ended_at"), csv_only=True),
    Column("exit", accessor=lambda s: s.get("exit"), csv_only=True),
    Column("verified", accessor=lambda s: s.get("verified", False), csv_only=True),
    Column("optional", accessor=lambda s: s.get("optional", False), csv_only=True),
    Column("stdout", accessor=lambda s: s.get("stdout", ""), csv_only=True),
    Column("stderr", accessor=lambda s: s.get("stderr", ""), csv_only=True),
)

# A failure's recovery timeline (`recovery/includes/timeline.html` on the failure page), rows
# (failure id, Phase) pairs.
TIMELINE = Table(
    Column("failure", accessor=lambda r: r[0], csv_only=True),
    Column("phase", accessor=lambda r: r[1].key, csv_only=True),
    Column("label", "Phase", lambda r: r[1].label),
    Column("at", "At (UTC)", lambda r: iso("at")(r[1])),
    Column("ended_at", accessor=lambda r: iso("ended_at")(r[1]), csv_only=True),
    Column("after_s", "After the step before", lambda r: r[1].after_s, num=True),
    Column("took_s", "Took", lambda r: r[1].took_s, num=True),
    Column("status", "Status", lambda r: r[1].status),
    Column("detail", "Result", lambda r: r[1].detail),
    Column("action", accessor=lambda r: r[1].action.pk if r[1].action else None, csv_only=True),
    Column(
        "executor",
        accessor=lambda r: r[1].action.executor if r[1].action else None,
        csv_only=True,
    ),
)
