"""Reads of the recovery app: one failure's recovery timeline, the actions on record, a
cluster's recovery over a window, the nodes out of service, the approvals queue.

Sized for a real cluster (thousands of nodes, 100k actions): tables are querysets the views
paginate, and the cluster figures are aggregated in SQL (counts per bucket, percentiles by
percentile_cont), so no view loads every row of a window.

Time to recover, by phase, of one failure (the recovery page, its CSV):
- detect = detected_at - occurred_at, diagnose = diagnosed_at - detected_at (the failure row);
  a failure replayed or reported late (failures.selectors.detected_live) was not detected in
  that time: it is marked late and left out of detect and of occurred -> running again;
- act = the end of the plan's last action that ran (succeeded or failed; notifications are
  not acting) - diagnosed_at;
- running again = the job's first `started` event at or after the end of the plan's last
  successful restart (requeue / resubmit) - that end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet
from django.db.models import Window as SqlWindow
from django.db.models.functions import RowNumber

from webapp.core.templatetags.vigil import seconds
from webapp.core.windows import Window
from webapp.failures.models import FailureEvent
from webapp.failures.selectors import LIVE_DETECTION_MAX, reported_late_s
from webapp.fleet.models import Node
from webapp.jobs.choices import JobEventKind
from webapp.jobs.models import JobEvent
from webapp.recovery.choices import FINAL_STATES, ActionKind, ActionStatus, ExecutorKind, Mode
from webapp.recovery.models import RecoveryAction, RecoveryPlan
from webapp.recovery.policy import ESCALATED_MARK

RESTART_KINDS = (ActionKind.REQUEUE, ActionKind.RESUBMIT)
# Node states that keep a node out of service (the scheduler's drain, or down).
OUT_OF_SERVICE = ("draining", "drained", "down")
# Drain actions listed per node on the drained-nodes page (the newest first).
DRAINS_PER_NODE = 5
# Window lengths up to this are bucketed per hour on the recovery page, longer ones per day.
HOURLY_UP_TO = timedelta(days=3)
PHASES = ("detect", "diagnose", "act", "running_again")


# --- One failure -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One step of a failure's recovery: when it happened and how long it took.

    `after_s`: time since the step before ended (the wait); `took_s`: how long an action ran.
    """

    key: str  # occurred, detected, diagnosed, action, running_again
    label: str
    at: datetime | None
    ended_at: datetime | None = None
    after_s: float | None = None
    took_s: float | None = None
    status: str = ""
    status_label: str = ""
    detail: str = ""
    action: RecoveryAction | None = None


@dataclass(frozen=True)
class FailureRecovery:
    plan: RecoveryPlan | None
    phases: list[Phase] = field(default_factory=list)
    total_s: float | None = None  # occurred -> job running again (or the last action's end)


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    return max(0.0, (b - a).total_seconds())


def running_again_at(job_id: int | None, since: datetime | None) -> datetime | None:
    """The job's first start at or after `since` (the end of its restart)."""
    if job_id is None or since is None:
        return None
    return (
        JobEvent.objects.filter(job_id=job_id, kind=JobEventKind.STARTED, ts__gte=since)
        .order_by("ts")
        .values_list("ts", flat=True)
        .first()
    )


def action_title(action: RecoveryAction) -> str:
    """What the action does, and to what: "Drain node gpu-07", "Requeue job 4242"."""
    kind = action.get_kind_display()
    if action.kind == ActionKind.NOTIFY:
        return kind + (f" {action.get_audience_display().lower()}" if action.audience else "")
    if action.kind == ActionKind.HEALTH_CHECK:
        hosts = action.params.get("hosts") or ([action.host] if action.host else [])
        return kind + (f" of {', '.join(hosts)}" if hosts else "")
    if action.host:
        return f"{kind} {action.host}"
    if action.job_scheduler_id:
        # The kinds that act on a job say "job" in their label already.
        return f"{kind} {action.job_scheduler_id}"
    return kind


def action_label(action: RecoveryAction) -> str:
    """The title, and "(simulated)" for an action of the simulated executor."""
    simulated = action.executor == ExecutorKind.SIMULATED
    return action_title(action) + (" (simulated)" if simulated else "")


