"""Reads and plain arithmetic of the job page at any job size: the job's telemetry as
bands across its GPUs (min / median / max per time bucket) with the outlier GPUs named, the
allocation per node over time, energy per node, and the job's events in words.

A 2,048-GPU job is 2,048 lines per metric: nobody can read that, and drawing it took 45 s.
What a reader wants at a glance is how the job's GPUs moved together and which ones did not,
so the database reduces the samples to three numbers per bucket and one mean per GPU; only the
few outlier GPUs come back as lines. Every query here costs one pass over the job's samples,
whatever the job's size, and the page's size grows with the job's nodes, never with GPUs x GPUs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from webapp.core.charts import SERIES_AXES
from webapp.jobs.choices import JobEventKind
from webapp.jobs.dispatch import JobEnergyAnswer, TimelineEntry
from webapp.jobs.models import Job, JobEvent
from webapp.jobs.selectors import (
    AllocationRow,
    allocation_intervals,
    job_read_budget,
    job_span,
    means_label,
)
from webapp.telemetry.selectors import (
    SERIES_METRICS,
    Band,
    gpu_sample_latest,
    intervals_bands,
    intervals_series,
)

# Points per band line: enough to show a checkpoint stall of a few minutes in a day-long job.
BAND_POINTS = 240
# Raw buckets are a minute at least: collectors sample every 10-15 s, so a minute holds several
# samples of every GPU; narrower buckets would hold GPUs sampled out of phase in different ones.
RAW_BUCKET_MIN_S = 60
# Outlier GPUs named per metric (and drawn as lines over the bands).
OUTLIERS_MAX = 5
# A GPU is an outlier when its mean over the job is further from the GPUs' median than
# OUTLIER_MADS scaled median absolute deviations (the "3 MAD" rule of Leys et al., 2013, J.
# Exp. Soc. Psychol. 49(4)) and than a floor per metric, so that the ordinary jitter of GPUs in
# lockstep names nobody. Floors, in the stored unit: 10 points of utilization, 0.1 of SM
# activity, 50 W, 4 GiB, 5 °C (about a tenth of each metric's working range on an H100).
OUTLIER_MADS = 3.0
MAD_TO_SIGMA = 1.4826  # MAD x 1.4826 estimates the standard deviation of a normal sample
OUTLIER_FLOOR: dict[str, float] = {
    "gpu_util": 10.0,
    "sm_active": 0.1,
    "fb_used_bytes": 4 * 2**30,
    "power_w": 50.0,
    "gpu_temp_c": 5.0,
}
# Allocation heatmap columns (time buckets) and node rows at most (more nodes: the busiest
# rows first would hide the rest, so rows are kept and drawn thinner; see figures).
ALLOCATION_BUCKETS = 120


# --- Telemetry bands ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Outlier:
    metric: str
    allocation: AllocationRow
    mean: float
    median: float  # of all the job's GPUs, for the sentence "x where the job's median is y"


@dataclass
class JobBands:
    source: str  # "raw samples, 45-s means" or "1-minute rollup, 5-minute means"
    bucket_s: int
    ts: list[datetime] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)  # GPUs reporting in each bucket
    bands: dict[str, Band] = field(default_factory=lambda: {m: Band() for m in SERIES_METRICS})
    means: dict[int, dict[str, float | None]] = field(default_factory=dict)  # alloc id -> mean
    outliers: list[Outlier] = field(default_factory=list)
    # Outlier GPUs' own lines: alloc id -> (ts, {metric: values}).
    lines: dict[int, tuple[list[datetime], dict[str, list[float | None]]]] = field(
        default_factory=dict
    )

    @property
    def has_samples(self) -> bool:
        return bool(self.ts)


def gpu_outliers(
    means: dict[int, dict[str, float | None]], metric: str, *, limit: int = OUTLIERS_MAX
) -> list[tuple[int, float, float]]:
    """(alloc id, mean, median) of the GPUs whose mean of `metric` stands out from the rest
    (see OUTLIER_MADS), furthest first, at most `limit`. Fewer than 3 GPUs: none (no "rest")."""
    values = {a: m[metric] for a, m in means.items() if m.get(metric) is not None}
    if len(values) < 3:
        return []
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    threshold = max(OUTLIER_MADS * MAD_TO_SIGMA * mad, OUTLIER_FLOOR.get(metric, 0.0))
    far = [(a, v) for a, v in values.items() if abs(v - median) > threshold]
    far.sort(key=lambda av: (-abs(av[1] - median), av[0]))
    return [(a, v, median) for a, v in far[:limit]]


def outlier_rows(outliers: list[Outlier]) -> list[tuple[Outlier, str, str, str]]:
    """Each outlier with its metric's name and its mean and the median in display units."""
    rows = []
    for o in outliers:
        title, convert = SERIES_AXES[o.metric]
        rows.append((o, title, f"{convert(o.mean):,.1f}", f"{convert(o.median):,.1f}"))
    return rows


