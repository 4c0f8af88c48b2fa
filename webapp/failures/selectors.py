"""Reads of the failures app: the failure timeline, one failure in context, reliability.

Reliability definitions (docs/failure-signatures.md section 9): a failure is an unplanned
interruption, so outcomes (cancelled, time limit, preemption) are left out. Counted: job
failures, plus critical GPU errors on a node that no job failure within 15 min blames (a GPU
error that killed a job is one failure, not two).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from webapp.core.windows import Window
from webapp.failures import taxonomy
from webapp.failures.models import (
    CheckpointSeen,
    FailureEvent,
    FailureInputs,
    FailureKind,
    GpuErrorEvent,
)
from webapp.fleet.models import Node
from webapp.jobs.choices import JobState, JobType
from webapp.jobs.models import Job, JobAllocation

CONTEXT_LINES = 4  # lines shown before and after an evidence line
SAME_INCIDENT = timedelta(minutes=15)
# Job size buckets (GPUs) for MTBF per job size.
SIZE_BUCKETS: tuple[tuple[int, int, str], ...] = (
    (1, 1, "1 GPU"),
    (2, 8, "2-8 GPUs"),
    (9, 64, "9-64 GPUs"),
    (65, 256, "65-256 GPUs"),
    (257, 10**9, "257+ GPUs"),
)


# --- Timeline --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailureFilter:
    cluster: str = ""
    category: str = ""
    cause: str = ""
    job_type: str = ""
    user: str = ""
    kind: str = ""
    job_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None


def failures_filter(f: FailureFilter) -> QuerySet[FailureEvent]:
    qs = FailureEvent.objects.select_related(
        "cluster", "job", "node", "blamed_node", "blamed_gpu", "gpu"
    )
    if f.cluster:
        qs = qs.filter(cluster__name=f.cluster)
    if f.category:
        qs = qs.filter(category=f.category)
    if f.cause:
        qs = qs.filter(cause=f.cause)
    if f.job_type:
        qs = qs.filter(job__job_type=f.job_type)
    if f.user:
        qs = qs.filter(job__user=f.user)
    if f.kind:
        qs = qs.filter(kind=f.kind)
    if f.job_id:
        qs = qs.filter(job_id=f.job_id)
    if f.since:
        qs = qs.filter(occurred_at__gte=f.since)
    if f.until:
        qs = qs.filter(occurred_at__lt=f.until)
    return qs.order_by("-occurred_at", "-id")


def failure_lane(
    failure: FailureEvent, lane: str, job_hosts: dict[int, list[str]] | None = None
) -> str:
    """The timeline row a failure sits on: its job, or its node (blamed, else where it happened).

    A job failure that names no node sits on its node's lane when the job ran on one node
    (`job_hosts`: job id -> hostnames of its allocations, from `job_hosts_for`), else on its
    job's lane: a failure is never on a lane of unknown nodes."""
    if lane == "job":
        if failure.job is not None:
            return f"job {failure.job.scheduler_id}"
        return "(no job)"
    node = failure.blamed_node or failure.node
    if node is not None:
        return node.hostname
    if failure.blamed_host:
        return failure.blamed_host
    if failure.job is not None:
        hosts = (job_hosts or {}).get(failure.job_id, [])
        return hosts[0] if len(hosts) == 1 else f"job {failure.job.scheduler_id}"
    return f"cluster {failure.cluster.name}"


def job_hosts_for(failures: list[FailureEvent]) -> dict[int, list[str]]:
    """Job id -> hostnames its allocations were on, for the failures that name no node (one
    query)."""
    jobs = {
        f.job_id
        for f in failures
        if f.job_id and not (f.blamed_node_id or f.node_id or f.blamed_host)
    }
    out: dict[int, set[str]] = defaultdict(set)
    rows = JobAllocation.objects.filter(job_id__in=jobs).values_list("job_id", "node__hostname")
    for job_id, hostname in rows:
        out[job_id].add(hostname)
    return {job_id: sorted(hosts) for job_id, hosts in out.items()}


# A failure seen later than this after it happened was not detected live: it came from a
# collector's spool replayed after an outage, a history backfill or a trace import. The slowest
# live path is the Slurm watcher's poll plus a diagnosis queue (seconds to a minute or two), so
# ten minutes leaves room for a slow worker and none for a replay of an hour's spool.
LIVE_DETECTION_MAX = timedelta(minutes=10)


def detected_live(failure: FailureEvent, bound: timedelta = LIVE_DETECTION_MAX) -> bool:
    """Whether the failure was detected as it happened (not replayed or backfilled)."""
    return failure.detected_at - failure.occurred_at <= bound