def failure_timeline(failure: FailureEvent) -> FailureRecovery:
    """occurred -> detected -> diagnosed -> each action (start, end, status, result) -> the
    job running again. One query for the actions with their plan (a second for a plan with
    no action), and one for the job's next start once a restart succeeded: the failure page
    stays within its query budget."""
    actions = list(
        RecoveryAction.objects.filter(plan__failure_id=failure.pk)
        .select_related("plan")
        .order_by("seq", "id")
    )
    if actions:
        plan = actions[0].plan
    else:
        plan = RecoveryPlan.objects.filter(failure_id=failure.pk).first()
    late_s = reported_late_s(failure)
    phases = [
        Phase("occurred", "Occurred", failure.occurred_at),
        Phase(
            "detected",
            "Detected",
            failure.detected_at,
            after_s=_seconds(failure.occurred_at, failure.detected_at),
            **(
                {
                    "status": "late",
                    "status_label": "reported late",
                    "detail": f"replayed or backfilled: reported {seconds(late_s)} after it "
                    "happened, so left out of time to detect",
                }
                if late_s is not None
                else {}
            ),
        ),
    ]
    last = failure.detected_at
    if failure.diagnosed_at:
        phases.append(
            Phase(
                "diagnosed",
                "Diagnosed",
                failure.diagnosed_at,
                after_s=_seconds(last, failure.diagnosed_at),
                detail=failure.cause,
            )
        )
        last = failure.diagnosed_at
    if plan is None:
        return FailureRecovery(None, phases)
    restart = None
    for a in actions:
        start = a.started_at or a.created_at
        phases.append(
            Phase(
                "action",
                action_label(a),
                start,
                ended_at=a.ended_at,
                after_s=_seconds(last, start),
                took_s=_seconds(a.started_at, a.ended_at),
                status=a.status,
                status_label=a.get_status_display(),
                detail=a.error.splitlines()[0] if a.error and not a.result else a.result,
                action=a,
            )
        )
        if a.ended_at and a.kind != ActionKind.NOTIFY:
            last = max(last, a.ended_at) if last else a.ended_at
        if a.kind in RESTART_KINDS and a.status == ActionStatus.SUCCEEDED and a.ended_at:
            restart = a
    total = None
    if restart is not None:
        again = running_again_at(restart.job_id, restart.ended_at)
        phases.append(
            Phase(
                "running_again",
                "Job running again",
                again,
                after_s=_seconds(restart.ended_at, again),
                status="succeeded" if again else "waiting",
                status_label="" if again else "not started yet",
            )
        )
        total = _seconds(failure.occurred_at, again)
    return FailureRecovery(plan, phases, total)


# --- Tables ----------------------------------------------------------------------------------


