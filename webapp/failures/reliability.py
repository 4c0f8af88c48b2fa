"""Reliability of a cluster over a window: failure rate, MTBF (cluster, node, job size), the
shape of Acme's Table 3, time to recover, repeat offenders, ETTR and Young/Daly intervals.

Definitions (docs/failure-signatures.md section 9): a failure is an unplanned interruption, so
outcomes (cancelled, time limit, preemption) are left out. Counted: job failures, plus critical
GPU errors on a node that no job failure within 15 min blames (a GPU error that killed a job is
one failure, not two).

Rates divide by the time Vigil actually watched, never by the window's length: a node is
observed from its first report in the window (its first sample, or its first contact when
that is earlier) to its last (the newest sample or batch), minus the time the scheduler has
had it out of service (draining, drained, down). The cluster is observed while any of its
nodes is; jobs are observed while they ran within that time.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min, OuterRef, Q, Subquery
from django.utils import timezone

from webapp.core.windows import Window
from webapp.failures import taxonomy
from webapp.failures.models import CheckpointSeen, FailureEvent, FailureKind, GpuErrorEvent
from webapp.fleet.choices import SCHEDULER_OUT_OF_SERVICE
from webapp.fleet.models import Node
from webapp.jobs.choices import JobState, JobType
from webapp.jobs.models import Job, JobAllocation
from webapp.telemetry.models import NodeSample

SAME_INCIDENT = timedelta(minutes=15)
# Job size buckets (GPUs) for MTBF per job size.
SIZE_BUCKETS: tuple[tuple[int, int, str], ...] = (
    (1, 1, "1 GPU"),
    (2, 8, "2-8 GPUs"),
    (9, 64, "9-64 GPUs"),
    (65, 256, "65-256 GPUs"),
    (257, 10**9, "257+ GPUs"),
)
# A failure seen later than this after it happened was not detected live: it came from a
# collector's spool replayed after an outage, a history backfill or a trace import. The slowest
# live path is the Slurm watcher's poll plus a diagnosis queue (seconds to a minute or two), so
# ten minutes leaves room for a slow worker and none for a replay of an hour's spool.
LIVE_DETECTION_MAX = timedelta(minutes=10)

Interval = tuple[datetime, datetime]


# --- Replayed or late failures ---------------------------------------------------------------


def detected_live(failure: FailureEvent, bound: timedelta = LIVE_DETECTION_MAX) -> bool:
    """Whether the failure was detected as it happened: not replayed, backfilled or imported
    (detected more than `bound` after it occurred). The one test every page, CSV, email and
    statistic uses."""
    if failure.detected_at is None or failure.occurred_at is None:
        return True
    return failure.detected_at - failure.occurred_at <= bound


def reported_late_s(failure: FailureEvent, bound: timedelta = LIVE_DETECTION_MAX) -> float | None:
    """Seconds between the failure and its detection when it was not detected live, else
    None (what a page or an email says after the failure's time)."""
    if detected_live(failure, bound):
        return None
    return (failure.detected_at - failure.occurred_at).total_seconds()


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


# --- Rows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeMtbf:
    node: str
    failures: int
    observed_h: float
    mtbf_h: float | None


@dataclass(frozen=True)
class SizeMtbf:
    size: str
    job_hours: float  # run time of jobs of this size while the cluster was observed
    failures: int
    mtbf_observed_h: float | None
    mtbf_formula_h: float | None


@dataclass
class CauseRow:
    category: str
    cause: str
    alias: str
    jobs: int = 0
    gpu_hours: float = 0.0
    job_share: float | None = None
    gpu_share: float | None = None


@dataclass
class CategoryRow:
    category: str
    jobs: int = 0
    gpu_hours: float = 0.0
    job_share: float | None = None
    gpu_share: float | None = None
    causes: list[CauseRow] = field(default_factory=list)


@dataclass(frozen=True)
class RecoveryRow:
    category: str
    failures: int
    running_again: int
    median_s: float | None
    p95_s: float | None


@dataclass(frozen=True)
class OffenderRow:
    node: str
    failures: int
    jobs_failed: int
    xids: int
    node_fails: int
    causes: str
    days_since_last: float


@dataclass(frozen=True)
class EttrRow:
    job: Job
    wall_h: float
    productive_h: float
    ettr: float
    failures: int


@dataclass(frozen=True)
class CheckpointRow:
    job: Job
    nodes: int
    mtbf_h: float | None
    optimal_s: float | None
    used_s: float | None
    last_checkpoint_at: datetime | None
    checkpoint_write_s: float


@dataclass
class Reliability:
    window: Window
    nodes: int  # nodes observed in the window
    node_days: float  # node-time observed in service
    cluster_hours: float  # time any node was observed in service
    failures: int
    rate_per_1000_node_days: float | None
    mtbf_h: float | None  # cluster_hours / failures
    checkpoint_write_s: float  # the Young/Daly delta used: the page's value or the setting
    per_node: list[NodeMtbf] = field(default_factory=list)
    per_size: list[SizeMtbf] = field(default_factory=list)
    times: dict = field(default_factory=dict)
    by_cause: list[CauseRow] = field(default_factory=list)
    table3: list[CategoryRow] = field(default_factory=list)
    offenders: list[OffenderRow] = field(default_factory=list)
    ettr: list[EttrRow] = field(default_factory=list)
    checkpoints: list[CheckpointRow] = field(default_factory=list)
    # Time to recover per category (and "all"): failure occurred -> its job running again.
    recovery: list[RecoveryRow] = field(default_factory=list)


# --- Observed time ---------------------------------------------------------------------------


def _union(intervals: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _hours(intervals: list[Interval]) -> float:
    return sum((e - s).total_seconds() for s, e in _union(intervals)) / 3600


def _clip(intervals: list[Interval], within: list[Interval]) -> list[Interval]:
    """The parts of `intervals` inside `within` (both unions of disjoint intervals)."""
    out = []
    for s, e in _union(intervals):
        for ws, we in within:
            lo, hi = max(s, ws), min(e, we)
            if hi > lo:
                out.append((lo, hi))
    return out


def nodes_observed(window: Window) -> dict[int, tuple[Node, list[Interval]]]:
    """node id -> (node, the intervals it was observed in service within the window), for
    every node of the cluster.

    First report: the earlier of its first sample in the window and its first contact (its
    GPUs' registration); last report: the later of its newest sample and its last batch. The
    scheduler's current out-of-service state is cut from the end; one query."""
    until = min(window.until, timezone.now())
    first_sample = (
        NodeSample.objects.filter(node_id=OuterRef("pk"), ts__gte=window.since, ts__lt=until)
        .order_by("ts")
        .values("ts")[:1]
    )
    nodes = Node.objects.filter(cluster=window.cluster).annotate(
        first_contact=Min("gpus__first_seen"), first_sample=Subquery(first_sample)
    )
    out = {}
    for node in nodes:
        firsts = [t for t in (node.first_contact, node.first_sample) if t is not None]
        lasts = [t for t in (node.last_seen, node.last_contact_at) if t is not None]
        if not firsts or not lasts:  # never reported: not observed
            out[node.id] = (node, [])
            continue
        lo, hi = max(min(firsts), window.since), min(max(lasts), until)
        if node.state in SCHEDULER_OUT_OF_SERVICE and node.state_since is not None:
            hi = min(hi, max(node.state_since, lo))
        out[node.id] = (node, [(lo, hi)] if hi > lo else [])
    return out


# --- The page --------------------------------------------------------------------------------


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


def _node_of(e: FailureEvent) -> int | None:
    return e.blamed_node_id or (e.node_id if e.kind == FailureKind.GPU_ERROR else None)


def reliability(window: Window, ckpt_write_s: float | None = None) -> Reliability:
    delta = ckpt_write_s or settings.VIGIL_CHECKPOINT_WRITE_S
    observed = nodes_observed(window)
    node_h = {node_id: _hours(spans) for node_id, (_n, spans) in observed.items()}
    cluster_spans = _union([s for _n, spans in observed.values() for s in spans])
    cluster_h = _hours(cluster_spans)
    node_days = sum(node_h.values()) / 24
    failures = counted_failures(window)
    n = len(failures)
    rate = 1000 * n / node_days if node_days else None
    result = Reliability(
        window=window,
        nodes=sum(1 for h in node_h.values() if h > 0),
        node_days=node_days,
        cluster_hours=cluster_h,
        failures=n,
        rate_per_1000_node_days=rate,
        mtbf_h=cluster_h / n if n and cluster_h else None,
        checkpoint_write_s=delta,
    )

    # Per node: hours the node was observed in service / failures blamed on (or on) it.
    per_node: Counter[int] = Counter(i for i in map(_node_of, failures) if i)
    for node_id, count in per_node.most_common():
        if node_id not in observed:
            continue
        hours = node_h[node_id]
        result.per_node.append(
            NodeMtbf(observed[node_id][0].hostname, count, hours, hours / count if hours else None)
        )

    # Per job size: observed (run hours of jobs of that size while the cluster was observed /
    # their failures) beside the formula 1 / (N_nodes x r_f) at the bucket's typical node
    # count (8 GPUs per node).
    run_h = _job_hours_by_size(window, cluster_spans)
    fails_by_size = Counter(_bucket(e.job.gpus_requested) for e in failures if e.job is not None)
    for lo, _hi, label in SIZE_BUCKETS:
        nodes_n = max(1, math.ceil(lo / 8))
        formula = 24 / (nodes_n * rate / 1000) if rate else None
        fails = fails_by_size[label]
        result.per_size.append(
            SizeMtbf(
                label,
                run_h[label],
                fails,
                run_h[label] / fails if fails and run_h[label] else None,
                formula,
            )
        )

    # Replayed or backfilled failures were "detected" at replay: only live ones count toward
    # time to detect. Diagnosis starts at detection, so it counts them all.
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
    result.by_cause, result.table3 = _table3(failures)
    result.offenders = _offenders(window, failures, {i: nd for i, (nd, _s) in observed.items()})
    result.recovery = _time_to_recover(failures)
    result.ettr = _ettr(window)
    result.checkpoints = _checkpoints(window, rate, delta)
    return result


def _job_hours_by_size(window: Window, cluster_spans: list[Interval]) -> dict[str, float]:
    """Hours each size of job ran while the cluster was observed: its runs (allocations), or
    its start to its end when none is on record."""
    jobs = Job.objects.filter(cluster=window.cluster, start_at__lt=window.until).filter(
        Q(end_at__isnull=True) | Q(end_at__gte=window.since)
    )
    until = min(window.until, timezone.now())
    runs: dict[int, list[Interval]] = defaultdict(list)
    for job_id, start, end in JobAllocation.objects.filter(job__in=jobs).values_list(
        "job_id", "start", "end"
    ):
        if start is not None:
            runs[job_id].append((start, end or until))
    out: dict[str, float] = defaultdict(float)
    for job_id, gpus, start, end in jobs.values_list("id", "gpus_requested", "start_at", "end_at"):
        spans = runs.get(job_id) or ([(start, end or until)] if start else [])
        out[_bucket(gpus)] += _hours(_clip(spans, cluster_spans))
    return out


def _table3(failures: list[FailureEvent]) -> tuple[list[CauseRow], list[CategoryRow]]:
    """GPU-hours lost per cause, and the paper's Table 3 shape (every job failure, outcomes
    apart: count, share of failed jobs, lost GPU time and its share) per category and cause."""
    job_failures = [e for e in failures if e.kind == FailureKind.JOB_FAILURE]
    lost_total = sum(e.gpu_hours_lost or 0 for e in job_failures)
    causes: dict[tuple[str, str], CauseRow] = {}
    for e in job_failures:
        key = (e.category or "unknown", e.cause or "unknown")
        row = causes.setdefault(key, CauseRow(key[0], key[1], e.alias))
        row.jobs += 1
        row.gpu_hours += e.gpu_hours_lost or 0
    categories: dict[str, CategoryRow] = {}
    for row in causes.values():
        row.job_share = row.jobs / len(job_failures) if job_failures else None
        row.gpu_share = row.gpu_hours / lost_total if lost_total else None
        cat = categories.setdefault(row.category, CategoryRow(row.category))
        cat.jobs += row.jobs
        cat.gpu_hours += row.gpu_hours
        cat.causes.append(row)
    for cat in categories.values():
        cat.job_share = cat.jobs / len(job_failures) if job_failures else None
        cat.gpu_share = cat.gpu_hours / lost_total if lost_total else None
        cat.causes.sort(key=lambda r: (-r.gpu_hours, -r.jobs))
    order = {c.value: i for i, c in enumerate(taxonomy.Category)}
    return (
        sorted(causes.values(), key=lambda r: -r.gpu_hours),
        sorted(categories.values(), key=lambda c: order.get(c.category, 99)),
    )


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


def _time_to_recover(failures: list[FailureEvent]) -> list[RecoveryRow]:
    """Median and p95 seconds from a failure to its job running again, per category. A
    failure replayed or reported late is counted but has no time: its time holds the delay
    before Vigil heard of it (as on the recovery page)."""
    again = running_again_after(failures)
    per: dict[str, list[float]] = defaultdict(list)
    counts: Counter[str] = Counter()
    ran: Counter[str] = Counter()  # running again, replayed or not
    for f in failures:
        category = f.category or taxonomy.Category.UNKNOWN.value
        counts[category] += 1
        counts["all"] += 1
        if f.pk in again:
            ran[category] += 1
            ran["all"] += 1
        if f.pk in again and detected_live(f):
            seconds = (again[f.pk] - f.occurred_at).total_seconds()
            per[category].append(seconds)
            per["all"].append(seconds)
    order = [c.value for c in taxonomy.Category]
    keys = sorted(
        (k for k in counts if k != "all"), key=lambda k: order.index(k) if k in order else 99
    )
    return [
        RecoveryRow(key, counts[key], ran[key], _median(per[key]), _p95(per[key]))
        for key in [*keys, "all"]
        if counts[key]
    ]


def _bucket(gpus: int | None) -> str:
    g = max(gpus or 1, 1)
    return next(label for lo, hi, label in SIZE_BUCKETS if lo <= g <= hi)


def _offenders(
    window: Window, failures: list[FailureEvent], by_id: dict[int, Node]
) -> list[OffenderRow]:
    """Nodes with 2+ failures in the window (Meta's lemon-node signals)."""
    per: dict[int, list[FailureEvent]] = defaultdict(list)
    for e in failures:
        node_id = _node_of(e)
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
    missing = [i for i in ids if i not in by_id]
    by_id = {**by_id, **Node.objects.in_bulk(missing)} if missing else by_id
    now = min(timezone.now(), window.until)
    rows = []
    for node_id in ids:
        es = per[node_id]
        node = by_id.get(node_id)
        if node is None:
            continue
        last = max(e.occurred_at for e in es)
        rows.append(
            OffenderRow(
                node=node.hostname,
                failures=len(es),
                jobs_failed=len({e.job_id for e in es if e.job_id}),
                xids=xids[node_id],
                node_fails=node_fails[node_id],
                causes=", ".join(sorted({e.cause for e in es if e.cause})),
                days_since_last=max(0.0, (now - last).total_seconds() / 86400),
            )
        )
    return sorted(rows, key=lambda r: (-r.failures, r.node))


def _ettr(window: Window) -> list[EttrRow]:
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
        allocated = _hours(intervals) * 3600
        productive = max(0.0, allocated - lost[job.id])
        rows.append(
            EttrRow(
                job, wall / 3600, productive / 3600, min(productive / wall, 1.0), job.n_failures
            )
        )
    return rows


def used_checkpoint_interval_s(job: Job) -> float | None:
    """Median gap between the successive last_checkpoint_at values seen; None: unknown."""
    stamps = list(CheckpointSeen.objects.filter(job=job).values_list("at", flat=True))
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False)]
    gaps = [g for g in gaps if g > 0]
    return statistics.median(gaps) if gaps else None


def young_daly_s(write_s: float, mtbf_s: float) -> float:
    """Young's optimal checkpoint interval tau* = sqrt(2 x delta x M)."""
    return math.sqrt(2 * write_s * mtbf_s)


def _checkpoints(window: Window, rate: float | None, write_s: float) -> list[CheckpointRow]:
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
            CheckpointRow(
                job=job,
                nodes=nodes,
                mtbf_h=mtbf_s / 3600 if mtbf_s else None,
                optimal_s=young_daly_s(write_s, mtbf_s) if mtbf_s else None,
                used_s=used_checkpoint_interval_s(job),
                last_checkpoint_at=job.last_checkpoint_at,
                checkpoint_write_s=write_s,
            )
        )
    return rows