def time_to_detect_live(
    failures: list[FailureEvent], bound: timedelta = LIVE_DETECTION_MAX
) -> dict[str, float | int | None]:
    """Median and mean seconds from occurrence to detection over the live detections only, and
    how many were left out as replayed (reliability's time-to-detect)."""
    live = [
        (f.detected_at - f.occurred_at).total_seconds()
        for f in failures
        if f.detected_at and detected_live(f, bound)
    ]
    return {
        "detect_median_s": _median(live),
        "detect_mean_s": _mean(live),
        "detect_live": len(live),
        "detect_replayed": sum(1 for f in failures if f.detected_at) - len(live),
    }


# --- One failure -----------------------------------------------------------------------------


@dataclass
class ContextBlock:
    """Lines around one evidence line, from the stream the engine read."""

    source: str
    lines: list[tuple[int, str, bool]]  # (line number as in the file, text, is evidence)


def failure_inputs(failure: FailureEvent, *, streams: bool = True) -> dict:
    """What the engine read for a failure ({} before its diagnosis). Without `streams`, only
    its notes and symptoms: the lines themselves (up to tens of MB) stay in the database."""
    rows = FailureInputs.objects.filter(failure_id=failure.pk)
    if streams:
        return rows.values_list("data", flat=True).first() or {}
    row = rows.values("data__notes", "data__symptoms").first() or {}
    return {"notes": row.get("data__notes") or [], "symptoms": row.get("data__symptoms") or []}


def evidence_in_context(
    failure: FailureEvent, around: int = CONTEXT_LINES, inputs: dict | None = None
) -> list[ContextBlock]:
    """The lines around each evidence line, from `inputs` (failure_inputs, read if not given)."""
    inputs = failure_inputs(failure) if inputs is None else inputs
    streams = {name: lines for name, lines in inputs.get("streams", [])}
    wanted: dict[str, set[int]] = defaultdict(set)
    for e in failure.evidence or []:
        if e.get("file") in streams and e.get("line"):
            wanted[e["file"]].add(int(e["line"]))
    blocks = []
    for name, hits in wanted.items():
        lines = streams[name]
        source, offset = name, 0
        parts = name.rsplit(":", 1)
        if len(parts) == 2 and parts[1].isdigit():  # host:path:first_line_no (a log window)
            source, offset = parts[0], int(parts[1]) - 1
        shown = sorted(
            {i for h in hits for i in range(max(1, h - around), min(len(lines), h + around) + 1)}
        )
        blocks.append(ContextBlock(source, [(i + offset, lines[i - 1], i in hits) for i in shown]))
    return blocks


def node_xid_history(node: Node | None, days: int = 30, limit: int = 200) -> list[GpuErrorEvent]:
    if node is None:
        return []
    since = timezone.now() - timedelta(days=days)
    return list(
        GpuErrorEvent.objects.filter(node=node, ts__gte=since)
        .select_related("gpu")
        .order_by("-ts", "-id")[:limit]
    )


def xid_meaning(code: int) -> str:
    return taxonomy.xid_info(code).meaning


# --- Reliability -----------------------------------------------------------------------------


@dataclass
class Reliability:
    window: Window
    nodes: int
    node_days: float
    failures: int
    rate_per_1000_node_days: float | None
    mtbf_h: float | None
    checkpoint_write_s: float  # the Young/Daly delta used: the page's value or the setting
    per_node: list[dict] = field(default_factory=list)
    per_size: list[dict] = field(default_factory=list)
    times: dict = field(default_factory=dict)
    by_cause: list[dict] = field(default_factory=list)
    table3: list[dict] = field(default_factory=list)
    offenders: list[dict] = field(default_factory=list)
    ettr: list[dict] = field(default_factory=list)
    checkpoints: list[dict] = field(default_factory=list)
    # Time to recover per category (and "all"): failure occurred -> its job running again.
    recovery: list[dict] = field(default_factory=list)