def job_bands(job: Job, allocations: list[AllocationRow], *, now: datetime) -> JobBands:
    """The job's SERIES_METRICS as bands across its GPUs, its outlier GPUs and their lines
    (two queries, whatever the job's size): telemetry's intervals_bands reads the finest
    tier that the job's span x GPUs fits (job_read_budget: raw samples for a short or small
    job, the 1-minute rollup, then the hourly rollup, so the cost is bounded whatever the
    job's length), the next coarser tier once the job is older than that tier keeps, or
    another when it holds none of the job's telemetry."""
    start, end = job_span(job, allocations, now)
    intervals = allocation_intervals(allocations, now)
    read = intervals_bands(
        intervals,
        SERIES_METRICS,
        lo=start,
        hi=end,
        now=now,
        budget=job_read_budget(),
        points=BAND_POINTS,
        min_bucket_s=RAW_BUCKET_MIN_S,
    )
    resolution = read.resolution
    out = JobBands(
        source=means_label(resolution, " per GPU"),
        bucket_s=resolution.bucket_s or RAW_BUCKET_MIN_S,
        ts=read.ts,
        gpus=read.gpus,
        bands=read.bands,
        means=read.means,
    )
    if not read.ts and not read.means:
        return out

    by_id = {a.id: a for a in allocations}
    for m in SERIES_METRICS:
        for alloc_id, mean, median in gpu_outliers(out.means, m):
            out.outliers.append(Outlier(m, by_id[alloc_id], mean, median))
    wanted = {o.allocation.id for o in out.outliers}
    if wanted:
        _, lines = intervals_series(
            [i for i in intervals if i.key in wanted],
            SERIES_METRICS,
            lo=start,
            hi=end,
            now=now,
            at=resolution,
        )
        for alloc_id in sorted(wanted):
            line = lines[alloc_id]
            if line.ts:
                out.lines[alloc_id] = (line.ts, line.values)
    return out


# --- Allocation per node over time -------------------------------------------------------------


@dataclass
class NodeAllocation:
    """GPUs of one node the job held in each time bucket (the most at any moment of it)."""

    node_id: int
    hostname: str
    gpus: int  # distinct GPUs ever held
    held: list[int]