def actions_filter(
    *,
    cluster_id: int | None = None,
    status: str = "",
    kind: str = "",
    executor: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[RecoveryAction]:
    """Actions newest first (the (cluster, created_at) index serves the window)."""
    # The plan for its failure id and mode; not the failure row (its evidence and inputs are
    # large JSON): an export of 100k actions reads only what it writes.
    qs = RecoveryAction.objects.select_related("cluster", "plan")
    if cluster_id:
        qs = qs.filter(cluster_id=cluster_id)
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(kind=kind)
    if executor:
        qs = qs.filter(executor=executor)
    if since:
        qs = qs.filter(created_at__gte=since)
    if until:
        qs = qs.filter(created_at__lt=until)
    return qs.order_by("-created_at", "-id")


def plans_filter(window: Window) -> QuerySet[RecoveryPlan]:
    """A cluster's plans in the window, newest first (count it, page it, then `plans_counted`
    the page: counting the annotated queryset would aggregate every plan of the window)."""
    qs = RecoveryPlan.objects.filter(cluster_id=window.cluster.id)
    if window.since:
        qs = qs.filter(created_at__gte=window.since)
    if window.until:
        qs = qs.filter(created_at__lt=window.until)
    return qs.order_by("-created_at", "-id")


def plans_counted(plans: QuerySet[RecoveryPlan]) -> QuerySet[RecoveryPlan]:
    """The plans with their nodes, jobs and action counts (per status)."""
    return (
        plans.select_related("node", "job")
        .annotate(
            n_actions=Count("actions"),
            n_succeeded=Count("actions", filter=Q(actions__status=ActionStatus.SUCCEEDED)),
            n_failed=Count("actions", filter=Q(actions__status=ActionStatus.FAILED)),
            n_waiting=Count(
                "actions",
                filter=Q(
                    actions__status__in=[
                        ActionStatus.AWAITING_APPROVAL,
                        ActionStatus.READY,
                        ActionStatus.RUNNING,
                    ]
                ),
            ),
        )
        .order_by("-created_at", "-id")
    )


def approvals_queue(cluster_id: int | None = None) -> QuerySet[RecoveryAction]:
    """Actions awaiting an operator, oldest first (the status index serves it)."""
    qs = RecoveryAction.objects.filter(status=ActionStatus.AWAITING_APPROVAL)
    if cluster_id:
        qs = qs.filter(cluster_id=cluster_id)
    return qs.select_related("cluster", "plan", "plan__failure", "node").order_by(
        "created_at", "id"
    )


def approvals_waiting() -> int:
    return RecoveryAction.objects.filter(status=ActionStatus.AWAITING_APPROVAL).count()


def drained_nodes(cluster_id: int | None = None) -> QuerySet[Node]:
    """Nodes out of service (draining, drained, down), by cluster and hostname."""
    qs = Node.objects.filter(state__in=OUT_OF_SERVICE)
    if cluster_id:
        qs = qs.filter(cluster_id=cluster_id)
    return qs.select_related("cluster").order_by("cluster__name", "hostname")


def node_drains(node_ids: list[int], per_node: int = DRAINS_PER_NODE) -> dict[int, list[dict]]:
    """The newest drain actions of each node (the failures behind its drain), in one query."""
    if not node_ids:
        return {}
    rows = (
        RecoveryAction.objects.filter(kind=ActionKind.DRAIN, node_id__in=node_ids)
        .annotate(
            rn=SqlWindow(RowNumber(), partition_by=["node_id"], order_by=["-created_at", "-id"]),
        )
        .filter(rn__lte=per_node)
        .values(
            "pk",
            "node_id",
            "status",
            "executor",
            "created_at",
            "ended_at",
            "plan__failure_id",
            "plan__cause",
            "plan__kind",
        )
        .order_by("node_id", "-created_at", "-id")
    )
    out: dict[int, list[dict]] = {}
    for r in rows:
        out.setdefault(r["node_id"], []).append(r)
    return out


@dataclass(frozen=True)
class OutGroup:
    """Nodes out of service for one reason: how many, and the longest out (seconds)."""

    reason: str
    count: int
    longest_s: float | None
    # Vigil returns these nodes itself: its plan holds a resume still to run (after a reset or
    # reboot and a passed health check). Any other drain, Vigil's included, and a node down
    # wait for a person.
    by_vigil: bool


def nodes_out_by_reason(
    cluster_id: int | None = None, now: datetime | None = None
) -> list[OutGroup]:
    """The nodes out of service grouped by why (the scheduler's reason for the drain, Vigil's
    prefix `vigil:` telling its drains from a person's), with how long the longest has been
    out: NVSentinel's users found nodes left cordoned after recovery; this is where they show.
    Counted in SQL, one row per (state, reason)."""
    now = now or datetime.now(UTC)
    qs = Node.objects.filter(state__in=OUT_OF_SERVICE)
    if cluster_id:
        qs = qs.filter(cluster_id=cluster_id)
    resume_due = RecoveryAction.objects.filter(
        node_id=OuterRef("pk"), kind=ActionKind.RESUME
    ).exclude(status__in=FINAL_STATES)
    rows = (
        qs.annotate(resuming=Exists(resume_due))
        .values("state", "state_reason", "resuming")
        .annotate(n=Count("id"), first=Min("state_since"))
    )
    groups: dict[str, list] = {}
    for row in rows:
        label = _out_reason(row["state"], row["state_reason"] or "")
        if label == VIGIL_DRAINED and row["resuming"]:
            label = VIGIL_RESUMING
        g = groups.setdefault(label, [0, None])
        g[0] += row["n"]
        if row["first"] is not None and (g[1] is None or row["first"] < g[1]):
            g[1] = row["first"]
    out = [
        OutGroup(
            label,
            n,
            (now - first).total_seconds() if first else None,
            label == VIGIL_RESUMING,
        )
        for label, (n, first) in groups.items()
    ]
    return sorted(out, key=lambda g: (-g.count, g.reason))


# Drained by Vigil for an escalation: a person returns the node.
ESCALATED = f"Vigil: {ESCALATED_MARK}"
# Drained by Vigil for a failure: a person returns the node unless the plan resumes it.
VIGIL_DRAINED = "Vigil: drained for a failure"
VIGIL_RESUMING = "Vigil: drained, its reset or reboot planned"


# The numbers in a person's reason (tickets, cases, slots, dates, versions): "RMA DC-4169" and
# "RMA DC-5052" are one reason at a site with hundreds of nodes out; a number inside a word
# (mlx5, B1) stays.
_REASON_NUMBERS = re.compile(r"(?<![A-Za-z])\d+(?:[.\-/:]\d+)*")


def _out_reason(state: str, reason: str) -> str:
    """A node's reason, grouped: Vigil's drains by what they wait for, a person's as written
    with its numbers as "…" (its first 60 characters), a node down as down."""
    text = reason.strip()
    if not text.lower().startswith("vigil"):
        text = _REASON_NUMBERS.sub("…", text)
    if state == "down" and not text.lower().startswith("vigil"):
        return f"down: {text[:60]}" if text else "down"
    if text.lower().startswith("vigil"):
        if ESCALATED_MARK in text:
            return ESCALATED
        if "GPU reset failed" in text:
            return "Vigil: GPU reset failed"
        return VIGIL_DRAINED
    return f"by a person: {text[:60]}" if text else "by a person (no reason given)"


def node_out_of_service(node_id: int) -> Node | None:
    return Node.objects.select_related("cluster").filter(pk=node_id).first()


# --- A cluster's recovery --------------------------------------------------------------------


@dataclass
class ClusterRecovery:
    window: Window
    bucket: str  # "hour" or "day"
    # (bucket start, kind, status, executor, count): actions created per bucket.
    over_time: list[tuple[datetime, str, str, str, int]] = field(default_factory=list)
    actions: int = 0
    ran: int = 0  # actions that ran to an end (succeeded or failed), notifications apart
    succeeded: int = 0
    success_rate: float | None = None
    simulated: int = 0  # actions of the simulated executor in the window
    by_status: dict[str, int] = field(default_factory=dict)
    # phase -> {"n", "median_s", "p95_s"}
    phases: dict[str, dict] = field(default_factory=dict)
    recover_median_s: float | None = None  # occurred -> running again
    recover_p95_s: float | None = None
    # Failure plans whose failure was replayed or reported late: out of detect and recover.
    late: int = 0
    failures: int = 0  # failure plans in the window
    auto_recovered: int = 0  # ... of which recovered with no human step
    avoided_share: float | None = None  # auto_recovered / live_failures

    @property
    def live_failures(self) -> int:
        """Failure plans made while the failure was live: the chances to avoid a person. A
        replayed failure's plan comes too late to act (it only notifies), so the share of
        interventions avoided is over these alone."""
        return self.failures - self.late

    @property
    def late_after_min(self) -> int:
        return int(LIVE_DETECTION_MAX.total_seconds() // 60)


# One pass: the window's failure plans (the plans' (cluster, created_at) index), their actions
# aggregated per plan (the actions' (cluster, created_at) index: an action is never older than
# its plan), and the job's next start after the restart (the (job, kind, ts) unique index).
_PHASE_SQL = """
WITH p AS (
    SELECT pl.id, pl.mode, f.occurred_at, f.detected_at, f.diagnosed_at
    FROM recovery_recoveryplan pl
    JOIN failures_failureevent f ON f.id = pl.failure_id
    WHERE pl.cluster_id = %s AND pl.kind = 'failure' {plan_where}
), a AS (
    SELECT a.plan_id,
        max(a.ended_at) FILTER (
            WHERE a.kind <> 'notify' AND a.status IN ('succeeded', 'failed')) AS acted_at,
        count(*) FILTER (WHERE a.kind <> 'notify') AS n_acts,
        count(*) FILTER (WHERE a.kind <> 'notify' AND a.status <> 'succeeded') AS n_not_ok,
        max(a.ended_at) FILTER (WHERE a.kind IN ('requeue', 'resubmit')
            AND a.status = 'succeeded') AS restarted_at,
        (array_agg(a.job_id ORDER BY a.ended_at DESC) FILTER (
            WHERE a.kind IN ('requeue', 'resubmit') AND a.status = 'succeeded'
              AND a.ended_at IS NOT NULL))[1] AS restart_job_id
    FROM recovery_recoveryaction a
    WHERE a.cluster_id = %s {action_where}
    GROUP BY a.plan_id
), q AS (
    SELECT p.*, a.acted_at, a.restarted_at, coalesce(a.n_acts, 0) AS n_acts,
        coalesce(a.n_not_ok, 0) AS n_not_ok,
        (SELECT min(e.ts) FROM jobs_jobevent e
          WHERE e.job_id = a.restart_job_id AND e.kind = 'started'
            AND e.ts >= a.restarted_at) AS again_at
    FROM p LEFT JOIN a ON a.plan_id = p.id
), d AS (
    SELECT mode, n_acts, n_not_ok, again_at, late,
        CASE WHEN NOT late THEN extract(epoch FROM detected_at - occurred_at) END AS detect,
        extract(epoch FROM diagnosed_at - detected_at) AS diagnose,
        extract(epoch FROM acted_at - diagnosed_at) AS act,
        extract(epoch FROM again_at - restarted_at) AS running_again,
        CASE WHEN NOT late THEN extract(epoch FROM again_at - occurred_at) END AS recover
    FROM (SELECT *, coalesce(detected_at - occurred_at > %s, false) AS late FROM q) q
)
SELECT count(*),
    count(*) FILTER (WHERE mode = 'auto' AND n_acts > 0 AND n_not_ok = 0
                     AND again_at IS NOT NULL),
    count(*) FILTER (WHERE late),
    {percentiles}
FROM d
"""


def _percentiles(column: str) -> str:
    return (
        f"count({column}), "
        f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {column}), "
        f"percentile_cont(0.95) WITHIN GROUP (ORDER BY {column})"
    )


def _window_sql(window: Window, column: str) -> tuple[str, list]:
    sql, params = "", []
    if window.since is not None:
        sql, params = sql + f" AND {column} >= %s", [*params, window.since]
    if window.until is not None:
        sql, params = sql + f" AND {column} < %s", [*params, window.until]
    return sql, params


def cluster_recovery(window: Window) -> ClusterRecovery:
    """Actions over time, success rate, time to recover by phase and the manual interventions
    avoided, over the plans and actions created in the window (three aggregate queries)."""
    span = (window.until - window.since) if window.since and window.until else None
    bucket = "hour" if span is not None and span <= HOURLY_UP_TO else "day"
    result = ClusterRecovery(window=window, bucket=bucket)
    where, params = _window_sql(window, "created_at")
    with connection.cursor() as cur:
        cur.execute(
            f"""SELECT date_trunc(%s, created_at AT TIME ZONE 'UTC') AS b, kind, status,
                   executor, count(*)
                FROM recovery_recoveryaction WHERE cluster_id = %s {where}
                GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4""",
            [bucket, window.cluster.id, *params],
        )
        result.over_time = [(b.replace(tzinfo=UTC), k, s, e, n) for b, k, s, e, n in cur]
        plan_where, plan_params = _window_sql(window, "pl.created_at")
        action_where, action_params = "", []
        if window.since is not None:
            action_where, action_params = " AND a.created_at >= %s", [window.since]
        cols = ", ".join(_percentiles(c) for c in (*PHASES, "recover"))
        sql = _PHASE_SQL.format(plan_where=plan_where, action_where=action_where, percentiles=cols)
        cur.execute(
            sql,
            [
                window.cluster.id,
                *plan_params,
                window.cluster.id,
                *action_params,
                LIVE_DETECTION_MAX,
            ],
        )
        row = cur.fetchone()
    for _b, kind, status, executor, n in result.over_time:
        result.actions += n
        result.by_status[status] = result.by_status.get(status, 0) + n
        if executor == ExecutorKind.SIMULATED:
            result.simulated += n
        if kind != ActionKind.NOTIFY and status in (ActionStatus.SUCCEEDED, ActionStatus.FAILED):
            result.ran += n
            if status == ActionStatus.SUCCEEDED:
                result.succeeded += n
    result.success_rate = result.succeeded / result.ran if result.ran else None
    result.failures, result.auto_recovered, result.late = row[0], row[1], row[2]
    live = result.live_failures
    result.avoided_share = result.auto_recovered / live if live else None
    values = row[3:]
    for i, phase in enumerate(PHASES):
        n, median, p95 = values[3 * i : 3 * i + 3]
        result.phases[phase] = {"n": n, "median_s": median, "p95_s": p95}
    _n, result.recover_median_s, result.recover_p95_s = values[3 * len(PHASES) :]
    return result


def cluster_mode_meaning(mode: str) -> str:
    """What a cluster's mode means for the next failure, in one sentence."""
    return {
        Mode.AUTO: "Vigil acts on each diagnosis at once through the scheduler.",
        Mode.APPROVE: "Vigil proposes each action; nothing runs until an operator approves it.",
        Mode.DRY_RUN: "Vigil records what it would do and runs nothing.",
    }.get(mode, "")