def counted_failures(window: Window) -> list[FailureEvent]:
    """The failures reliability counts (see the module docstring)."""
    events = list(
        FailureEvent.objects.filter(
            cluster=window.cluster,
            occurred_at__gte=window.since,
            occurred_at__lt=window.until,
            kind__in=[FailureKind.JOB_FAILURE, FailureKind.GPU_ERROR],
        )
        .exclude(category=taxonomy.Category.OUTCOME.value)
        .select_related("job", "node", "blamed_node")
        .order_by("occurred_at", "id")
    )
    job_failures = [e for e in events if e.kind == FailureKind.JOB_FAILURE]
    kept = []
    for e in events:
        if e.kind == FailureKind.GPU_ERROR and any(
            j.blamed_node_id == e.node_id and abs(j.occurred_at - e.occurred_at) <= SAME_INCIDENT
            for j in job_failures
        ):
            continue
        kept.append(e)
    return kept


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def reliability(window: Window, ckpt_write_s: float | None = None) -> Reliability:
    delta = ckpt_write_s or settings.VIGIL_CHECKPOINT_WRITE_S
    nodes = list(Node.objects.filter(cluster=window.cluster, created_at__lt=window.until))
    node_days = len(nodes) * window.hours / 24
    failures = counted_failures(window)
    n = len(failures)
    rate = 1000 * n / node_days if node_days else None
    result = Reliability(
        window=window,
        nodes=len(nodes),
        node_days=node_days,
        failures=n,
        rate_per_1000_node_days=rate,
        mtbf_h=window.hours / n if n else None,
        checkpoint_write_s=delta,
    )

    # Per node: node-hours in the window / failures blamed on (or happening on) the node.
    per_node: Counter[int] = Counter()
    for e in failures:
        node_id = e.blamed_node_id or (e.node_id if e.kind == FailureKind.GPU_ERROR else None)
        if node_id:
            per_node[node_id] += 1
    by_id = {n.id: n for n in nodes}
    for node_id, count in per_node.most_common():
        node = by_id.get(node_id)
        if node is None:
            continue
        result.per_node.append(
            {"node": node.hostname, "failures": count, "mtbf_h": window.hours / count}
        )

    # Per job size: observed (run hours of jobs of that size / their failures) beside the
    # formula 1 / (N_nodes x r_f) at the bucket's typical node count (8 GPUs per node).
    jobs = Job.objects.filter(cluster=window.cluster, start_at__lt=window.until).filter(
        Q(end_at__isnull=True) | Q(end_at__gte=window.since)
    )
    run_h: dict[str, float] = defaultdict(float)
    for gpus, start, end in jobs.values_list("gpus_requested", "start_at", "end_at"):
        if start is None:
            continue
        lo, hi = max(start, window.since), min(end or window.until, window.until)
        run_h[_bucket(gpus)] += max(0.0, (hi - lo).total_seconds()) / 3600
    fails_by_size = Counter(_bucket(e.job.gpus_requested) for e in failures if e.job is not None)
    for lo, _hi, label in SIZE_BUCKETS:
        nodes_n = max(1, math.ceil(lo / 8))
        formula = 24 / (nodes_n * rate / 1000) if rate else None
        observed = run_h[label] / fails_by_size[label] if fails_by_size[label] else None
        result.per_size.append(
            {
                "size": label,
                "job_hours": run_h[label],
                "failures": fails_by_size[label],
                "mtbf_observed_h": observed,
                "mtbf_formula_h": formula,
            }
        )

    # Replayed or backfilled failures were "detected" at replay: only live ones count.
    detect = time_to_detect_live(failures)
    diagnose = [
        (e.diagnosed_at - e.detected_at).total_seconds()
        for e in failures
        if e.diagnosed_at and e.detected_at
    ]
    result.times = {
        **detect,
        "diagnose_median_s": _median(diagnose),
        "diagnose_mean_s": _mean(diagnose),
    }

    # GPU-hours lost per cause, and the paper's Table 3 shape (every job failure, outcomes
    # apart: count, share of failed jobs, lost GPU time and its share) per category and cause.
    job_failures = [e for e in failures if e.kind == FailureKind.JOB_FAILURE]
    lost_total = sum(e.gpu_hours_lost or 0 for e in job_failures)
    cause_rows: dict[tuple[str, str], dict] = {}
    for e in job_failures:
        key = (e.category or "unknown", e.cause or "unknown")
        row = cause_rows.setdefault(
            key,
            {"category": key[0], "cause": key[1], "alias": e.alias, "jobs": 0, "gpu_hours": 0.0},
        )
        row["jobs"] += 1
        row["gpu_hours"] += e.gpu_hours_lost or 0
    order = {c.value: i for i, c in enumerate(taxonomy.Category)}
    for row in cause_rows.values():
        row["job_share"] = row["jobs"] / len(job_failures) if job_failures else None
        row["gpu_share"] = row["gpu_hours"] / lost_total if lost_total else None
    result.by_cause = sorted(cause_rows.values(), key=lambda r: -r["gpu_hours"])
    categories: dict[str, dict] = {}
    for row in cause_rows.values():
        cat = categories.setdefault(
            row["category"],
            {"category": row["category"], "jobs": 0, "gpu_hours": 0.0, "causes": []},
        )
        cat["jobs"] += row["jobs"]
        cat["gpu_hours"] += row["gpu_hours"]
        cat["causes"].append(row)
    for cat in categories.values():
        cat["job_share"] = cat["jobs"] / len(job_failures) if job_failures else None
        cat["gpu_share"] = cat["gpu_hours"] / lost_total if lost_total else None
        cat["causes"].sort(key=lambda r: (-r["gpu_hours"], -r["jobs"]))
    result.table3 = sorted(categories.values(), key=lambda c: order.get(c["category"], 99))

    result.offenders = _offenders(window, failures, by_id)
    result.recovery = _time_to_recover(failures)
    result.ettr = _ettr(window)
    result.checkpoints = _checkpoints(window, rate, delta)
    return result