def allocation_by_node(
    allocations: list[AllocationRow],
    start: datetime,
    end: datetime,
    *,
    now: datetime,
    buckets: int = ALLOCATION_BUCKETS,
) -> tuple[list[datetime], list[NodeAllocation]]:
    """Bucket start times and, per node (hostname order), the GPUs held in each bucket.

    A GPU counts in a bucket when its allocation overlaps it; linear in allocations x buckets
    touched (an allocation spanning the whole job touches every bucket once)."""
    span = max((end - start).total_seconds(), 1.0)
    width = span / buckets
    edges = [start + timedelta(seconds=width * i) for i in range(buckets)]
    nodes: dict[int, NodeAllocation] = {}
    seen: dict[int, set[int]] = {}
    for a in allocations:
        row = nodes.get(a.node_id)
        if row is None:
            row = nodes[a.node_id] = NodeAllocation(a.node_id, a.hostname, 0, [0] * buckets)
            seen[a.node_id] = set()
        seen[a.node_id].add(a.gpu_index)
        a_end = a.end or now
        first = max(0, int((a.start - start).total_seconds() // width))
        last = min(buckets - 1, int(max((a_end - start).total_seconds() - 1e-6, 0) // width))
        for i in range(first, last + 1):
            row.held[i] += 1
    for node_id, row in nodes.items():
        row.gpus = len(seen[node_id])
        # Two allocations of one GPU in one bucket (a requeue) hold one GPU, not two.
        row.held = [min(h, row.gpus) for h in row.held]
    return edges, sorted(nodes.values(), key=lambda n: n.hostname)


# --- Energy per node ---------------------------------------------------------------------------


@dataclass
class NodeEnergy:
    node_id: int
    hostname: str
    kwh: float = 0.0
    resets: int = 0
    # (GPU index, kWh, counter resets) in index order: the per-GPU detail shown on demand.
    gpus: list[tuple[int, float, int]] = field(default_factory=list)


def energy_by_node(energy: JobEnergyAnswer | None) -> list[NodeEnergy]:
    """The job's per-GPU energy summed per node (hostname order), each GPU kept for detail."""
    nodes: dict[int, NodeEnergy] = {}
    for e in energy.per_gpu if energy else []:
        a = e.allocation
        row = nodes.setdefault(a.node_id, NodeEnergy(a.node_id, a.hostname))
        row.kwh += e.kwh
        row.resets += e.resets
        row.gpus.append((a.gpu_index, e.kwh, e.resets))
    for row in nodes.values():
        row.gpus.sort()
    return sorted(nodes.values(), key=lambda n: n.hostname)


# --- Events in words ---------------------------------------------------------------------------

_NODES_NAMED = 4  # nodes an allocation sentence names before "and N more"


def _indices(indices: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> "0-3, 6"."""
    out: list[str] = []
    for i in sorted(set(indices)):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def event_words(detail: dict | None) -> str:
    """A job event's detail as a sentence: who reported it and which GPUs it allocated.

    The detail is what the scheduler watcher sent (webapp/jobs/services.py): its source, the
    node that sent it and, for a start, {node: [GPU indices]}. Keys it does not know are kept as
    "key: value" so nothing the watcher said is hidden."""
    if not detail:
        return ""
    detail = dict(detail)
    parts = []
    source, sender = detail.pop("source", None), detail.pop("sender", None)
    if source or sender:
        said = f"reported by {source or 'the scheduler'}"
        parts.append(f"{said} via {sender}" if sender else said)
    allocation = detail.pop("allocation", None)
    if isinstance(allocation, dict) and allocation:
        gpus = sum(len(v) for v in allocation.values() if isinstance(v, list))
        named = [
            f"{node} (GPU {_indices(v)})" if isinstance(v, list) else str(node)
            for node, v in sorted(allocation.items())[:_NODES_NAMED]
        ]
        more = len(allocation) - _NODES_NAMED
        nodes = ", ".join(named) + (
            f" and {more:,} more node{'s' if more > 1 else ''}" if more > 0 else ""
        )
        parts.append(
            f"{gpus:,} GPU{'s' if gpus != 1 else ''} on {len(allocation):,} "
            f"node{'s' if len(allocation) != 1 else ''}: {nodes}"
        )
    for key, value in sorted(detail.items()):
        parts.append(f"{key.replace('_', ' ')}: {value}")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:]


# --- Efficiency verdict ------------------------------------------------------------------------

# Below this mean GPU utilization the job's GPUs were idle more than half their time, so its
# GPU-hours bought less than half their work: the verdict calls it low.
LOW_UTIL_PCT = 50.0
# A GPU whose mean utilization over its allocation rounds to 0% did nothing while held.
IDLE_GPU_PCT = 0.5


@dataclass(frozen=True)
class Verdict:
    """The job's efficiency at a glance, as Princeton's jobstats opens its report: a level
    ("idle", "low", "good", "none"), a headline and one line per quantity."""

    level: str
    headline: str
    lines: list[str] = field(default_factory=list)
    idle: list[str] = field(default_factory=list)  # labels of the GPUs held at 0% throughout


def job_means(
    job: Job, allocations: list[AllocationRow], *, now: datetime
) -> dict[int, dict[str, float | None]]:
    """Each allocation's mean of SERIES_METRICS over its own time (one query, the tier
    job_bands would read): what the verdict of a job too small for bands reads."""
    start, end = job_span(job, allocations, now)
    read = intervals_bands(
        allocation_intervals(allocations, now),
        SERIES_METRICS,
        lo=start,
        hi=end,
        now=now,
        budget=job_read_budget(),
        points=1,
        min_bucket_s=RAW_BUCKET_MIN_S,
    )
    return read.means


def job_gpu_limits(allocations: list[AllocationRow]) -> tuple[float | None, float | None]:
    """(power limit W, memory total bytes) of the job's GPUs, read from the latest sample of its
    first GPU: a job's GPUs are one model (a scheduler allocates a job one GPU type)."""
    first = next((a.gpu_id for a in allocations if a.gpu_id), None)
    if first is None:
        return None, None
    _, values = gpu_sample_latest(first)
    return values.get("power_limit_w"), values.get("fb_total_bytes")


@dataclass(frozen=True)
class AllocationSize:
    """How many GPUs and nodes the job holds, and in how many runs. A requeued job has one
    allocation row per GPU per run, so its rows overcount its GPUs: the size is its latest
    run's (a requeue keeps the job's request), and `runs` says how many there were."""

    gpus: int
    nodes: int
    runs: int

    @property
    def words(self) -> str:
        """ "8 GPUs on 1 node", with ", 2 runs" for a requeued job."""
        out = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''} on {self.nodes} node" + (
            "s" if self.nodes != 1 else ""
        )
        return out + (f", {self.runs} runs" if self.runs > 1 else "")


def allocation_size(allocations: list[AllocationRow]) -> AllocationSize:
    """The GPUs and nodes of the job's latest run (the rows sharing the latest start: the
    scheduler watcher opens one row per GPU of a run at the run's start) and its runs."""
    if not allocations:
        return AllocationSize(0, 0, 0)
    latest = max(a.start for a in allocations)
    run = [a for a in allocations if a.start == latest]
    return AllocationSize(
        gpus=len({(a.node_id, a.gpu_index) for a in run}),
        nodes=len({a.node_id for a in run}),
        runs=len({a.start for a in allocations}),
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _held_words(k: int, held: int) -> str:
    """ "3 GPUs", "its 1 GPU", "all its 4 GPUs": k idle GPUs of the `held` ones."""
    gpus = f"{k:,} GPU{'s' if k != 1 else ''}"
    return gpus if k < held else (f"its {gpus}" if k == 1 else f"all its {gpus}")


def _idle_in_runs(
    per: dict[int, dict[str, float | None]],
    allocations: list[AllocationRow],
    labels: dict[int, str],
) -> list[str]:
    """One sentence per run of a requeued job in which GPUs sat at 0%: each run is judged on
    its own allocation rows (a GPU idle in run 2 may have worked in run 1), and named with its
    span, so the headline never reads as the job's whole life."""
    starts = sorted({a.start for a in allocations})
    out = []
    for number, start in enumerate(starts, 1):
        rows = [a for a in allocations if a.start == start and a.id in per]
        held = sorted({labels[a.id] for a in rows})
        idle = sorted({labels[a.id] for a in rows if (per[a.id]["gpu_util"] or 0.0) < IDLE_GPU_PCT})
        if not idle:
            continue
        ends = [a.end for a in rows]
        running = any(e is None for e in ends)
        begin = start.astimezone(UTC)
        span = (
            f"since {begin:%H:%M} UTC"
            if running
            else f"{begin:%H:%M}-{max(e for e in ends if e is not None).astimezone(UTC):%H:%M} UTC"
        )
        k = len(idle)
        verb = "have sat" if running and k > 1 else ("has sat" if running else "sat")
        out.append(
            f"In its run {number} ({span}), "
            + (_held_words(k, len(held)) if k == len(held) else f"{k:,} of its {len(held):,} GPUs")
            + f" {verb} at 0% utilization{' so far' if running else ''}"
            + (f": {', '.join(idle)}" if k < len(held) and k <= _NODES_NAMED else "")
            + "."
        )
    return out


def job_verdict(
    means: dict[int, dict[str, float | None]],
    allocations: list[AllocationRow],
    *,
    power_limit_w: float | None,
    memory_total_bytes: float | None,
    busy_util_pct: float,
) -> Verdict:
    """The verdict from each allocation's means over its own time (telemetry's per-interval
    means): the job's figure is the mean over its GPUs, each GPU weighing the same.

    `power_limit_w` and `memory_total_bytes`: of the job's GPUs (None: not reported, and the
    line gives the absolute figure only)."""
    labels = {a.id: a.label for a in allocations}
    per = {a: m for a, m in means.items() if m.get("gpu_util") is not None}
    # GPUs, not allocation rows: a requeued job holds a GPU once per run.
    size = allocation_size([a for a in allocations if a.id in per])
    if not per:
        return Verdict(
            "none", "No telemetry from the job's GPUs yet: no verdict on its efficiency."
        )

    def col(metric: str) -> list[float]:
        return [m[metric] for m in per.values() if m.get(metric) is not None]

    util = _mean(col("gpu_util")) or 0.0
    idle = sorted({labels.get(a, str(a)) for a, m in per.items() if m["gpu_util"] < IDLE_GPU_PCT})
    under = {labels.get(a, str(a)) for a, m in per.items() if m["gpu_util"] < busy_util_pct}
    n = size.gpus or len(per)  # means without an allocation row: one GPU each
    # The idle and underused GPUs are counted among every GPU the job held, in any run.
    held_any = len({labels.get(a, str(a)) for a in per})
    runs = f", {size.runs:,} runs" if size.runs > 1 else ""
    lines = [f"Mean GPU utilization {util:.0f}% over {n:,} GPU{'s' if n != 1 else ''}{runs}."]
    sm = _mean(col("sm_active"))
    if sm is not None:
        lines.append(f"Mean SM activity {100 * sm:.0f}% (the share of SMs busy).")
    mem = _mean(col("fb_used_bytes"))
    if mem is not None:
        used = f"Mean GPU memory used {mem / 2**30:.1f} GiB"
        lines.append(
            f"{used} of {memory_total_bytes / 2**30:.0f} GiB "
            f"({100 * mem / memory_total_bytes:.0f}%)."
            if memory_total_bytes
            else f"{used}."
        )
    power = _mean(col("power_w"))
    if power is not None:
        lines.append(
            f"Mean power {power:.0f} W against a {power_limit_w:.0f} W limit "
            f"({100 * power / power_limit_w:.0f}%)."
            if power_limit_w
            else f"Mean power {power:.0f} W."
        )
    if under and len(under) > len(idle):
        lines.append(
            f"{len(under):,} of {held_any:,} GPUs averaged under {busy_util_pct:g}% utilization."
        )
    in_runs = _idle_in_runs(per, allocations, labels) if idle and size.runs > 1 else []
    if in_runs:
        return Verdict("idle", " ".join(in_runs), lines, idle)
    if idle:
        k = len(idle)
        held = _held_words(k, held_any)
        # A running job's allocation is not whole yet (it may be loading its checkpoint).
        running = any(a.end is None for a in allocations if a.id in per)
        headline = (
            f"This job has held {held} at 0% utilization so far"
            if running
            else f"This job held {held} at 0% utilization for "
            f"{'its' if k == 1 else 'their'} whole allocation"
        ) + ((f": {', '.join(idle)}" if k < held_any and k <= _NODES_NAMED else "") + ".")
        return Verdict("idle", headline, lines, idle)
    if util < LOW_UTIL_PCT:
        return Verdict(
            "low",
            f"Low GPU utilization: {util:.0f}% on average, its GPUs idle over half their time.",
            lines,
        )
    return Verdict("good", f"GPUs well used: {util:.0f}% mean utilization.", lines)


# --- Timeline ----------------------------------------------------------------------------------


def run_entries(events: list[JobEvent]) -> list[TimelineEntry]:
    """The job's scheduler events as runs: its first run, each requeue, each run after one
    ("running again", numbered), and its end."""
    out = []
    runs = 0
    for e in events:
        words = event_words(e.detail)
        if e.kind == JobEventKind.STARTED:
            runs += 1
            title = "First run started" if runs == 1 else f"Running again (run {runs})"
            out.append(TimelineEntry(e.ts, "run", title, words, status="Running"))
        elif e.kind == JobEventKind.REQUEUED:
            out.append(TimelineEntry(e.ts, "run", "Requeued", words, status="Pending"))
        elif e.kind == JobEventKind.ENDED:
            state = e.get_state_display() if e.state else "ended"
            code = f" (exit {e.exit_code})" if e.exit_code is not None else ""
            out.append(
                TimelineEntry(e.ts, "run", f"Ended: {state.lower()}{code}", words, status=state)
            )
        else:
            out.append(TimelineEntry(e.ts, "run", e.get_kind_display(), words))
    return out


def job_timeline(events: list[JobEvent], incident: list[TimelineEntry]) -> list[TimelineEntry]:
    """Runs, failures, diagnoses, GPU errors and recovery actions in time order (a step at the
    same instant as another keeps its place: a run's end before the failure it opened)."""
    return sorted([*run_entries(events), *incident], key=lambda t: t.ts)