# The first start, after the failure, of its job (a job failure) or of the jobs that held GPUs
# on the node when it happened (a GPU error): the scheduler's `started` event of the requeued or
# restarted job. One query for all counted failures; the (job, kind, ts) index serves each.
_RUNNING_AGAIN_SQL = """
SELECT f.id, CASE WHEN f.job_id IS NOT NULL THEN (
    SELECT min(e.ts) FROM jobs_jobevent e
    WHERE e.job_id = f.job_id AND e.kind = 'started' AND e.ts > f.occurred_at
) ELSE (
    SELECT min(s.ts) FROM (
        SELECT DISTINCT a.job_id FROM jobs_joballocation a
        WHERE a.node_id = f.node_id AND a.start <= f.occurred_at
          AND (a."end" IS NULL OR a."end" >= f.occurred_at)
    ) j CROSS JOIN LATERAL (
        SELECT min(e.ts) AS ts FROM jobs_jobevent e
        WHERE e.job_id = j.job_id AND e.kind = 'started' AND e.ts > f.occurred_at
    ) s
) END
FROM failures_failureevent f WHERE f.id = ANY(%s)
"""


def _p95(values: list[float]) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def running_again_after(failures: list[FailureEvent]) -> dict[int, datetime]:
    """failure id -> when its job (or a job on its node) started again, for those that did."""
    if not failures:
        return {}
    with connection.cursor() as cur:
        cur.execute(_RUNNING_AGAIN_SQL, [[f.pk for f in failures]])
        return {pk: ts for pk, ts in cur.fetchall() if ts is not None}


def _time_to_recover(failures: list[FailureEvent]) -> list[dict]:
    """Median and p95 seconds from a failure to its job running again, per category."""
    again = running_again_after(failures)
    per: dict[str, list[float]] = defaultdict(list)
    counts: Counter[str] = Counter()
    for f in failures:
        category = f.category or taxonomy.Category.UNKNOWN.value
        counts[category] += 1
        counts["all"] += 1
        if f.pk in again:
            seconds = (again[f.pk] - f.occurred_at).total_seconds()
            per[category].append(seconds)
            per["all"].append(seconds)
    order = [c.value for c in taxonomy.Category]
    keys = sorted(
        (k for k in counts if k != "all"), key=lambda k: order.index(k) if k in order else 99
    )
    return [
        {
            "category": key,
            "failures": counts[key],
            "running_again": len(per[key]),
            "median_s": _median(per[key]),
            "p95_s": _p95(per[key]),
        }
        for key in [*keys, "all"]
        if counts[key]
    ]


def _bucket(gpus: int | None) -> str:
    g = max(gpus or 1, 1)
    return next(label for lo, hi, label in SIZE_BUCKETS if lo <= g <= hi)


def _offenders(window: Window, failures: list[FailureEvent], by_id: dict[int, Node]) -> list[dict]:
    """Nodes with 2+ failures in the window (Meta's lemon-node signals)."""
    per: dict[int, list[FailureEvent]] = defaultdict(list)
    for e in failures:
        node_id = e.blamed_node_id or (e.node_id if e.kind == FailureKind.GPU_ERROR else None)
        if node_id:
            per[node_id].append(e)
    ids = [i for i, es in per.items() if len(es) >= 2]
    xids = Counter(
        GpuErrorEvent.objects.filter(
            node_id__in=ids, ts__gte=window.since, ts__lt=window.until
        ).values_list("node_id", flat=True)
    )
    node_fails = Counter(
        Job.objects.filter(
            state=JobState.NODE_FAIL,
            end_at__gte=window.since,
            end_at__lt=window.until,
            allocations__node_id__in=ids,
        )
        .values_list("allocations__node_id", flat=True)
        .distinct()
    )
    now = min(timezone.now(), window.until)
    rows = []
    for node_id in ids:
        es = per[node_id]
        node = by_id.get(node_id)
        if node is None:
            continue
        last = max(e.occurred_at for e in es)
        rows.append(
            {
                "node": node.hostname,
                "failures": len(es),
                "jobs_failed": len({e.job_id for e in es if e.job_id}),
                "xids": xids[node_id],
                "node_fails": node_fails[node_id],
                "causes": ", ".join(sorted({e.cause for e in es if e.cause})),
                "days_since_last": max(0.0, (now - last).total_seconds() / 86400),
            }
        )
    return sorted(rows, key=lambda r: (-r["failures"], r["node"]))


def _ettr(window: Window) -> list[dict]:
    """Effective training time ratio of each pretraining job: productive time / wall-clock
    from its first start to its end (or now). Productive = time allocated minus the rework
    each failure cost (time since the last checkpoint)."""
    jobs = list(
        Job.objects.filter(
            cluster=window.cluster, job_type=JobType.PRETRAIN, start_at__lt=window.until
        )
        .filter(Q(end_at__isnull=True) | Q(end_at__gte=window.since))
        .annotate(n_failures=Count("failures", filter=Q(failures__kind=FailureKind.JOB_FAILURE)))
        .order_by("-start_at")[:200]
    )
    now = min(timezone.now(), window.until)
    runs: dict[int, list[tuple[datetime, datetime | None]]] = defaultdict(list)
    for job_id, start, end in (
        JobAllocation.objects.filter(job__in=jobs).values_list("job_id", "start", "end").distinct()
    ):
        runs[job_id].append((start, end))
    lost: dict[int, float] = defaultdict(float)
    for job_id, gpu_h, gpus in FailureEvent.objects.filter(
        job__in=jobs, kind=FailureKind.JOB_FAILURE
    ).values_list("job_id", "gpu_hours_lost", "job__gpus_requested"):
        if gpu_h:
            lost[job_id] += gpu_h / max(gpus or 1, 1) * 3600
    rows = []
    for job in jobs:
        intervals = sorted({(s, e or job.end_at or now) for s, e in runs[job.id]}) or (
            [(job.start_at, job.end_at or now)] if job.start_at else []
        )
        if not intervals:
            continue
        first = intervals[0][0]
        last = job.end_at or now
        wall = max((last - first).total_seconds(), 1.0)
        allocated = _union_seconds(intervals)
        productive = max(0.0, allocated - lost[job.id])
        rows.append(
            {
                "job": job,
                "wall_h": wall / 3600,
                "productive_h": productive / 3600,
                "ettr": min(productive / wall, 1.0),
                "failures": job.n_failures,
            }
        )
    return rows


def _union_seconds(intervals: list[tuple[datetime, datetime]]) -> float:
    total, cur_start, cur_end = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += (cur_end - cur_start).total_seconds()
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    if cur_end is not None:
        total += (cur_end - cur_start).total_seconds()
    return total


def used_checkpoint_interval_s(job: Job) -> float | None:
    """Median gap between the successive last_checkpoint_at values seen; None: unknown."""
    stamps = list(CheckpointSeen.objects.filter(job=job).values_list("at", flat=True))
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False)]
    gaps = [g for g in gaps if g > 0]
    return statistics.median(gaps) if gaps else None


def young_daly_s(write_s: float, mtbf_s: float) -> float:
    """Young's optimal checkpoint interval tau* = sqrt(2 x delta x M)."""
    return math.sqrt(2 * write_s * mtbf_s)


def _checkpoints(window: Window, rate: float | None, write_s: float) -> list[dict]:
    """Running pretraining jobs: Young/Daly interval at their node count beside the used one."""
    rows = []
    for job in Job.objects.filter(
        cluster=window.cluster, job_type=JobType.PRETRAIN, state=JobState.RUNNING
    ).order_by("-start_at")[:200]:
        nodes = (
            job.nodes_requested
            or JobAllocation.objects.filter(job=job).values("node_id").distinct().count()
            or max(1, math.ceil((job.gpus_requested or 1) / 8))
        )
        mtbf_s = 86400 / (nodes * rate / 1000) if rate else None
        rows.append(
            {
                "job": job,
                "nodes": nodes,
                "mtbf_h": mtbf_s / 3600 if mtbf_s else None,
                "optimal_s": young_daly_s(write_s, mtbf_s) if mtbf_s else None,
                "used_s": used_checkpoint_interval_s(job),
                "last_checkpoint_at": job.last_checkpoint_at,
            }
        )
    return rows
